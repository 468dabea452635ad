package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
	"github.com/redis/go-redis/v9"
)

// This file is the Redis store's granter: releases that hand the
// lock to a waiter in the same step (release.lua, transfer.lua, unlock.lua)
// and the fair queue (fair.lua, leave.lua). Why a hand-over keeps one
// lease live at a time is argued beside granter and in safety.go
// ("How a lease becomes live": Transfer, Fair grant, Early hand-over).

// Unlock releases the lock held by token, acquired without Fair, with the
// short script; fair reports that fair waiters have queued behind it, and
// the lock was left for releaseHandoff.
func (b *Store) Unlock(ctx context.Context, lock store.Key, token string) (o store.Ownership, fair bool, err error) {
	k := b.names.ref(lock)
	reply, err := b.runScript(ctx, reshardPatience, unlockScript, []string{k.lock, k.notify}, token, b.publish)
	if err != nil {
		return 0, false, err
	}
	code, ok := reply.(int64)
	if !ok {
		return 0, false, fmt.Errorf("unlock script returned %T, want an integer", reply)
	}
	if code == unlockFairQueued {
		return 0, true, nil
	}
	return ownershipOf(code), false, nil
}

// ReleaseHandoff releases the lock held by token: it hands it to the first
// live fair waiter, or deletes it and notifies waiting Lockers. early is
// the queue entry of this Locker's fair waiter that was handed the lock
// already, with fence earlyFence ("" when none). queued says that waiters
// were known to be queued behind token: unless early (whose hand-over
// sends no message), releaseFirst sends the release.
func (b *Store) ReleaseHandoff(ctx context.Context, lock store.Key, token, early string, earlyFence uint64, queued bool) (Handoff, error) {
	k := b.names.ref(lock)
	keys := []string{k.lock, k.fence, k.queue, k.notify}
	var reply any
	var err error
	if queued && early == "" && b.plainAcquire && b.expiry.counter != "" {
		reply, err = b.releaseFirst(ctx, k, keys, token)
	} else {
		reply, err = b.runScript(ctx, reshardPatience, releaseScript, keys,
			token, k.grants, b.self, b.publish, early, earlyFence, b.expiry.counter, "")
	}
	if err != nil {
		return Handoff{}, err
	}
	vals, ok := reply.([]any)
	if !ok || len(vals) == 0 {
		return Handoff{}, fmt.Errorf("release script returned %T, want a list", reply)
	}
	code, _ := vals[0].(int64)
	switch code {
	case releaseHandedLocal, releaseHandedRemote:
		want := 4
		if code == releaseHandedLocal {
			want = 5
		}
		if len(vals) != want {
			return Handoff{}, fmt.Errorf("release script returned %d values, want %d", len(vals), want)
		}
		f, _ := vals[1].(int64)
		to, _ := vals[2].(string)
		h := Handoff{Ownership: store.Owned, To: to, Fence: uint64(f), Local: code == releaseHandedLocal}
		if h.Local {
			r, _ := vals[3].(int64)
			h.Reserved = uint64(r)
			h.Next, _ = vals[4].(string)
			h.More = h.Next != ""
		} else {
			more, _ := vals[3].(int64)
			h.More = more == 1
		}
		return h, nil
	}
	return Handoff{Ownership: ownershipOf(code)}, nil
}

// Transfer hands the lock held by token to the waiting token to (of the same
// Locker) in one round trip; unless force, only when nobody else waits.
func (b *Store) Transfer(ctx context.Context, lock store.Key, token, to string, ttl time.Duration, force bool) (TransferReply, error) {
	k := b.names.ref(lock)
	f := "0"
	if force {
		f = "1"
	}
	reply, err := b.runScript(ctx, ttl/4, transferScript, []string{k.lock, k.fence, k.notify},
		token, to, millis(ttl), b.numsub, b.publish, f, b.expiry.counter)
	if err != nil {
		return TransferReply{}, err
	}
	vals, err := int64s(reply)
	if err != nil || len(vals) == 0 {
		return TransferReply{}, fmt.Errorf("transfer script: %v", err)
	}
	switch vals[0] {
	case transferDone:
		if len(vals) != 3 {
			return TransferReply{}, fmt.Errorf("transfer script returned %d values, want 3", len(vals))
		}
		// The script draws two fences: the waiter's (one below the
		// counter it leaves; a forced transfer's waiter keeps the one
		// reserved for it earlier) and one reserved for the waiter's own
		// next hand-over, unless others wait (transfer.lua).
		counter := uint64(vals[1])
		t := TransferReply{Done: true, Fence: counter - 1, Ownership: store.Owned}
		if vals[2] != 1 {
			t.Reserved = counter
		}
		return t, nil
	case transferFairQueue:
		return TransferReply{FairQueue: true}, nil
	}
	return TransferReply{Ownership: ownershipOf(vals[0])}, nil
}

