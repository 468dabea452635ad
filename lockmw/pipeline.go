package lockmw

import (
	"context"
	"hash/maphash"
	"sync"

	"github.com/redis/go-redis/v9"
)

// This file batches the scripts of concurrent acquisitions and releases.
//
// Calls go through lanes chosen by the lock's key, so that the calls for
// one lock keep their order: a later call for a key is never sent before
// an earlier one has been answered (the early hand-over in waiting.go
// relies on it). Each lane has at most one round trip on the wire. A call
// that finds its lane free sends at once, from its own goroutine, with its
// own context. Calls that arrive while their lane is busy queue, and when
// the round trip ends, the first queued caller takes the lane and sends all
// of them (up to maxBatch) as one pipeline: one write and one read for the
// client and for Redis, instead of one each per call. Under load that is
// most of the cost. A batch of several runs under the client's timeouts,
// not its callers' context deadlines.

const (
	batchLanes = 4  // round trips on the wire at once, one per lane
	maxBatch   = 64 // calls in one pipeline
)

// scriptCall is one script run through the batcher.
type scriptCall struct {
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
	// wake is sent nil when the call has run, or the batch this caller is
	// to send (its own call first).
	wake chan []*scriptCall
}

// batcher runs scripts for many goroutines over a few pipelines.
type batcher struct {
	client redis.UniversalClient
	pool   sync.Pool
	seed   maphash.Seed
	lanes  [batchLanes]lane
}

// lane is one ordered stream of round trips.
type lane struct {
	mu    sync.Mutex
	busy  bool          // a round trip is on the wire
	queue []*scriptCall // calls waiting for it
}

func newBatcher(client redis.UniversalClient) *batcher {
	b := &batcher{client: client, seed: maphash.MakeSeed()}
	b.pool.New = func() any { return &scriptCall{wake: make(chan []*scriptCall, 1)} }
	return b
}

// run runs script, whose first key is the lock key, and returns its reply.
func (b *batcher) run(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	c := b.pool.Get().(*scriptCall)
	c.ctx, c.script, c.keys, c.args = ctx, script, keys, args
	ln := &b.lanes[maphash.String(b.seed, keys[0])%batchLanes]

	ln.mu.Lock()
	if !ln.busy {
		ln.busy = true
		ln.mu.Unlock()
		b.send(ln, []*scriptCall{c})
	} else {
		ln.queue = append(ln.queue, c)
		ln.mu.Unlock()
		if batch := <-c.wake; batch != nil {
			b.send(ln, batch)
		}
	}

	v, err := c.cmd.Result()
	c.ctx, c.script, c.keys, c.args, c.cmd = nil, nil, nil, nil, nil
	b.pool.Put(c)
	return v, err
}

// send runs batch (whose first call is the caller's own), wakes the other
// callers, and passes the lane on to the first queued call, if any.
func (b *batcher) send(ln *lane, batch []*scriptCall) {
	b.exec(batch)
	for _, c := range batch[1:] {
		c.wake <- nil
	}

	ln.mu.Lock()
	if len(ln.queue) == 0 {
		ln.busy = false
		ln.mu.Unlock()
		return
	}
	n := min(len(ln.queue), maxBatch)
	next := make([]*scriptCall, n)
	copy(next, ln.queue)
	ln.queue = append(ln.queue[:0], ln.queue[n:]...)
	ln.mu.Unlock()
	next[0].wake <- next
}

// exec sends batch in one pipeline, resending in full (EVAL) the scripts a
// node does not have cached, again in one round trip.
func (b *batcher) exec(batch []*scriptCall) {
	if len(batch) == 1 {
		c := batch[0]
		c.cmd = c.script.Run(c.ctx, b.client, c.keys, c.args...)
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
		if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
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
