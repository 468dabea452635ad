package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/errs"
	"github.com/lockmw/lockmw/lockmw/internal/store"
	"github.com/redis/go-redis/v9"
)

// This file is how scripts reach Redis beyond one plain call: they are
// retried for a moment while the lock's Cluster slot is being moved between
// masters, and the acquire script is followed by WAIT on the same
// connection when the Locker asks for replica acknowledgement
// (WithWaitReplicas).

// While a Cluster slot migrates, a script that touches several keys of it
// is refused (TRYAGAIN, or ASK/MOVED once go-redis has used up its
// redirections) until all of them are on one master; lockmw's scripts
// (but renew) name several keys of the lock's slot. Such a call is retried,
// with a capped backoff, for up to reshardPatience, and an acquisition for
// at most a quarter of its lease TTL, so the lease keeps most of its
// validity. These errors mean the script did not run, so retrying is safe.
// A resharding moves one slot's keys in milliseconds; a slot that stays
// half-migrated longer (a stalled or failed resharding) makes calls fail
// with ErrUnavailable.
const (
	reshardPatience   = time.Second
	reshardBackoffMax = 16 * time.Millisecond
)

// A release or hand-over is retried never past the validity deadline of
// the lease it gives up (store.WithValidity; lockmw's Locker.releaseLease
// sets it): once it has passed, the lease's token may be gone from Redis
// and the lock taken by another, and a waiter that the release started
// early, under that validity (lockmw's handover.go), has stopped at it;
// trying on would only install the waiter's token where nobody uses it
// (the lock then stays held for the waiter's TTL) or answer for a lock
// that is no longer ours. A transfer, which grants the waiter a lease
// whose validity counts from the first send, retries for at most a
// quarter of that lease's TTL as well.
//
// whileSlotMoves serves the calls sent beside the batcher (fair, leave,
// WAIT); those sent through it are retried there, in their round trip,
// so that a later call of the same lock cannot come in between
// (batch.go).

// giveUpAt is when a call made under ctx now, with patience, stops retrying
// while its slot moves.
func giveUpAt(ctx context.Context, patience time.Duration) time.Time {
	giveUp := time.Now().Add(min(patience, reshardPatience))
	if d, ok := store.ValidUntil(ctx); ok && d.Before(giveUp) {
		giveUp = d
	}
	return giveUp
}

