package cachelock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitersOf returns how many callers wait on key's run, 0 if none runs.
func (f *flight) waitersOf(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.calls[key]; c != nil {
		return c.waiters
	}
	return 0
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Concurrent callers of one key share one run and each get their own copy
// of the value; a caller that gives up does not cancel the run for the
// others, but the last one to give up does.
func TestFlight(t *testing.T) {
	var f flight
	const callers = 100
	var runs atomic.Int64
	release := make(chan struct{})
	run := func(ctx context.Context) (fillResult, error) {
		runs.Add(1)
		select {
		case <-release:
			return fillResult{value: []byte("v"), outcome: outcomeLoaded}, nil
		case <-ctx.Done():
			return fillResult{}, ctx.Err()
		}
	}

	quitter, quit := context.WithCancel(context.Background())
	quitDone := make(chan error, 1)
	go func() {
		_, err := f.do(quitter, "k", run)
		quitDone <- err
	}()
	waitFor(t, "the first caller to start the run", func() bool { return f.waitersOf("k") == 1 })

	results := make(chan []byte, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := f.do(context.Background(), "k", run)
			if err != nil {
				t.Errorf("shared run: %v", err)
			}
			results <- res.value
		}()
	}
	waitFor(t, "all callers to join", func() bool { return f.waitersOf("k") == callers+1 })
	quit()
	if err := <-quitDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that gave up got %v, want context.Canceled", err)
	}
	close(release)
	wg.Wait()
	close(results)
	var first []byte
	for v := range results {
		if string(v) != "v" {
			t.Fatalf("a caller got %q, want v", v)
		}
		if first != nil && &first[0] == &v[0] {
			t.Fatal("two callers got the same slice; each needs its own copy")
		}
		first = v
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d callers of one key caused %d runs, want 1", callers+1, n)
	}

	// Once every caller has given up, the run's context is cancelled and a
	// new caller starts afresh.
	stopped := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = f.do(ctx, "j", func(ctx context.Context) (fillResult, error) {
			<-ctx.Done()
			close(stopped)
			return fillResult{}, ctx.Err()
		})
	}()
	waitFor(t, "the run to start", func() bool { return f.waitersOf("j") == 1 })
	cancel()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the run's context was not cancelled after its only caller gave up")
	}
	res, err := f.do(context.Background(), "j", func(context.Context) (fillResult, error) {
		return fillResult{value: []byte("fresh")}, nil
	})
	if err != nil || string(res.value) != "fresh" {
		t.Fatalf("a caller after everyone gave up got %q, %v; want a fresh run", res.value, err)
	}
}
