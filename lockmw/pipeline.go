package lockmw

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// This file batches the scripts of concurrent acquisitions and releases.
// One round trip is on the wire at a time; a call that finds the lane
// free sends at once, from its own goroutine, with its own context.
// Calls that arrive while every lane is busy queue, and when a round trip
// ends, the first queued caller takes the lane and sends all of them (up to
// maxBatch) as one pipeline: one write and one read for the client and for
// Redis, instead of one each per call. Under load that is most of the cost.
// A batch of several runs under the client's timeouts, not its callers'
// context deadlines.

const (
	batchLanes = 1  // round trips on the wire at once
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

	mu    sync.Mutex
	busy  int           // lanes in use
	queue []*scriptCall // calls waiting for a lane
}

func newBatcher(client redis.UniversalClient) *batcher {
	b := &batcher{client: client}
	b.pool.New = func() any { return &scriptCall{wake: make(chan []*scriptCall, 1)} }
	return b
}

// run runs script and returns its reply.
func (b *batcher) run(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	c := b.pool.Get().(*scriptCall)
	c.ctx, c.script, c.keys, c.args = ctx, script, keys, args

	b.mu.Lock()
	if b.busy < batchLanes {
		b.busy++
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
// callers, and passes the lane on to the first queued call, if any.
func (b *batcher) send(batch []*scriptCall) {
	b.exec(batch)
	for _, c := range batch[1:] {
		c.wake <- nil
	}

	b.mu.Lock()
	if len(b.queue) == 0 {
		b.busy--
		b.mu.Unlock()
		return
	}
	n := min(len(b.queue), maxBatch)
	next := make([]*scriptCall, n)
	copy(next, b.queue)
	b.queue = append(b.queue[:0], b.queue[n:]...)
	b.mu.Unlock()
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
