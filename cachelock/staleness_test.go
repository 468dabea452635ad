package cachelock_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/cachelock"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

// redisNowMS returns the Redis clock in milliseconds.
func redisNowMS(t testing.TB, rdb *redis.Client) int64 {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMilli()
}

// Invalidating an entry that is already invalidated revokes its fill lease
// but does not move the end of its stale window: the window runs from the
// first invalidation of the value it serves.
func TestInvalidateKeepsTheStaleWindowEnd(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := newCache(t, srv, cachelock.WithStaleReads(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Fetch(ctx, "k", time.Minute, func(context.Context) ([]byte, error) { return []byte("v1"), nil }); err != nil {
		t.Fatal(err)
	}
	if err := c.Invalidate(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	sx := func() string { return rdb.HGet(ctx, cachelock.DefaultPrefix+"k", "sx").Val() }
	first := sx()
	firstAt := redisNowMS(t, rdb)
	for range 5 {
		// Let the Redis clock move, so that a re-armed window would show.
		for redisNowMS(t, rdb) <= firstAt {
			time.Sleep(time.Millisecond)
		}
		firstAt = redisNowMS(t, rdb)
		// Another process starts a refill, and a write invalidates again.
		other := newCache(t, srv, cachelock.WithStaleReads(time.Minute))
		started := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = other.Fetch(ctx, "k", time.Minute, func(context.Context) ([]byte, error) {
				close(started)
				<-ctx.Done()
				return nil, ctx.Err()
			})
		}()
		wait(t, started, 10*time.Second, "the refill to start")
		if err := c.Invalidate(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if got := sx(); got != first {
			t.Fatalf("a later Invalidate moved the stale window's end from %s to %s", first, got)
		}
		if o := rdb.HGet(ctx, cachelock.DefaultPrefix+"k", "o").Val(); o != "" {
			t.Fatalf("a later Invalidate left the refill's lease %q in place", o)
		}
	}
	v, err := c.Get(ctx, "k")
	if !errors.Is(err, cachelock.ErrMiss) {
		t.Fatalf("Get of an invalidated key = %q, %v; want ErrMiss", v, err)
	}
}

// Under steady writes whose invalidations keep revoking slower fills, a
// reader with WithStaleReads(window) is never served a value that was
// superseded longer ago than window, plus the time its writer took from
// the commit to the end of its invalidation (both measured in this run).
func TestStaleReadsBoundedUnderSteadyWrites(t *testing.T) {
	const window = 300 * time.Millisecond
	srv := redistest.Start(t)
	mp, counter := meter(t)
	writer := newCache(t, srv, cachelock.WithStaleReads(window))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The "database": a version, and when each version was superseded.
	var (
		mu         sync.Mutex
		version    = 1
		superseded = map[int]time.Time{}
		maxLag     time.Duration // commit to end of invalidation, longest
	)
	load := func(context.Context) ([]byte, error) {
		mu.Lock()
		v := version
		mu.Unlock()
		time.Sleep(3 * writeEvery) // slower than the writes: most fills are revoked
		return []byte(strconv.Itoa(v)), nil
	}
	if _, err := writer.Fetch(ctx, "k", time.Minute, load); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes atomic.Int64
	wg.Go(func() {
		tick := time.NewTicker(writeEvery)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			var committed time.Time
			err := writer.Update(ctx, "k", func(context.Context, uint64) error {
				mu.Lock()
				committed = time.Now()
				superseded[version] = committed
				version++
				mu.Unlock()
				return nil
			})
			if err != nil {
				t.Errorf("Update: %v", err)
				return
			}
			lag := time.Since(committed)
			mu.Lock()
			maxLag = max(maxLag, lag)
			mu.Unlock()
			writes.Add(1)
		}
	})

	type read struct {
		start   time.Time
		version int
	}
	var readsMu sync.Mutex
	var reads []read
	for range 4 {
		// One Cache per reader, as separate processes: each can be served
		// stale while another holds the fill lease.
		reader := newCache(t, srv, cachelock.WithStaleReads(window), cachelock.WithMeterProvider(mp))
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				v, err := reader.Fetch(ctx, "k", time.Minute, load)
				if err != nil {
					t.Errorf("Fetch: %v", err)
					return
				}
				n, _ := strconv.Atoi(string(v))
				readsMu.Lock()
				reads = append(reads, read{start, n})
				readsMu.Unlock()
			}
		})
	}
	// Run until the writes have gone on for many windows.
	for writes.Load() < int64(10*window/writeEvery) {
		time.Sleep(writeEvery)
	}
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	var oldest time.Duration
	for _, r := range reads {
		at, ok := superseded[r.version]
		if !ok || !at.Before(r.start) {
			continue // current when the read started
		}
		oldest = max(oldest, r.start.Sub(at))
	}
	stale := counter("cachelock.stale_served")
	t.Logf("%d writes, %d reads, %d stale; oldest value served %v after it was superseded (window %v, longest commit-to-invalidation %v)",
		writes.Load(), len(reads), stale, oldest, window, maxLag)
	if stale == 0 {
		t.Fatal("no stale value was served: the test did not exercise the window")
	}
	// Redis keeps time in ms: allow 2ms of rounding between the clocks.
	if bound := window + maxLag + 2*time.Millisecond; oldest > bound {
		t.Fatalf("a reader got a value %v after it was superseded; the bound is the window %v plus the writer's commit-to-invalidation time %v",
			oldest, window, maxLag)
	}
}

// writeEvery paces the steady writer of TestStaleReadsBoundedUnderSteadyWrites.
const writeEvery = 20 * time.Millisecond