// FairAcquire makes one fair attempt for the waiter with queue entry entry.
func (b *Store) FairAcquire(ctx context.Context, lock store.Key, token string, ttl time.Duration, entry string, mode FairMode) (FairReply, error) {
	k := b.names.ref(lock)
	var vals []int64
	err := b.whileSlotMoves(ctx, ttl/4, func() (err error) {
		vals, err = fairScript.Run(ctx, once{b.client}, []string{k.lock, k.fence, k.queue},
			token, millis(ttl), entry, string(mode), k.grants, b.publish, b.expiry.counter, b.expiry.queue).Int64Slice()
		return err
	})
	if err != nil {
		return FairReply{}, err
	}
	if len(vals) < 2 {
		return FairReply{}, fmt.Errorf("fair script returned %d values, want at least 2", len(vals))
	}
	switch vals[0] {
	case fairAcquired:
		return FairReply{Acquired: true, Fence: uint64(vals[1])}, nil
	case fairGranted:
		if len(vals) != 3 {
			return FairReply{}, fmt.Errorf("fair script returned %d values, want 3", len(vals))
		}
		return FairReply{Granted: true, Fence: uint64(vals[1]), Pttl: time.Duration(max(vals[2], 0)) * time.Millisecond}, nil
	}
	if len(vals) != 3 {
		return FairReply{}, fmt.Errorf("fair script returned %d values, want 3", len(vals))
	}
	return FairReply{Pttl: time.Duration(max(vals[1], 0)) * time.Millisecond, Counter: uint64(max(vals[2], 0))}, nil
}

// Enqueue appends entry to the lock's fair queue if the queue exists (one
// plain RPUSHX): the cheap way to queue behind a lock known to be busy. It
// reports false when there is no queue, and the full fair attempt is needed.
func (b *Store) Enqueue(ctx context.Context, lock store.Key, entry string) (bool, error) {
	k := b.names.ref(lock)
	n, err := sendOnce(ctx, b.client, redis.NewIntCmd(ctx, "rpushx", k.queue, entry)).Result()
	return n > 0, err
}

// FairQueued reports whether waiters may be queued for the lock in Redis:
// its holder's value is marked (see grant.lua), or the queue's list exists
// (its first waiter may be kept in the value instead). One round trip.
func (b *Store) FairQueued(ctx context.Context, lock store.Key) (bool, error) {
	k := b.names.ref(lock)
	var get *redis.StringCmd
	var exists *redis.IntCmd
	_, _ = b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		get, exists = p.Get(ctx, k.lock), p.Exists(ctx, k.queue)
		return nil
	}) // errors are read from the commands
	v, err := get.Result()
	if errors.Is(err, redis.Nil) {
		v, err = "", nil
	}
	if err != nil {
		return false, err
	}
	n, err := exists.Result()
	return n > 0 || strings.Contains(v, "+"), err
}

// Leave takes entry out of the fair queue. It reports whether the lock had
// been granted to token meanwhile (the caller must then release it).
func (b *Store) Leave(ctx context.Context, lock store.Key, entry, token string) (bool, error) {
	k := b.names.ref(lock)
	var v int64
	err := b.whileSlotMoves(ctx, reshardPatience, func() (err error) {
		v, err = leaveScript.Run(ctx, once{b.client}, []string{k.lock, k.queue}, entry, token).Int64()
		return err
	})
	return v == leaveGranted, err
}

// FairEntry is "<locker> <token> <ttl in ms>", as fair.lua and grant.lua
// read it.
func (b *Store) FairEntry(locker, token string, ttl time.Duration) string {
	return locker + " " + token + " " + strconv.FormatInt(millis(ttl), 10)
}

// EntryOwner reads a fair queue entry (FairEntry).
func (b *Store) EntryOwner(entry string) (locker, token string) {
	locker, rest, _ := strings.Cut(entry, " ")
	token, _, _ = strings.Cut(rest, " ")
	return locker, token
}

// Moving reports a Cluster slot migration (slotMoving).
func (b *Store) Moving(err error) bool { return slotMoving(err) }

// releaseFirst runs the release script for a likely hand-over to a waiter
// queued in Redis, on one server (no slots move), with the counter's PEXPIRE sent
// just before it in the same pipeline instead of inside it (release.lua's
// ARGV[8]): the same commands, in another order, and nothing else changes
// in the store (PEXPIRE then INCRBY leaves the counter as INCRBY then
// PEXPIRE; a counter missing at the PEXPIRE is seeded by the draw with its
// expiry, as before; a release that draws nothing has refreshed the
// counter's expiry, which never lets a fence fall). What it changes is
// the order of Redis's writes: Redis writes the replies and messages of
// one event-loop turn last-queued first, so the script's grant message was
// written after the releaser's reply, which was queued after it; with the
// PEXPIRE's reply queued before the script runs, the grant message is
// written first, and the waiter's process wakes before the releaser's.
func (b *Store) releaseFirst(ctx context.Context, k lockRef, keys []string, token string) (any, error) {
	c := &releaseCall{fence: k.fence, keep: b.expiry.counter, keys: keys,
		args: []any{token, k.grants, b.self, b.publish, "", 0, b.expiry.counter, "1"}}
	b.batch.runPlain(ctx, k.lock, c)
	return c.cmd.Result()
}

// releaseCall is releaseFirst's round trip (a plainCall): PEXPIRE of the
// counter, then the release script, resent in full after NOSCRIPT.
type releaseCall struct {
	fence, keep string
	keys        []string
	args        []any
	cmd         *redis.Cmd
}

func (c *releaseCall) queue(ctx context.Context, pipe redis.Pipeliner) {
	sendOnce(ctx, pipe, redis.NewIntCmd(ctx, "pexpire", c.fence, c.keep))
	c.cmd = releaseScript.EvalSha(ctx, once{pipe}, c.keys, c.args...)
}

func (c *releaseCall) err() error { return c.cmd.Err() }

func (c *releaseCall) fail(err error) {
	c.cmd = redis.NewCmd(context.Background())
	c.cmd.SetErr(err)
}

// followUp resends the script in full when Redis did not have it cached.
func (c *releaseCall) followUp(rs *resend) {
	if noScript(c.cmd.Err()) {
		c.cmd = rs.eval(releaseScript, c.keys, c.args...)
	}
}
