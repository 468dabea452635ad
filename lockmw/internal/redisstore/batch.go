package redisstore

import (
	"context"
	"errors"
	"hash/maphash"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file batches the scripts of concurrent acquisitions and releases.
//
// Up to maxTrips round trips are on the wire at once, and the calls for
// one lock keep their order: a call is not sent while an earlier call for
// the same lock key is on the wire or waiting. A call that finds a round trip free, nothing
// queued and its key idle sends at once, from its own goroutine, with its
// own context. Other calls queue; when a round trip ends, its sender picks
// the queued calls whose keys are idle (up to maxBatch, in arrival order,
// never passing an earlier call for the same key) and hands them to the
// first of them, which sends them as one pipeline: one write and one read
// for the client and for Redis, instead of one each per call. Under load
// that is most of the cost. A batch of several runs under the client's
// timeouts, not its callers' context deadlines.
//
// A batch holds at most one call per key slot. Redis runs a pipeline to
// its end whatever a command answers, and exec resends the scripts that
// answered NOSCRIPT (a restarted node, SCRIPT FLUSH) in a second round
// trip: had a later call of the same lock been in the first pipeline (a
// plain acquisition, or a script the node had cached), it would already
// have run before the earlier, resent one, and nothing could undo that.
// With one call per slot, the resend belongs to the same round trip, and
// the slot's next call leaves only once it has ended. What it costs: calls
// for one lock (or for keys hashing to one of keySlots slots) that queue
// together go in successive round trips instead of one.
//
// For the same reason a script refused while its Cluster slot is being
// moved (TRYAGAIN; see acquire.go) is retried here, within its round
// trip, until its giveUp: retried from outside, a later call of the same
// lock (the waiter that a release handed the lock to early, releasing it
// in turn) could run between two of its attempts.
//
// A round trip that times out fails the calls queued behind it. When a
// call of a round trip gets no answer within the client's timeout (a
// paused or stalled Redis: its kernel still accepts connections, so only
// the timeout tells), the calls queued for the same node (every queued
// call on a client of one node; on Cluster, those whose lock key's master
// is that node, as the client's slot map said when they were made) are
// failed at once with a notSentError, without being sent: otherwise each
// would wait out a timeout of its own after the one it queued behind (two
// timeouts, three under a larger load, where the package promises about
// one). Such a call never reached Redis, so it took nothing
// (neverSent). What triggers it is only a timeout of the client's own: a
// call whose context had ended (the caller's deadline, which the client
// applies with ContextTimeoutEnabled, or a cancellation) says nothing about
// the node, and a slow reply that comes within the timeout fails nobody.
// Calls that come after the timeout are sent as usual.

const (
	maxTrips = 4  // round trips on the wire at once
	maxBatch = 64 // calls in one pipeline
)

// scriptCall is one script run through the batcher, or one call of plain
// commands (script nil, plain set; see plainCall).
type scriptCall struct {
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
	// A plain call: its commands, and lock, the key they are for (keys
	// is lock[:]).
	plain plainCall
	lock  [1]string
	slot  uint64 // of keys[0], the lock key
	// node is the address of the master of keys[0] when the call was
	// made, on a Cluster client ("" when unknown, and on a client of one
	// node).
	node string
	// giveUp: a script refused because its slot is moving is retried
	// until then (zero: not retried).
	giveUp time.Time
	// wake is sent nil when the call has run, or the batch this caller is
	// to send (its own call first).
	wake chan []*scriptCall
}

// batcher runs scripts for many goroutines over a few pipelines.
type batcher struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // client, if it is a Cluster client
	pool    sync.Pool

	seed     maphash.Seed
	mu       sync.Mutex
	trips    int                   // round trips on the wire
	inflight [keySlots]int32       // calls on the wire, by slot of their lock key
	queue    []*scriptCall         // calls waiting, in arrival order
	blocked  [keySlots / 64]uint64 // scratch for send: slots that must wait
}

// keySlots is how many slots lock keys hash to for ordering: calls whose
// keys share a slot keep their order as if they were for one key.
const keySlots = 1024

func newBatcher(client redis.UniversalClient) *batcher {
	b := &batcher{client: client, seed: maphash.MakeSeed()}
	b.cluster, _ = client.(*redis.ClusterClient)
	b.pool.New = func() any { return &scriptCall{wake: make(chan []*scriptCall, 1)} }
	return b
}

