package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/errs"
	"github.com/lockmw/lockmw/lockmw/internal/store"
	"github.com/redis/go-redis/v9"
)

// This file is the Redlock store's side of the store boundary
// (lockmw/internal/store), and its wake queue (wakeQueue; how
// waiters use it, its policy, is wait_wake.go).

var (
	_ store.Store        = (*Redlock)(nil)
	_ store.Named        = (*Redlock)(nil)
	_ store.LeftNothing  = (*Redlock)(nil)
	_ wakeQueue          = (*Redlock)(nil)
	_ store.FenceRaiser  = (*Redlock)(nil)
	_ store.ClientCloser = (*Redlock)(nil)
)

// Name names the store in messages.
func (b *Redlock) Name() string { return "Redlock" }

// ClientClosed reports whether err says that a master's client was closed
// (store.ClientCloser).
func (b *Redlock) ClientClosed(err error) bool { return errors.Is(err, redis.ErrClosed) }

// CheckTTL accepts every TTL, as one Redis does.
func (b *Redlock) CheckTTL(time.Duration) error { return nil }

// Acquire makes one attempt on the masters (acquireQueued without a wait
// entry). The lease's validity counts from the moment before the first
// round leaves (see the top of redlock.go).
func (b *Redlock) Acquire(ctx context.Context, k store.Key, token string, ttl time.Duration, _ bool) (store.Reply, error) {
	sentAt := time.Now()
	r, err := b.AcquireQueued(ctx, k, token, ttl, "")
	r.ValidFrom = sentAt
	if err == nil && r.Acquired {
		b.describe(ctx, k, token)
	}
	return r.Reply, err
}

// Release releases token's lock on the masters where it may be.
func (b *Redlock) Release(ctx context.Context, k store.Key, token string) (store.Ownership, error) {
	return b.release(ctx, newLockRef(k.Prefix, k.Name), token)
}

// LeftNothing is true for every failed attempt: an attempt rolls back what
// it took on each master itself, and hands the cleaner the masters whose
// rollback got no answer (rollback).
func (b *Redlock) LeftNothing(error) bool { return true }

func (b *Redlock) EnqueueWake(ctx context.Context, lock store.Key, entry string) (queued, maybe bool) {
	k := newLockRef(lock.Prefix, lock.Name)
	n, err := sendOnce(ctx, b.masters[0].client, redis.NewIntCmd(ctx, "rpushx", k.queue, entry)).Result()
	return err == nil && n > 0, err != nil && mayHaveRun(err)
}

func (b *Redlock) PassWake(ctx context.Context, lock store.Key) error {
	k := newLockRef(lock.Prefix, lock.Name)
	return redlockWakeScript.Run(ctx, once{b.masters[0].client}, []string{k.queue}, k.grants).Err()
}

