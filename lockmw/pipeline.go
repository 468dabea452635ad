package lockmw

import (
	"context"
	"hash/maphash"
	"sync"

	"github.com/redis/go-redis/v9"
)

// This file batches the scripts of concurrent acquisitions and releases.
//
// Up to maxTrips round trips are on the wire at once, and the calls for
// one lock keep their order: a call is not sent while an earlier call for
// the same lock key is on the wire or waiting (the early hand-over in
// waiting.go relies on it). A call that finds a round trip free, nothing
// queued and its key idle sends at once, from its own goroutine, with its
// own context. Other calls queue; when a round trip ends, its sender picks
// the queued calls whose keys are idle (up to maxBatch, in arrival order,
// never passing an earlier call for the same key) and hands them to the
// first of them, which sends them as one pipeline: one write and one read
// for the client and for Redis, instead of one each per call. Under load
// that is most of the cost. A batch of several runs under the client's
// timeouts, not its callers' context deadlines.

const (
	maxTrips = 4  // round trips on the wire at once
	maxBatch = 64 // calls in one pipeline
)

// scriptCall is one script run through the batcher.
type scriptCall struct {
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
	slot   uint64 // of keys[0], the lock key
	// wake is sent nil when the call has run, or the batch this caller is
	// to send (its own call first).
	wake chan []*scriptCall
}

// batcher runs scripts for many goroutines over a few pipelines.
type batcher struct {
	client redis.UniversalClient
	pool   sync.Pool

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
	b.pool.New = func() any { return &scriptCall{wake: make(chan []*scriptCall, 1)} }
	return b
}

// run runs script, whose first key is the lock key, and returns its reply.
func (b *batcher) run(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	c := b.pool.Get().(*scriptCall)
	c.ctx, c.script, c.keys, c.args = ctx, script, keys, args
	c.slot = maphash.String(b.seed, keys[0]) % keySlots

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

	v, err := c.cmd.Result()
	c.ctx, c.script, c.keys, c.args, c.cmd = nil, nil, nil, nil, nil
	b.pool.Put(c)
	return v, err
}

// send runs batch (whose first call is the caller's own), wakes the other
// callers, and starts the next batches of queued calls.
func (b *batcher) send(batch []*scriptCall) {
	b.exec(batch)

	b.mu.Lock()
	b.trips--
	for _, c := range batch {
		b.inflight[c.slot]--
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
	for _, next := range starts {
		next[0].wake <- next
	}
}

// exec sends batch in one pipeline, resending in full (EVAL) the scripts a
// node does not have cached, again in one round trip.
func (b *batcher) exec(batch []*scriptCall) {
	if len(batch) == 1 {
		c := batch[0]
		c.cmd = c.script.EvalSha(c.ctx, b.client, c.keys, c.args...)
		if c.cmd.Err() != nil && redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
			c.cmd = c.script.Eval(c.ctx, b.client, c.keys, c.args...)
		}
		return
	}
	ctx := context.Background()
	pipe := b.client.Pipeline()
	for _, c := range batch {
		c.cmd = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // per-command errors are read by the callers
	var resend redis.Pipeliner
	for _, c := range batch {
		if c.cmd.Err() != nil && redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
			if resend == nil {
				resend = b.client.Pipeline()
			}
			c.cmd = c.script.Eval(ctx, resend, c.keys, c.args...)
		}
	}
	if resend != nil {
		_, _ = resend.Exec(ctx)
	}
}
