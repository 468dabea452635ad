package cachelock

import (
	"bytes"
	"context"
	"fmt"
	"sync"
)

// flight lets concurrent Fetches of one key in a process share one fill:
// one Redis round trip, and at most one load. Unlike singleflight, the
// shared work runs on its own context, cancelled only when every caller
// waiting for it has given up, so one caller's deadline does not fail the
// others.
type flight struct {
	mu    sync.Mutex
	calls map[string]*flightCall
}

type flightCall struct {
	done    chan struct{}
	res     fillResult
	err     error
	waiters int
	cancel  context.CancelFunc
}

// fillResult is the outcome of one shared fill.
type fillResult struct {
	value   []byte
	outcome string
}

// do runs fn for key, or joins the run already in progress, and returns its
// result: a copy of the value for each caller, so callers may modify it.
func (f *flight) do(ctx context.Context, key string, fn func(ctx context.Context) (fillResult, error)) (fillResult, error) {
	f.mu.Lock()
	if f.calls == nil {
		f.calls = make(map[string]*flightCall)
	}
	c, ok := f.calls[key]
	if !ok {
		runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		c = &flightCall{done: make(chan struct{}), cancel: cancel}
		f.calls[key] = c
		go f.run(runCtx, key, c, fn)
	}
	c.waiters++
	f.mu.Unlock()

	select {
	case <-c.done:
		res := c.res
		res.value = bytes.Clone(res.value)
		return res, c.err
	case <-ctx.Done():
		f.mu.Lock()
		c.waiters--
		if c.waiters == 0 {
			// Nobody wants the result any more: stop the work, and let
			// later callers start afresh rather than join a cancelled run.
			c.cancel()
			if f.calls[key] == c {
				delete(f.calls, key)
			}
		}
		f.mu.Unlock()
		return fillResult{}, context.Cause(ctx)
	}
}

func (f *flight) run(ctx context.Context, key string, c *flightCall, fn func(ctx context.Context) (fillResult, error)) {
	defer func() {
		if p := recover(); p != nil {
			c.err = fmt.Errorf("cachelock: fetch %q: load panicked: %v", key, p)
		}
		c.cancel()
		f.mu.Lock()
		if f.calls[key] == c {
			delete(f.calls, key)
		}
		f.mu.Unlock()
		close(c.done)
	}()
	c.res, c.err = fn(ctx)
}