// whileSlotMoves runs call, and runs it again while it fails because the
// Cluster slot of its keys is being moved, for up to patience.
func (b *Store) whileSlotMoves(ctx context.Context, patience time.Duration, call func() error) error {
	backoff := time.Millisecond
	giveUp := giveUpAt(ctx, patience)
	for {
		err := call()
		if err == nil || !slotMoving(err) || time.Now().Add(backoff).After(giveUp) {
			return err
		}
		if cc, ok := b.client.(*redis.ClusterClient); ok {
			cc.ReloadState(ctx) // MasterForKey (WAIT path) follows the new owner
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		backoff = min(2*backoff, reshardBackoffMax)
	}
}

// runScript runs script through the batcher, retrying while the keys' slot
// is being moved.
func (b *Store) runScript(ctx context.Context, patience time.Duration, script *redis.Script, keys []string, args ...any) (any, error) {
	return b.batch.run(ctx, giveUpAt(ctx, patience), script, keys, args...)
}

// runAcquire makes one acquisition attempt for k: with the acquire script,
// or on one server (plainAcquire) with plain commands, which Redis runs for
// less than the script.
func (b *Store) runAcquire(ctx context.Context, k lockRef, token string, ttl time.Duration) (reply store.Reply, err error) {
	var vals []int64
	switch {
	case b.waitReplicas > 0:
		moving := false // after TRYAGAIN, as in the default case below
		err = b.whileSlotMoves(ctx, ttl/4, func() (err error) {
			vals, err = b.acquireReplicated(ctx, k, token, ttl, moving)
			moving = moving || slotMoving(err)
			return err
		})
	case b.plainAcquire:
		var fence int64
		reply.Acquired, fence, reply.HolderTTL, err = b.setNX(ctx, k, token, time.Duration(millis(ttl))*time.Millisecond)
		if err != nil && reply.Acquired {
			// Taken, but no fence drawn: give it back.
			_, _, _ = b.Unlock(context.WithoutCancel(ctx), k.Key, token)
		}
		reply.Fence = uint64(fence)
		return reply, err
	default:
		var r any
		// One try with the queue check (acquire.lua); while the lock's
		// slot is being migrated Redis refuses it (TRYAGAIN) whenever one
		// of its three keys is missing on the node asked, as the queue
		// usually is, so the attempt then goes without the queue check
		// (acquire_moving.lua, two keys: refused only while the lock and
		// its counter are split), retried as the slot moves. Safety is the
		// same (safety.go, "How a lease becomes live": Acquisition); only
		// Fair order after a holder's expiry is not kept during that slot's
		// migration (doc.go, "Waiting and hand-overs": Fair order).
		r, err = b.runScript(ctx, 0, acquireScript, []string{k.lock, k.fence, k.queue}, token, millis(ttl), b.expiry.counter, k.grants, b.publish)
		if err != nil && slotMoving(err) {
			r, err = b.runScript(ctx, ttl/4, acquireMovingScript, []string{k.lock, k.fence}, token, millis(ttl), b.expiry.counter)
		}
		if err == nil {
			vals, err = int64s(r)
		}
	}
	if err == nil {
		reply, err = acquireReplyOf(vals)
	}
	return reply, err
}

// acquireReplyOf reads the acquire script's reply: {1, fence} or {0, pttl}.
func acquireReplyOf(vals []int64) (store.Reply, error) {
	if len(vals) != 2 {
		return store.Reply{}, fmt.Errorf("acquire script returned %d values, want 2", len(vals))
	}
	if vals[0] == acquireTaken {
		return store.Reply{Acquired: true, Fence: uint64(vals[1])}, nil
	}
	return store.Reply{HolderTTL: time.Duration(max(vals[1], 0)) * time.Millisecond}, nil
}

// slotMoving reports whether err means a Cluster slot is being migrated
// and the command was not run.
func slotMoving(err error) bool {
	if redis.IsTryAgainError(err) {
		return true
	}
	if _, ok := redis.IsAskError(err); ok {
		return true
	}
	_, ok := redis.IsMovedError(err)
	return ok
}

// acquireReplicated runs the acquire script and WAIT in one pipeline on one
// connection to the lock's master (WAIT counts the replicas that have the
// writes of its own connection). If the lock was taken but fewer than
// b.waitReplicas replicas acknowledged it within b.waitTimeout, the lock is
// released again and the error matches errs.ErrNotReplicated.
//
// moving says that the lock's Cluster slot is being migrated: the attempt
// goes without the queue check (acquire_moving.lua; see runAcquire).
func (b *Store) acquireReplicated(ctx context.Context, k lockRef, token string, ttl time.Duration, moving bool) ([]int64, error) {
	var node redis.Cmdable = b.client
	if cc, ok := b.client.(*redis.ClusterClient); ok {
		n, err := cc.MasterForKey(ctx, k.lock)
		if err != nil {
			return nil, err
		}
		node = n
	}
	keys, args, script := []string{k.lock, k.fence, k.queue}, []any{token, millis(ttl), b.expiry.counter, k.grants, b.publish}, acquireScript
	if moving {
		keys, args, script = []string{k.lock, k.fence}, []any{token, millis(ttl), b.expiry.counter}, acquireMovingScript
	}
	var acq *redis.Cmd
	var wait *redis.IntCmd
	run := func(script func(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd) {
		_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
			acq = script(ctx, once{p}, keys, args...)
			wait = redis.NewIntCmd(ctx, "wait", b.waitReplicas, b.waitTimeout.Milliseconds())
			_ = p.Process(ctx, wait)
			return nil
		}) // errors are read from the commands below
	}
	run(script.EvalSha)
	if noScript(acq.Err()) {
		run(script.Eval) // a restarted or new master: send the script in full
	}
	vals, err := acq.Int64Slice()
	if err != nil || len(vals) != 2 || vals[0] != acquireTaken {
		return vals, err // not taken: nothing to wait for
	}
	acked, err := wait.Result()
	if err == nil && acked >= int64(b.waitReplicas) {
		return vals, nil
	}
	if err == nil {
		err = fmt.Errorf("%w: %d of %d replicas acknowledged the lock within %v", errs.ErrNotReplicated, acked, b.waitReplicas, b.waitTimeout)
	} else {
		err = fmt.Errorf("%w: WAIT %d %v: %w", errs.ErrNotReplicated, b.waitReplicas, b.waitTimeout, err)
	}
	// Roll back: the lock must not stay with a holder who was told no.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
	defer cancel()
	if _, rerr := b.ReleaseHandoff(rctx, k.Key, token, "", 0, false); rerr != nil {
		err = errors.Join(err, fmt.Errorf("rolling back (the lock expires after its TTL): %w", rerr))
	}
	return nil, err
}

// checkWaitTimeout rejects a WAIT timeout that the client's ReadTimeout
// would cut short: WAIT's reply comes in the same pipelined read as the
// acquire script's.
func (b *Store) checkWaitTimeout() error {
	if b.waitReplicas == 0 {
		return nil
	}
	var rt time.Duration
	switch c := b.client.(type) {
	case *redis.Client:
		rt = c.Options().ReadTimeout
	case *redis.ClusterClient:
		rt = c.Options().ReadTimeout
	}
	if rt > 0 && b.waitTimeout >= rt {
		return fmt.Errorf("%w: WithWaitReplicas(%d, %v): the timeout must be shorter than the client's ReadTimeout (%v), which bounds WAIT's reply: lower it or raise ReadTimeout",
			errs.ErrInvalidOption, b.waitReplicas, b.waitTimeout, rt)
	}
	return nil
}

