package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
	"github.com/redis/go-redis/v9"
)

// This file is the wire protocol: every script lockmw runs on Redis and,
// beside each, the reply codes it answers with, as its scripts/*.lua file
// documents them (each states its KEYS, ARGV and returns); and the one way
// scripts are sent: by SHA, resent in full (EVAL) when a node answers
// NOSCRIPT (a restarted or new node, SCRIPT FLUSH), within the same call's
// round trips (see evalOnce and resend).

// keyExpiry is what the scripts are told about expiry: counter is the
// fence counter's expiry in milliseconds ("" when counters never expire:
// fence.lua's fence_keep), queue the fair queue's.
type keyExpiry struct {
	counter string
	queue   string
}

// newKeyExpiry returns the keyExpiry of a Locker's retention (and of
// WithPermanentFences: permanent).
func newKeyExpiry(retention time.Duration, permanent bool) keyExpiry {
	ms := strconv.FormatInt(millis(retention), 10)
	if permanent {
		return keyExpiry{queue: ms}
	}
	return keyExpiry{counter: ms, queue: ms}
}

// The codes of the compare-and-act scripts (renew, unlock, release,
// transfer, redlock_release, redlock_renew) for what they found under the
// lock key: the reply, or its first value (see ownershipOf).
const (
	replyOwned   = 1 // the caller's token: the action was done
	replyMissing = 0 // no lock: expired or deleted
	// Any other reply, -1, is another owner's token: left untouched.
)

// fence.lua: draw, how every script that writes a fence counter moves it
// (prepended to those scripts): it keeps the counter's expiry and seeds a
// missing counter from the server clock. seed.lua draws with it after a
// plain acquisition (no script) found the counter missing: its INCR
// answered below seededFloor. Answers the fence.
var (
	//go:embed scripts/fence.lua
	fenceSource string
	//go:embed scripts/seed.lua
	seedSource string
	seedScript = redis.NewScript(fenceSource + seedSource)
)

// seededFloor is fence.lua's floor: a counter below it was missing (INCR
// started it) or counted from 1 by an older version, and is seeded from the
// server clock in microseconds (always above it) before a fence is drawn.
const seededFloor = 1_000_000_000_000_000

// acquire.lua (grant.lua prepended: a free lock with waiters queued goes to
// the first live one): take the lock if it is free and draw the next fence.
// Answers {acquireTaken, fence} or {acquireBusy, pttl} (pttl: the holder's
// remaining milliseconds, -1 if it has no expiry). redlock_acquire.lua
// answers the same, and so does a plain Redlock acquisition
// (masterScript), with pttl 0. yield.lua is a plain acquisition's
// follow-up when it took a free lock with waiters queued (setNX): answers
// {acquireTaken} when the lock stays the caller's, {acquireBusy, pttl}
// when it went to a queued waiter.
var (
	//go:embed scripts/acquire.lua
	acquireSource string
	//go:embed scripts/acquire_moving.lua
	acquireMovingSource string
	//go:embed scripts/yield.lua
	yieldSource string
)

const (
	acquireTaken = 1 // {1, fence}: the lock was taken
	acquireBusy  = 0 // {0, pttl}: another owner holds it
)

// release.lua (with grant.lua, a function that release.lua and fair.lua
// share, prepended): give up the lock, handing it to the first live fair
// waiter, or else notifying the waiters. Answers {replyOwned} when the lock
// was deleted (and the release notified), {releaseHandedLocal, fence,
// token, reserved, next} or {releaseHandedRemote, fence, token, more} when
// it was handed to a fair waiter, {replyMissing} or {-1}.
var (
	//go:embed scripts/release.lua
	releaseSource string
	//go:embed scripts/grant.lua
	grantSource   string
	releaseScript = redis.NewScript(fenceSource + grantSource + releaseSource)
	acquireScript = redis.NewScript(fenceSource + grantSource + acquireSource)
	// acquireMovingScript is acquireScript without the queue (runAcquire).
	acquireMovingScript = redis.NewScript(fenceSource + acquireMovingSource)
	yieldScript         = redis.NewScript(fenceSource + grantSource + yieldSource)
)

const (
	releaseHandedLocal  = 2 // to a waiter of the calling Locker, which hands it over itself
	releaseHandedRemote = 3 // to a waiter of another Locker, told on its grant channel
)

