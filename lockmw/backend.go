package lockmw

import (
	"context"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is what the Locker finds in its store beyond store.Store: the
// capabilities of package store (found in newLocker), and those that only
// the Redis stores of this package have, by which a release hands the lock
// to a waiter in the same step (waitBackend: the Redis store of New) and a
// waiter is woken from a queue on one member (wakeQueue: the Redlock store
// of NewRedlock). Every store, Redis included, keeps its locks behind
// store.Store: the Locker acquires, releases and renews through it alone.

// ownership is what a compare-and-act step found (store.Ownership).
type ownership = store.Ownership

// What a compare-and-act step found.
const (
	owned   = store.Owned   // the caller's token: the action was done
	missing = store.Missing // no lock: expired or deleted
	taken   = store.Taken   // another owner's token: left untouched
)

// lostReason maps a failed compare-and-act to the reason the lease is lost.
func lostReason(o ownership) LostReason {
	if o == taken {
		return LostTaken
	}
	return LostExpired
}

// caps are the optional capabilities of a Locker's store, found once by
// type assertion (newLocker).
type caps struct {
	notifier    store.Notifier    // nil: waiters back off
	queue       store.Queue       // nil: no Fair through a queue
	fairOnly    bool              // queue is for Fair waiters only (store.FairOnly)
	leftNothing store.LeftNothing // nil: every failed acquisition is given back
	// backoffMin and backoffMax bound a waiter's backoff between attempts:
	// the store's (store.Backoff), else minBackoff and maxBackoff.
	backoffMin, backoffMax time.Duration
	waits                  waitBackend // the Redis store of New: hand-overs and fair queues
	wakes                  wakeQueue   // the Redlock store: waiters woken from a queue
}

// waitBackend is what the Redis store of New offers for waiting without
// polling: release notifications, hand-over to a waiter in the release's
// own step, and fair queues with grants (redis.go).
type waitBackend interface {
	watcher
	releaseHandoff(ctx context.Context, k store.Key, token, early string, earlyFence uint64) (handoff, error)
	unlock(ctx context.Context, k store.Key, token string) (o ownership, fair bool, err error)
	transfer(ctx context.Context, k store.Key, token, to string, ttl time.Duration, force bool) (transferReply, error)
	fairAcquire(ctx context.Context, k store.Key, token string, ttl time.Duration, entry string, mode fairMode) (fairReply, error)
	enqueue(ctx context.Context, k store.Key, entry string) (bool, error)
	leave(ctx context.Context, k store.Key, entry, token string) (bool, error)
	fairQueued(ctx context.Context, k store.Key) (bool, error)
}

// watcher is a store that tells its Locker about a lock: its releases
// (grants false), or the grants and wakes for this Locker's waiters
// (grants true). What it hears goes to the Locker's events (storeEvents).
type watcher interface {
	// watch listens for k's events until unwatch; it returns once
	// listening, or ctx's error.
	watch(ctx context.Context, k store.Key, grants bool) error
	unwatch(k store.Key, grants bool)
}

// storeEvents is what a watcher tells its Locker.
type storeEvents struct {
	// released: k was released; a default-mode waiter may try.
	released func(k store.Key)
	// granted: k was handed to this Locker's fair waiter (grant), or the
	// store's message could not be read (ok false).
	granted func(k store.Key, g grant, ok bool)
	// woken: the Redlock waiter with entry token is woken for k.
	woken func(k store.Key, token string)
}

// grant is a hand-over to a fair waiter that the store announced.
type grant struct {
	token    string // the waiter's
	fence    uint64
	reserved uint64 // the fence reserved for the next local hand-over, or 0
	next     string // the entry of the waiter now first in line, or ""
}