// setNXCall is a plain acquisition (plainCall): SET NX PX of the lock key,
// INCR of its fence counter, PEXPIRE of the counter (unless counters never
// expire), PTTL of the lock key and EXISTS of its queue, sent together and
// run by Redis one after the other; and, as its follow-up (followUp), the
// seed script when the INCR found the counter missing (below
// seededFloor), and yield.lua when the SET took the lock while waiters
// were queued.
type setNXCall struct {
	lock, fence, token string
	queueKey, grants   string // the lock's queue, its grant channel prefix
	publish            string // PUBLISH, or SPUBLISH on Cluster
	keep               string // the counter's expiry in ms, "" for never
	ttl                time.Duration
	set                *redis.BoolCmd
	incr               *redis.IntCmd
	pttl               *redis.DurationCmd
	queued             *redis.IntCmd
	seed               *redis.Cmd // the follow-up's draw, if it was needed
	yield              *redis.Cmd // the follow-up's hand-over to the queue, if it was needed
}

func (c *setNXCall) queue(ctx context.Context, pipe redis.Pipeliner) {
	c.set = sendOnce(ctx, pipe, redis.NewBoolCmd(ctx, "set", c.lock, c.token, "px", c.ttl.Milliseconds(), "nx"))
	c.incr = sendOnce(ctx, pipe, redis.NewIntCmd(ctx, "incr", c.fence))
	if c.keep != "" {
		sendOnce(ctx, pipe, redis.NewIntCmd(ctx, "pexpire", c.fence, c.keep))
	}
	c.pttl = pipe.PTTL(ctx, c.lock)
	c.queued = pipe.Exists(ctx, c.queueKey)
}

func (c *setNXCall) err() error { return c.set.Err() }

func (c *setNXCall) fail(err error) {
	c.set = redis.NewBoolCmd(context.Background())
	c.set.SetErr(err)
}

// followUp draws the fence again, with the seed script, when the INCR found
// the counter missing (or counted from 1 by an older version): that INCR's
// value is below every fence drawn before the counter was lost, and is
// never used. And when the SET took a free lock while waiters were queued
// (the holder's key expired, or a grant went unclaimed), it hands the lock
// to the first live one (yield.lua), after the seed: a later comer does not
// overtake the queue (doc.go, "Waiting and hand-overs": Fair order). Both go in the follow-up round trip of the same batch, so the
// lock's next call leaves after them (batch.go).
func (c *setNXCall) followUp(rs *resend) {
	if c.keep != "" && c.incr.Err() == nil && c.incr.Val() < seededFloor {
		c.seed = rs.eval(seedScript, []string{c.fence}, c.keep)
	}
	if c.set.Err() == nil && c.set.Val() && c.queued.Err() == nil && c.queued.Val() > 0 {
		c.yield = rs.eval(yieldScript, []string{c.lock, c.fence, c.queueKey}, c.token, c.grants, c.publish, c.keep)
	}
}

// setNXCalls recycles setNXCalls: an acquisition allocates none.
var setNXCalls = sync.Pool{New: func() any { return new(setNXCall) }}

// setNX takes the lock key for token for ttl without a script, and draws a
// fence from the counter, in one round trip of the batcher (two when the
// counter was missing, see followUp). It returns the
// fence n when the lock was taken (acquired; with an error, the lock was
// taken but no fence drawn), else the holder's remaining TTL (0 when
// unknown). The counter moves on either way: a fence drawn by a failed
// attempt is never used, and the next holder draws after this one's SET
// failed, so fences still increase from holder to holder.
func (b *Store) setNX(ctx context.Context, k lockRef, token string, ttl time.Duration) (acquired bool, n int64, holderTTL time.Duration, err error) {
	c := setNXCalls.Get().(*setNXCall)
	defer func() {
		*c = setNXCall{}
		setNXCalls.Put(c)
	}()
	c.lock, c.fence, c.token, c.keep, c.ttl = k.lock, k.fence, token, b.expiry.counter, ttl
	c.queueKey, c.grants, c.publish = k.queue, k.grants, b.publish
	b.batch.runPlain(ctx, k.lock, c)
	if acquired, err = c.set.Result(); err != nil || !acquired {
		if err == nil {
			holderTTL, err = c.pttl.Result()
			holderTTL = max(holderTTL, 0) // -1: no expiry, -2: gone
		}
		return false, 0, holderTTL, err
	}
	if c.queued.Err() != nil {
		// Taken, not known whether waiters are queued: give it back (not
		// wrapped, see runAcquire).
		return true, 0, 0, fmt.Errorf("lock set but the queue not checked: %v", c.queued.Err())
	}
	if c.yield != nil {
		vals, err := c.yield.Int64Slice()
		switch {
		case err != nil:
			// It may have been handed on, or may still be token's: give
			// back whatever token holds (not wrapped, see runAcquire).
			return true, 0, 0, fmt.Errorf("lock set but the queued waiters not served: %v", err)
		case len(vals) == 2 && vals[0] == acquireBusy:
			return false, 0, time.Duration(max(vals[1], 0)) * time.Millisecond, nil
		case len(vals) != 1 || vals[0] != acquireTaken:
			return true, 0, 0, fmt.Errorf("yield script returned %v, want {1} or {0, pttl}", vals)
		}
	}
	if c.seed != nil {
		n, err = c.seed.Int64()
	} else {
		n, err = c.incr.Result()
	}
	return true, n, 0, err
}