// renew.lua: extend the lock's expiry if the caller still owns it. Answers
// replyOwned (extended), replyMissing or -1.
var (
	//go:embed scripts/renew.lua
	renewSource string
	renewScript = redis.NewScript(renewSource)
)

// fair.lua (with grant.lua): take the lock in arrival order, or join its
// queue. Answers {fairAcquired, fence}, {fairGranted, fence, pttl} or
// {0, pttl, counter}.
var (
	//go:embed scripts/fair.lua
	fairSource string
	fairScript = redis.NewScript(fenceSource + grantSource + fairSource)
)

const (
	fairAcquired = 1 // {1, fence}: the lock was taken
	fairGranted  = 2 // {2, fence, pttl}: it had been granted to this waiter already
	// Any other, 0: {0, pttl, counter}, another owner holds it (the
	// waiter is queued, unless "try").
)

// leave.lua: take a waiter that gives up out of the fair queue. Answers
// leaveGranted when the lock had been granted to the waiter already (the
// caller must release it), else 0.
var (
	//go:embed scripts/leave.lua
	leaveSource string
	leaveScript = redis.NewScript(leaveSource)
)

const leaveGranted = 1

// transfer.lua: hand the lock straight to a waiter of the caller's own
// Locker. Answers {transferDone, counter, others}; {replyOwned} when others
// wait and the lock was deleted and the release published, for all to
// try; {transferFairQueue}; {replyMissing} or {-1}.
var (
	//go:embed scripts/transfer.lua
	transferSource string
	transferScript = redis.NewScript(fenceSource + transferSource)
)

const (
	transferDone      = 2 // {2, counter, others}: the lock now belongs to the waiter
	transferFairQueue = 3 // {3}: fair waiters are queued; release with release.lua
)

// unlock.lua: release.lua's short way, for a lease acquired without Fair.
// Answers replyOwned (deleted and notified), unlockFairQueued,
// replyMissing or -1.
var (
	//go:embed scripts/unlock.lua
	unlockSource string
	unlockScript = redis.NewScript(unlockSource)
)

const unlockFairQueued = 2 // fair waiters have queued behind it: left for release.lua

// Redlock's scripts. Acquisition and renewal are the single-deployment
// ones (acquire.lua, renew.lua); release has no queue or notification to
// serve, and the fence round is Redlock's own.
var (
	//go:embed scripts/raise.lua
	raiseSource string
	//go:embed scripts/redlock_release.lua
	redlockReleaseSource string
	//go:embed scripts/redlock_acquire.lua
	redlockAcquireSource string
	//go:embed scripts/redlock_wake.lua
	redlockWakeSource string
	//go:embed scripts/redlock_renew.lua
	redlockRenewSource string

	raiseScript          = redis.NewScript(raiseSource)
	redlockReleaseScript = redis.NewScript(redlockReleaseSource)
	redlockAcquireScript = redis.NewScript(fenceSource + redlockAcquireSource)
	redlockWakeScript    = redis.NewScript(redlockWakeSource)
	redlockRenewScript   = redis.NewScript(redlockRenewSource)
)

// clock_fence.lua raises a fence counter to the server's clock (RaiseFence).
var (
	//go:embed scripts/clock_fence.lua
	clockFenceSource string
	clockFenceScript = redis.NewScript(clockFenceSource)
)

// raise.lua answers raiseHeld when the caller's token holds the lock on the
// master (the raise counts towards the quorum), 0 otherwise.
const raiseHeld = 1

// redlock_release.lua answers redlockReleaseWoke when the lock was deleted
// and a waiter woken, replyOwned when it was deleted (nobody to wake),
// replyMissing or -1.
const redlockReleaseWoke = 2

// redlock_renew.lua answers replyOwned (extended), redlockRenewRetaken
// when it took the lock on a master where the lease was never held,
// replyMissing or -1. (redlock_wake.lua answers 1 when a waiter was woken,
// 0 when none is listening; only its errors are read.)
const redlockRenewRetaken = 2

// redlockLeaveScript takes a waiter's entry (ARGV[1]) out of the wait
// queue (KEYS[2]), every copy of it (an attempt whose reply was lost may
// have queued it, and the next one again); KEYS[1], the lock, orders it
// after the lock's earlier calls on the first master.
var redlockLeaveScript = redis.NewScript(`return redis.call('LREM', KEYS[2], 0, ARGV[1])`)