// run runs script, whose first key is the lock key, and returns its reply.
// While the keys' Cluster slot is being moved, it is retried until giveUp.
func (b *batcher) run(ctx context.Context, giveUp time.Time, script *redis.Script, keys []string, args ...any) (any, error) {
	c := b.pool.Get().(*scriptCall)
	c.script, c.keys, c.args, c.giveUp = script, keys, args, giveUp
	b.call(ctx, c)
	v, err := c.cmd.Result()
	b.done(c)
	return v, err
}

// A plainCall is a call of plain commands (no script) for one lock key,
// which the store writes and reads; the batcher only chooses the round
// trip that carries it (see Store.setNX).
type plainCall interface {
	// queue adds the call's commands to pipe; their replies are read
	// once the round trip is answered.
	queue(ctx context.Context, pipe redis.Pipeliner)
	// err is the error of the call's first command, after its round
	// trip.
	err() error
	// fail sets err as the reply of the call, which was not sent.
	fail(err error)
}

// A followUpCall is a plainCall that may need a script after its
// commands' replies (setNXCall: the seed after a missing counter): followUp
// queues it on rs, which sends it in the batch's second round trip, with
// the scripts resent after NOSCRIPT, before the lock's next call leaves.
type followUpCall interface {
	plainCall
	followUp(rs *resend)
}

// runPlain sends p, whose commands are for lock key lock, through a round
// trip, and returns once it is answered. A plain call is sent once and
// never retried (its commands write).
func (b *batcher) runPlain(ctx context.Context, lock string, p plainCall) {
	c := b.pool.Get().(*scriptCall)
	c.lock[0], c.plain = lock, p
	c.keys = c.lock[:]
	b.call(ctx, c)
	b.done(c)
}

// call sends c, whose ctx is set here, through a round trip and returns
// once it is answered.
func (b *batcher) call(ctx context.Context, c *scriptCall) {
	c.ctx = ctx
	c.slot = maphash.String(b.seed, c.keys[0]) % keySlots
	if b.cluster != nil {
		c.node = b.nodeOf(ctx, c.keys[0])
	}

	b.mu.Lock()
	if b.trips < maxTrips && len(b.queue) == 0 && b.inflight[c.slot] == 0 {
		b.trips++
		b.inflight[c.slot]++
		b.mu.Unlock()
		b.send([]*scriptCall{c})
	} else {
		b.queue = append(b.queue, c)
		b.mu.Unlock()
		if batch := <-c.wake; batch != nil {
			b.send(batch)
		}
	}
}

// done recycles c.
func (b *batcher) done(c *scriptCall) {
	c.ctx, c.script, c.keys, c.args, c.cmd, c.giveUp = nil, nil, nil, nil, nil, time.Time{}
	c.plain, c.lock, c.node = nil, [1]string{}, ""
	b.pool.Put(c)
}

// send runs batch (whose first call is the caller's own), wakes the other
// callers, and starts the next batches of queued calls.
func (b *batcher) send(batch []*scriptCall) {
	b.exec(batch)
	silent := b.silence(batch)

	b.mu.Lock()
	b.trips--
	for _, c := range batch {
		b.inflight[c.slot]--
	}
	var failed []*scriptCall
	if silent != nil {
		// Fail the calls queued behind a timeout (see the top of this
		// file).
		rest := b.queue[:0]
		for _, c := range b.queue {
			if silent.covers(c) {
				failed = append(failed, c)
				continue
			}
			rest = append(rest, c)
		}
		clear(b.queue[len(rest):])
		b.queue = rest
	}
	var starts [][]*scriptCall
	for b.trips < maxTrips && len(b.queue) > 0 {
		var next []*scriptCall
		rest := b.queue[:0]
		for _, c := range b.queue {
			word, bit := c.slot/64, uint64(1)<<(c.slot%64)
			if len(next) == maxBatch || b.blocked[word]&bit != 0 || b.inflight[c.slot] > 0 {
				b.blocked[word] |= bit
				rest = append(rest, c)
				continue
			}
			// One call per slot in a batch (see the top of this file): the
			// slot's later calls wait for this one's round trip.
			b.blocked[word] |= bit
			next = append(next, c)
		}
		clear(b.blocked[:])
		clear(b.queue[len(rest):])
		b.queue = rest
		if len(next) == 0 {
			break
		}
		for _, c := range next {
			b.inflight[c.slot]++
		}
		b.trips++
		starts = append(starts, next)
	}
	b.mu.Unlock()
	for _, c := range batch[1:] {
		c.wake <- nil
	}
	for _, c := range failed {
		err := &notSentError{timeout: silent.cause}
		if c.plain != nil {
			c.plain.fail(err)
		} else {
			c.cmd = redis.NewCmd(c.ctx)
			c.cmd.SetErr(err)
		}
		c.wake <- nil
	}
	for _, next := range starts {
		next[0].wake <- next
	}
}

