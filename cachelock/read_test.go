package cachelock_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockmw/lockmw/cachelock"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// Get serves hits only: a cached value, a cached "not found" as
// ErrNotFound, and ErrMiss for anything else (missing, invalidated, also
// with stale reads on), without ever loading. Fetch still needs a loader.
func TestGetServesHitsOnly(t *testing.T) {
	srv := redistest.Start(t)
	c := newCache(t, srv, cachelock.WithStaleReads(time.Minute), cachelock.WithNegativeCaching(time.Minute))
	ctx := context.Background()
	if v, err := c.Get(ctx, "k"); !errors.Is(err, cachelock.ErrMiss) {
		t.Fatalf("Get of a missing key = %q, %v; want ErrMiss", v, err)
	}
	if _, err := c.Fetch(ctx, "k", time.Minute, func(context.Context) ([]byte, error) { return []byte("v1"), nil }); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k"); err != nil || string(v) != "v1" {
		t.Fatalf("Get of a cached key = %q, %v; want v1", v, err)
	}
	if _, err := c.Fetch(ctx, "k", time.Minute, nil); !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Fatalf("Fetch with a nil load = %v, want ErrInvalidOption (use Get)", err)
	}
	if err := c.Invalidate(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k"); !errors.Is(err, cachelock.ErrMiss) {
		t.Fatalf("Get of an invalidated key = %q, %v; want ErrMiss, not the stale value", v, err)
	}
	if _, err := c.Fetch(ctx, "gone", time.Minute, func(context.Context) ([]byte, error) { return nil, cachelock.ErrNotFound }); !errors.Is(err, cachelock.ErrNotFound) {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "gone"); !errors.Is(err, cachelock.ErrNotFound) {
		t.Fatalf("Get of a cached not-found = %q, %v; want ErrNotFound", v, err)
	}
	if _, err := c.Get(ctx, ""); !errors.Is(err, lockmw.ErrInvalidKey) {
		t.Fatalf("Get of an empty key = %v, want ErrInvalidKey", err)
	}
}

// A load returning nil, nil is refused with ErrNilValue and caches
// nothing; an empty non-nil value is cached as a value.
func TestLoadNilValueIsRefused(t *testing.T) {
	srv := redistest.Start(t)
	c := newCache(t, srv, cachelock.WithNegativeCaching(time.Minute))
	ctx := context.Background()
	var loads atomic.Int64
	nilLoad := func(context.Context) ([]byte, error) { loads.Add(1); return nil, nil }
	for range 2 {
		if v, err := c.Fetch(ctx, "k", time.Minute, nilLoad); !errors.Is(err, cachelock.ErrNilValue) {
			t.Fatalf("Fetch with a nil, nil load = %q, %v; want ErrNilValue", v, err)
		}
	}
	if n := loads.Load(); n != 2 {
		t.Fatalf("%d loads for 2 Fetches, want 2: nothing may be cached", n)
	}
	if v, err := c.Get(ctx, "k"); !errors.Is(err, cachelock.ErrMiss) {
		t.Fatalf("Get after a nil, nil load = %q, %v; want ErrMiss", v, err)
	}
	type product struct{ Price int }
	if v, err := cachelock.FetchJSON(ctx, c, "j", time.Minute, func(context.Context) (*product, error) { return nil, nil }); !errors.Is(err, cachelock.ErrNilValue) {
		t.Fatalf("FetchJSON with a nil, nil load = %v, %v; want ErrNilValue", v, err)
	}
	empty := func(context.Context) ([]byte, error) { loads.Add(1); return []byte{}, nil }
	if v, err := c.Fetch(ctx, "e", time.Minute, empty); err != nil || len(v) != 0 {
		t.Fatalf("Fetch of an empty value = %q, %v", v, err)
	}
	if v, err := c.Get(ctx, "e"); err != nil || len(v) != 0 {
		t.Fatalf("Get of a cached empty value = %q, %v; want an empty hit", v, err)
	}
}

// When the caller gives up while its load runs, the load's value is still
// installed (the lease allows it) and nothing is logged at WARN or above:
// the caller's own cancellation is not a failure.
func TestCallerCancellationIsNotAWarning(t *testing.T) {
	srv := redistest.Start(t)
	logger, records := recordingLogger()
	c := newCache(t, srv, cachelock.WithLogger(logger))
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	resume := make(chan struct{})
	loaded := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Fetch(ctx, "k", time.Minute, func(context.Context) ([]byte, error) {
			close(started)
			<-resume // a load that does not watch its context
			defer close(loaded)
			return []byte("v"), nil
		})
		done <- err
	}()
	wait(t, started, 10*time.Second, "the load to start")
	cancel()
	if err := wait(t, done, 10*time.Second, "the cancelled Fetch"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Fetch = %v, want context.Canceled", err)
	}
	close(resume)
	wait(t, loaded, 10*time.Second, "the load to return")
	// Wait for the install, or for the warning that it failed.
	bg := context.Background()
	for {
		if v, err := c.Get(bg, "k"); err == nil {
			if string(v) != "v" {
				t.Fatalf("installed %q, want v", v)
			}
			break
		}
		if warned(records()) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, r := range records() {
		if r.Level >= slog.LevelWarn {
			t.Errorf("logged at %v after the caller's own cancellation: %s", r.Level, r.Message)
		}
	}
}

func warned(rs []slog.Record) bool {
	for _, r := range rs {
		if r.Level >= slog.LevelWarn {
			return true
		}
	}
	return false
}
