package lockmw

import (
	"context"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
	"github.com/redis/go-redis/v9"
)

// This file is the Redlock store's side of the store boundary
// (lockmw/internal/store), and its wake queue (wakeQueue, backend.go; how
// waiters use it is redlock_wait.go).

var (
	_ store.Store       = (*redlockBackend)(nil)
	_ store.Named       = (*redlockBackend)(nil)
	_ store.LeftNothing = (*redlockBackend)(nil)
	_ wakeQueue         = (*redlockBackend)(nil)
)

// Name names the store in messages.
func (b *redlockBackend) Name() string { return "Redlock" }

// CheckTTL accepts every TTL, as one Redis does.
func (b *redlockBackend) CheckTTL(time.Duration) error { return nil }

// Acquire makes one attempt on the masters (acquireQueued without a wait
// entry). The lease's validity counts from the moment before the first
// round leaves (see the top of redlock.go).
func (b *redlockBackend) Acquire(ctx context.Context, k store.Key, token string, ttl time.Duration, _ bool) (store.Reply, error) {
	sentAt := time.Now()
	r, err := b.acquireQueued(ctx, newLockRef(k.Prefix, k.Name), token, ttl, "")
	r.ValidFrom = sentAt
	return r.Reply, err
}

// Release releases token's lock on the masters where it may be.
func (b *redlockBackend) Release(ctx context.Context, k store.Key, token string) (store.Ownership, error) {
	return b.release(ctx, newLockRef(k.Prefix, k.Name), token)
}

// LeftNothing is true for every failed attempt: an attempt rolls back what
// it took on each master itself, and hands the cleaner the masters whose
// rollback got no answer (rollback).
func (b *redlockBackend) LeftNothing(error) bool { return true }

// wakeQueue is the Redlock store's wait queue on its first master:
// attempts that queue the waiter's entry when they find the lock held, and
// wakes of one waiter at a time (redlock_wait.go).
type wakeQueue interface {
	// acquireQueued is one attempt; entry, if not empty, is queued on the
	// first member when it finds the lock held there.
	acquireQueued(ctx context.Context, k lockRef, token string, ttl time.Duration, entry string) (queuedReply, error)
	// enqueueWake queues entry behind a lock known to be contended
	// (RPUSHX: only into an existing queue). maybe says the request
	// failed but may have queued it.
	enqueueWake(ctx context.Context, k lockRef, entry string) (queued, maybe bool)
	// passWake wakes the next waiter of the lock.
	passWake(ctx context.Context, k lockRef) error
	// leaveWake takes entry out of the queue, after every attempt of its
	// waiter that is still on its way there.
	leaveWake(ctx context.Context, k lockRef, entry string) error
	// holderTTL is the holder's remaining TTL, 0 when unknown.
	holderTTL(ctx context.Context, k lockRef) time.Duration
	// subscriber hears the wakes.
	subscriber() *subscriber
}

func (b *redlockBackend) subscriber() *subscriber { return b.subs }

func (b *redlockBackend) enqueueWake(ctx context.Context, k lockRef, entry string) (queued, maybe bool) {
	n, err := sendOnce(ctx, b.masters[0].client, redis.NewIntCmd(ctx, "rpushx", k.queue, entry)).Result()
	return err == nil && n > 0, err != nil && mayHaveRun(err)
}

func (b *redlockBackend) passWake(ctx context.Context, k lockRef) error {
	return redlockWakeScript.Run(ctx, once{b.masters[0].client}, []string{k.queue}, k.grants).Err()
}