// pttlScript reads a lock's remaining TTL on one master, through its queue.
var pttlScript = redis.NewScript(`return redis.call('PTTL', KEYS[1])`)

// noScript reports whether err is a node's NOSCRIPT answer: it does not
// have the script cached (a restarted or new node, SCRIPT FLUSH), and the
// script did not run.
func noScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }

// evalOnce runs s on c, in one call, by SHA, and once more in full (EVAL)
// if the node answers NOSCRIPT; neither is re-sent by the client (see
// once).
//
// A call whose dial was refused (not timed out: that would cost another
// DialTimeout) is sent once more through a pipeline of c: nothing was sent,
// and go-redis keeps a second pool for pipelines, whose dial breaker is
// its own. Right after a killed Redis is back, the main pool can still
// fail every command at once with its last dial error for up to a second
// (until its once-a-second probe gets through; see neverSent), while the
// pipeline pool, which lockmw's acquisitions use, already works: without
// the second try, the release of a lease taken then would fail.
func evalOnce(ctx context.Context, c processor, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	cmd := s.EvalSha(ctx, once{c}, keys, args...)
	if p, ok := c.(interface{ Pipeline() redis.Pipeliner }); ok && refusedDial(cmd.Err()) {
		cmd = evalPiped(ctx, p, s.EvalSha, keys, args)
		if noScript(cmd.Err()) {
			return evalPiped(ctx, p, s.Eval, keys, args)
		}
		return cmd
	}
	if noScript(cmd.Err()) {
		cmd = s.Eval(ctx, once{c}, keys, args...)
	}
	return cmd
}

// evalPiped sends run (a Script's Eval or EvalSha) once, alone in a
// pipeline of p, and returns its reply.
func evalPiped(ctx context.Context, p interface{ Pipeline() redis.Pipeliner }, run func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd, keys []string, args []any) *redis.Cmd {
	pipe := p.Pipeline()
	cmd := run(ctx, once{pipe}, keys, args...)
	_, _ = pipe.Exec(ctx) // the error is cmd's
	return cmd
}

// refusedDial reports whether err is a failed dial that did not time out
// (or go-redis replaying one).
func refusedDial(err error) bool {
	var ne net.Error
	return dialFailed(err) && !(errors.As(err, &ne) && ne.Timeout())
}

// resend sends in full (EVAL), all in one more round trip, the scripts of
// a pipeline whose EVALSHA a node answered NOSCRIPT: the caller replaces
// each such reply with eval's, then calls send. Its pipeline is made on the
// first eval.
type resend struct {
	ctx    context.Context
	client interface{ Pipeline() redis.Pipeliner }
	retry  bool // the client may re-send these (renewals); else each is sent once
	pipe   redis.Pipeliner
}

// eval queues s in full for the resend and returns its reply, set by send.
func (r *resend) eval(s *redis.Script, keys []string, args ...any) *redis.Cmd {
	if r.pipe == nil {
		r.pipe = r.client.Pipeline()
	}
	if r.retry {
		return s.Eval(r.ctx, r.pipe, keys, args...)
	}
	return s.Eval(r.ctx, once{r.pipe}, keys, args...)
}

// send sends the queued scripts, if any, in one round trip; per-command
// errors are read by the callers.
func (r *resend) send() {
	if r.pipe != nil {
		_, _ = r.pipe.Exec(r.ctx)
	}
}

// int64s reads a script's list of integers.
func int64s(reply any) ([]int64, error) {
	list, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("script returned %T, want a list", reply)
	}
	vals := make([]int64, len(list))
	for i, v := range list {
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("script returned %T at %d, want an integer", v, i)
		}
		vals[i] = n
	}
	return vals, nil
}

func ownershipOf(v int64) store.Ownership {
	switch v {
	case replyOwned:
		return store.Owned
	case replyMissing:
		return store.Missing
	}
	return store.Taken
}

// millis converts d to whole milliseconds for PX/PEXPIRE, rounding up so the
// key never expires before the validity lockmw computed from d.
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// inspect.lua: a lock's state for Locker.Inspect, read-only. Answers
// {owner, pttl, counter, queued, info}. describe.lua: keep a holder's
// description beside its lock. Answers 1 (written) or 0.
var (
	//go:embed scripts/inspect.lua
	inspectSource string
	inspectScript = redis.NewScript(inspectSource)
	//go:embed scripts/describe.lua
	describeSource string
	describeScript = redis.NewScript(describeSource)
)