// exec sends batch in one pipeline (see send), and sends again, after a
// short backoff, the scripts refused because their slot is being moved,
// until their giveUp.
func (b *batcher) exec(batch []*scriptCall) {
	b.send1(batch)
	backoff := time.Millisecond
	for {
		var again []*scriptCall
		next := time.Now().Add(backoff)
		for _, c := range batch {
			if c.script != nil && c.cmd.Err() != nil && slotMoving(c.cmd.Err()) &&
				!next.After(c.giveUp) && c.ctx.Err() == nil {
				again = append(again, c)
			}
		}
		if len(again) == 0 {
			return
		}
		if cc, ok := b.client.(*redis.ClusterClient); ok {
			cc.ReloadState(context.Background()) // the next attempt goes to the slot's owner then
		}
		time.Sleep(backoff)
		b.send1(again)
		batch = again
		backoff = min(2*backoff, reshardBackoffMax)
	}
}

// send1 sends batch in one pipeline, resending in full (EVAL) the scripts a
// node does not have cached, again in one round trip.
func (b *batcher) send1(batch []*scriptCall) {
	if len(batch) == 1 && batch[0].script != nil {
		c := batch[0]
		c.cmd = evalOnce(c.ctx, b.client, c.script, c.keys, c.args...)
		return
	}
	ctx := context.Background()
	if len(batch) == 1 {
		ctx = batch[0].ctx
	}
	pipe := b.client.Pipeline()
	for _, c := range batch {
		if c.plain != nil {
			c.plain.queue(ctx, pipe)
			continue
		}
		c.cmd = c.script.EvalSha(ctx, once{pipe}, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // per-command errors are read by the callers
	rs := resend{ctx: ctx, client: b.client}
	for _, c := range batch {
		if f, ok := c.plain.(followUpCall); ok {
			f.followUp(&rs)
		}
		if c.script != nil && noScript(c.cmd.Err()) {
			c.cmd = rs.eval(c.script, c.keys, c.args...)
		}
	}
	rs.send()
}

// silence is what a round trip's timeouts say: which nodes did not answer
// within the client's timeout (every node, on a client of one node).
type silence struct {
	nodes []string // on Cluster
	all   bool     // on a client of one node
	cause error    // the first timeout
}

// covers reports whether c, a queued call, is for a node that did not
// answer.
func (s *silence) covers(c *scriptCall) bool {
	if s.all {
		return true
	}
	for _, n := range s.nodes {
		if n == c.node && n != "" {
			return true
		}
	}
	return false
}

// silence reports the nodes that did not answer a call of batch, just
// sent, within the client's timeout; nil if none.
func (b *batcher) silence(batch []*scriptCall) *silence {
	var s *silence
	for _, c := range batch {
		err := c.err()
		if !clientTimeout(c.ctx, err) {
			continue
		}
		if s == nil {
			s = &silence{cause: err, all: b.cluster == nil}
		}
		if c.node != "" {
			s.nodes = append(s.nodes, c.node)
		}
	}
	return s
}

// err is c's error after its round trip.
func (c *scriptCall) err() error {
	if c.plain != nil {
		return c.plain.err()
	}
	return c.cmd.Err()
}

// nodeOf is the address of the master of key, by the Cluster client's
// slot map ("" if unknown).
func (b *batcher) nodeOf(ctx context.Context, key string) string {
	n, err := b.cluster.MasterForKey(ctx, key)
	if err != nil {
		return ""
	}
	return n.Options().Addr
}

// clientTimeout reports whether err, the error of a call made under ctx,
// is a timeout of the client's own (ReadTimeout, WriteTimeout,
// DialTimeout): the node did not answer in time. The timeout of a call
// whose context has ended, or reached its deadline (which the client
// applies with ContextTimeoutEnabled), is the caller's.
func clientTimeout(ctx context.Context, err error) bool {
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() || ctx.Err() != nil {
		return false
	}
	d, ok := ctx.Deadline()
	return !ok || time.Now().Before(d)
}

// notSentError is the error of a call that the batcher failed without
// sending it, because a call sent before it to the same node got no answer
// within the client's timeout (see the top of this file). The call took
// nothing (neverSent).
type notSentError struct {
	timeout error // the earlier call's
}

func (e *notSentError) Error() string {
	return "not sent: Redis did not answer a request sent before it within the client's timeout (" + e.timeout.Error() + ")"
}