// LeaveWake takes entry out of the wait queue of keys, through the first
// master's queue, keyed by the lock, so that it runs after an attempt of
// the waiter's that may still be on its way there (and queue the entry).
func (b *Redlock) LeaveWake(ctx context.Context, lock store.Key, entry string) error {
	keys := newLockRef(lock.Prefix, lock.Name)
	replies := make(chan masterReply, 1)
	b.masters[0].submit(&masterCall{master: 0, reply: replies, calls: []masterScript{
		{script: redlockLeaveScript, keys: []string{keys.lock, keys.queue}, args: []any{entry}},
	}})
	select {
	case r := <-replies:
		if err := r.cmds[0].Err(); errors.Is(err, errs.ErrClosed) {
			// The store has closed (the waiter outlasted Close's wait for
			// it): the first master's sender sent every call queued
			// before it stopped, the waiter's attempts among them, so the
			// leave goes on its client, after them.
			return b.leaveOnClient(ctx, keys, entry)
		} else if err != nil {
			return err
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// leaveOnClient takes entry out of the wait queue of keys on the first
// master's client itself, once the master's sender (closed) has sent what
// was queued, twice:
// the second is sent after the first is answered, so it runs after an
// attempt of the waiter still stalled in that master (see lockmw's cleanup.go,
// "Why twice").
func (b *Redlock) leaveOnClient(ctx context.Context, keys lockRef, entry string) error {
	select {
	case <-b.masters[0].stopped: // every call queued before has been sent
	case <-ctx.Done():
		return ctx.Err()
	}
	for range 2 {
		if err := redlockLeaveScript.Run(ctx, once{b.masters[0].client}, []string{keys.lock, keys.queue}, entry).Err(); err != nil {
			return err
		}
	}
	return nil
}

// HolderTTL asks every master for the lock's remaining TTL and returns
// when enough of them free up for a quorum (see freeIn); 0 when unknown. A
// master that does not answer within holderTTLWait counts as free.
func (b *Redlock) HolderTTL(ctx context.Context, lock store.Key) time.Duration {
	keys := newLockRef(lock.Prefix, lock.Name)
	replies := b.fanOut([]masterScript{{script: pttlScript, keys: []string{keys.lock}}})
	timer := time.NewTimer(holderTTLWait)
	defer timer.Stop()
	var busy []time.Duration
	for range b.masters {
		select {
		case r := <-replies:
			if d, err := r.cmds[0].Int64(); err == nil && d > 0 {
				busy = append(busy, time.Duration(d)*time.Millisecond)
			}
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		break
	}
	return freeIn(busy, len(busy)-len(b.masters)+b.quorum)
}

// holderTTLWait bounds holderTTL.
const holderTTLWait = 100 * time.Millisecond

// takeBackOn hands the cleaner the lock that token may hold on the Redlock
// masters marked in masters, whose rollback got no answer. It never blocks
// (a master's sender calls it); after Close it gives up at once.
func (b *Redlock) takeBackOn(k lockRef, token string, ttl time.Duration, masters []bool) {
	try := func(ctx context.Context) error { return b.releaseOn(ctx, k, token, masters) }
	if b.giveBack == nil || !b.giveBack(k.Name, time.Now().Add(ttl), try) {
		b.logger.Warn("lockmw: could not give back a lock that a failed acquisition may have taken; it expires after its TTL",
			slog.String("key", k.Name), slog.String("store", "Redlock"), slog.String("reason", "locker closed"))
	}
}

// Watch subscribes to the wakes of this Locker's waiters for k on the
// first master (grants must be true: a Redlock announces no releases).
func (b *Redlock) Watch(ctx context.Context, k store.Key, _ bool) error {
	return b.subs.watch(ctx, b.wakeChannel(k), true)
}

func (b *Redlock) Unwatch(k store.Key, _ bool) { b.subs.unwatch(b.wakeChannel(k)) }

// wakeChannel names k's wake channel for this Locker.
func (b *Redlock) wakeChannel(k store.Key) string { return lockKeyOf(k) + ":g:" + b.self }

// route hands a wake of the subscriber ("<locker id> <waiter id>"'s
// waiter id) to the Locker's events.
func (b *Redlock) route(channel, payload string) {
	base, ok := strings.CutSuffix(channel, ":g:"+b.self)
	if !ok {
		return
	}
	if k, ok := keyOfBase(b.prefix, base); ok {
		b.events.Woken(k, payload)
	}
}

// WakeEntry is "<locker> <token>", as redlock_acquire.lua queues it and
// redlock_release.lua wakes it.
func (b *Redlock) WakeEntry(locker, token string) string { return locker + " " + token }

// RaiseFence raises k's fence counter to each master's clock in
// microseconds (clock_fence.lua) and returns once a quorum has done so: an
// acquisition's fence is the largest counter of a quorum, which shares a
// master with this one (store.FenceRaiser). Masters whose clocks differ
// make that bound looser by the difference.
func (b *Redlock) RaiseFence(ctx context.Context, k store.Key) error {
	r := newLockRef(k.Prefix, k.Name)
	replies := b.fanOut([]masterScript{{script: clockFenceScript, keys: []string{r.lock, r.fence}, args: []any{b.expiry.counter}}})
	n, q := len(b.masters), b.quorum
	var ok, failed int
	var errs []error
	for ok < q && n-failed >= q {
		select {
		case rep := <-replies:
			if err := rep.cmds[0].Err(); err != nil {
				failed++
				errs = append(errs, b.masterErr(rep.master, err))
				continue
			}
			ok++
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if ok < q {
		return fmt.Errorf("fence raised on %d of %d masters, %d needed: %w", ok, n, q, errors.Join(errs...))
	}
	return nil
}
