package cachelock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/cachelock"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// 1,000 concurrent Fetches of a missing key through 4 Caches (4 clients and
// Lockers, as 4 processes) load it exactly once.
func TestConcurrentFetchesLoadOnce(t *testing.T) {
	srv := redistest.Start(t)
	caches := make([]*cachelock.Cache, 4)
	scripts := make([]*scriptCounter, len(caches))
	for i := range caches {
		rdb := srv.Client(t)
		scripts[i] = &scriptCounter{}
		rdb.AddHook(scripts[i])
		caches[i] = newCacheOn(t, rdb, srv.Client(t))
	}
	const callers = 1000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var loads atomic.Int64
	var ready sync.WaitGroup
	ready.Add(callers)
	allReady := make(chan struct{})
	go func() { ready.Wait(); close(allReady) }()
	// loadVia returns the load function of the callers of caches[filler].
	loadVia := func(filler int) func(ctx context.Context) ([]byte, error) {
		return func(ctx context.Context) ([]byte, error) {
			loads.Add(1)
			// Hold the fill until every caller has started and every other
			// Cache has run the fetch script at least twice (it was told to
			// wait, and asked again), or until a second load shows that the
			// test has failed.
			select {
			case <-allReady:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			for loads.Load() == 1 {
				contended := true
				for i, s := range scripts {
					contended = contended && (i == filler || s.n.Load() >= 2)
				}
				if contended {
					break
				}
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(time.Millisecond):
				}
			}
			return []byte("v1"), nil
		}
	}

	errs := make(chan error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ready.Done()
			v, err := caches[i%len(caches)].Fetch(ctx, "hot", time.Minute, loadVia(i%len(caches)))
			if err == nil && string(v) != "v1" {
				err = fmt.Errorf("got %q, want v1", v)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Fetch: %v", err)
	}
	if n := loads.Load(); n != 1 {
		t.Fatalf("%d concurrent Fetches through %d Caches loaded %d times, want exactly 1", callers, len(caches), n)
	}
}

// Concurrent Updates of one key from 3 Caches never overlap, lose no
// increment, see strictly increasing fences, and leave the cache equal to
// the row, while readers keep fetching.
func TestConcurrentUpdatesSerialize(t *testing.T) {
	srv := redistest.Start(t)
	db := openDB(t)
	caches := []*cachelock.Cache{newCache(t, srv), newCache(t, srv), newCache(t, srv)}
	const key, writers, rounds = "product:1", 6, 5
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var active, overlaps atomic.Int64
	var mu sync.Mutex
	var fences []uint64
	write := func(ctx context.Context, fence uint64) error {
		if active.Add(1) > 1 {
			overlaps.Add(1)
		}
		defer active.Add(-1)
		mu.Lock()
		fences = append(fences, fence)
		mu.Unlock()
		v, err := loadPrice(ctx, db, 1)
		if err != nil {
			return err
		}
		price, _ := strconv.Atoi(string(v))
		return setPrice(ctx, db, 1, price+1, fence)
	}

	stopReaders := make(chan struct{})
	var readers sync.WaitGroup
	readErrs := make(chan error, len(caches))
	for _, c := range caches {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stopReaders:
					return
				default:
				}
				if _, err := c.Fetch(ctx, key, time.Minute, func(ctx context.Context) ([]byte, error) { return loadPrice(ctx, db, 1) }); err != nil {
					readErrs <- err
					return
				}
			}
		}()
	}

	var wg sync.WaitGroup
	errs := make(chan error, writers*rounds)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				if err := caches[i%len(caches)].Update(ctx, key, write); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(stopReaders)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Update: %v", err)
	}
	close(readErrs)
	for err := range readErrs {
		t.Errorf("Fetch: %v", err)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d writes overlapped another write of the same key", n)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Errorf("fence %d came after %d: fences must strictly increase", fences[i], fences[i-1])
		}
	}
	want := strconv.Itoa(100 + writers*rounds)
	if got := dbPrice(t, db, 1); got != want {
		t.Fatalf("database holds %s after %d increments from 100, want %s", got, writers*rounds, want)
	}
	for i, c := range caches {
		if got, _ := cachedPrice(t, c, db, key, 1); got != want {
			t.Errorf("cache %d serves %s, the row holds %s", i, got, want)
		}
	}
}

// A writer that stalls inside its write until its lock expires, and then
// writes after a newer writer committed, is rejected by the database.
func TestPausedWriterFencedOut(t *testing.T) {
	srv := redistest.Start(t)
	db := openDB(t)
	const key = "product:1"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	slow := newCache(t, srv, cachelock.WithLockOptions(lockmw.WithLeaseTTL(300*time.Millisecond), lockmw.WithoutWatchdog()))
	fast := newCache(t, srv)

	lost := make(chan uint64, 1)
	newerDone := make(chan struct{})
	lateWrite := make(chan error, 1)
	slowDone := make(chan error, 1)
	go func() {
		slowDone <- slow.Update(ctx, key, func(wctx context.Context, fence uint64) error {
			<-wctx.Done() // stalled past the lease: the lock is lost
			lost <- fence
			<-newerDone
			// A write already on its way when the lock was lost: it no
			// longer heeds the cancelled context.
			err := setPrice(context.WithoutCancel(wctx), db, 1, 111, fence)
			lateWrite <- err
			return err
		})
	}()
	slowFence := wait(t, lost, 10*time.Second, "the slow writer to lose its lock")

	var fastFence uint64
	err := fast.Update(ctx, key, func(ctx context.Context, fence uint64) error {
		fastFence = fence
		return setPrice(ctx, db, 1, 222, fence)
	})
	if err != nil {
		t.Fatalf("newer writer's Update: %v", err)
	}
	if fastFence <= slowFence {
		t.Fatalf("newer writer's fence %d is not above the lost writer's %d", fastFence, slowFence)
	}
	close(newerDone)

	if err := wait(t, lateWrite, 10*time.Second, "the late write"); !errors.Is(err, cachelock.ErrFenced) {
		t.Fatalf("late fenced write = %v, want ErrFenced", err)
	}
	err = wait(t, slowDone, 10*time.Second, "the slow Update")
	if !errors.Is(err, lockmw.ErrLost) || !errors.Is(err, cachelock.ErrFenced) {
		t.Fatalf("slow Update = %v, want an error matching lockmw.ErrLost and cachelock.ErrFenced", err)
	}
	if got := dbPrice(t, db, 1); got != "222" {
		t.Fatalf("database holds %s, want the newer writer's 222", got)
	}
	if got, _ := cachedPrice(t, fast, db, key, 1); got != "222" {
		t.Fatalf("cache serves %s, want 222", got)
	}
}

// With Redis down, Fetch either loads directly (WithLoadOnUnavailable) or
// fails with an error matching lockmw.ErrUnavailable without loading; once
// Redis is back, it caches again.
func TestFetchRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	quick := func(o *redis.Options) {
		o.MaxRetries = -1
		o.DialTimeout = 200 * time.Millisecond
		o.ReadTimeout = 200 * time.Millisecond
	}
	db := openDB(t)
	fallback := newCacheOn(t, srv.Client(t, quick), srv.Client(t, quick), cachelock.WithLoadOnUnavailable())
	strict := newCacheOn(t, srv.Client(t, quick), srv.Client(t, quick))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv.Kill(t)

	var loads atomic.Int64
	load := func(ctx context.Context) ([]byte, error) {
		loads.Add(1)
		return loadPrice(ctx, db, 1)
	}
	v, err := fallback.Fetch(ctx, "product:1", time.Minute, load)
	if err != nil || string(v) != "100" || loads.Load() != 1 {
		t.Fatalf("with WithLoadOnUnavailable and Redis down: Fetch = %q, %v after %d loads; want 100 from one load", v, err, loads.Load())
	}

	loads.Store(0)
	_, err = strict.Fetch(ctx, "product:1", time.Minute, load)
	if !errors.Is(err, lockmw.ErrUnavailable) {
		t.Fatalf("with Redis down: Fetch = %v, want an error matching lockmw.ErrUnavailable", err)
	}
	if loads.Load() != 0 {
		t.Fatalf("Fetch loaded %d times with Redis down and no fallback, want 0", loads.Load())
	}

	srv.Restart(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err = strict.Fetch(ctx, "product:1", time.Minute, load)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("Fetch after Redis came back: %v", err)
	}
	loads.Store(0)
	if v, err := strict.Fetch(ctx, "product:1", time.Minute, load); err != nil || string(v) != "100" || loads.Load() != 0 {
		t.Fatalf("second Fetch after restart = %q, %v after %d loads; want a cache hit", v, err, loads.Load())
	}
}

// Invalidate revokes a fill in flight: the value it loaded is never
// installed, and the filler loads again.
func TestInvalidateRevokesInflightFill(t *testing.T) {
	srv := redistest.Start(t)
	mp, counter := meter(t)
	c := newCache(t, srv, cachelock.WithMeterProvider(mp))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	started := make(chan struct{})
	resume := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		calls := 0
		v, err := c.Fetch(ctx, "k", time.Minute, func(context.Context) ([]byte, error) {
			calls++
			if calls > 1 {
				return []byte("new"), nil
			}
			close(started)
			<-resume
			return []byte("old"), nil
		})
		if err == nil && string(v) != "new" {
			err = fmt.Errorf("the revoked filler got %q, want a second load, \"new\"", v)
		}
		done <- err
	}()
	wait(t, started, 10*time.Second, "the fill to start")
	if err := c.Invalidate(ctx, "k"); err != nil {
		t.Fatalf("Invalidate: %v", err)
	}
	close(resume)
	if err := wait(t, done, 10*time.Second, "the revoked fill"); err != nil {
		t.Fatal(err)
	}
	if n := counter("cachelock.fills.revoked"); n != 1 {
		t.Errorf("cachelock.fills.revoked = %d, want 1", n)
	}
	v, err := c.Fetch(ctx, "k", time.Minute, func(context.Context) ([]byte, error) { return []byte("unwanted"), nil })
	if err != nil || string(v) != "new" {
		t.Fatalf("Fetch after the revoked fill = %q, %v; want the refilled \"new\" from the cache", v, err)
	}
	if n := counter("cachelock.loads"); n != 2 {
		t.Errorf("cachelock.loads = %d, want 2", n)
	}
}

// With WithStaleReads, a Fetch during another process's refill gets the
// invalidated value at once; without it, it waits for the fresh one.
func TestStaleReads(t *testing.T) {
	for _, stale := range []bool{true, false} {
		t.Run(fmt.Sprintf("stale=%v", stale), func(t *testing.T) {
			srv := redistest.Start(t)
			var opts []cachelock.Option
			if stale {
				opts = append(opts, cachelock.WithStaleReads(time.Minute))
			}
			mp, counter := meter(t)
			filler := newCache(t, srv, opts...)
			reader := newCache(t, srv, append(opts, cachelock.WithMeterProvider(mp))...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			value := func(v string) func(context.Context) ([]byte, error) {
				return func(context.Context) ([]byte, error) { return []byte(v), nil }
			}
			if _, err := filler.Fetch(ctx, "k", time.Minute, value("v1")); err != nil {
				t.Fatal(err)
			}
			if err := filler.Invalidate(ctx, "k"); err != nil {
				t.Fatal(err)
			}

			started := make(chan struct{})
			resume := make(chan struct{})
			fillDone := make(chan error, 1)
			go func() {
				_, err := filler.Fetch(ctx, "k", time.Minute, func(context.Context) ([]byte, error) {
					close(started)
					<-resume
					return []byte("v2"), nil
				})
				fillDone <- err
			}()
			wait(t, started, 10*time.Second, "the refill to start")

			got := make(chan string, 1)
			go func() {
				v, err := reader.Fetch(ctx, "k", time.Minute, func(context.Context) ([]byte, error) {
					return nil, errors.New("the reader must not load while another fill holds the lease")
				})
				if err != nil {
					v = []byte("error: " + err.Error())
				}
				got <- string(v)
			}()
			if stale {
				if v := wait(t, got, 10*time.Second, "the stale read"); v != "v1" {
					t.Fatalf("reader got %q during the refill, want the stale v1", v)
				}
				if n := counter("cachelock.stale_served"); n != 1 {
					t.Errorf("cachelock.stale_served = %d, want 1", n)
				}
				close(resume)
			} else {
				select {
				case v := <-got:
					t.Fatalf("reader got %q during the refill, want it to wait for the fill", v)
				case <-time.After(200 * time.Millisecond):
				}
				close(resume)
				if v := wait(t, got, 10*time.Second, "the waiting reader"); v != "v2" {
					t.Fatalf("waiting reader got %q, want the fresh v2", v)
				}
			}
			if err := wait(t, fillDone, 10*time.Second, "the refill"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Negative caching stores "not found"; without it every Fetch loads.
func TestNegativeCaching(t *testing.T) {
	srv := redistest.Start(t)
	db := openDB(t)
	ctx := context.Background()
	for _, negative := range []bool{true, false} {
		var opts []cachelock.Option
		if negative {
			opts = append(opts, cachelock.WithNegativeCaching(time.Minute))
		}
		c := newCache(t, srv, append(opts, cachelock.WithPrefix(fmt.Sprintf("neg-%v:", negative)))...)
		var loads atomic.Int64
		load := func(ctx context.Context) ([]byte, error) {
			loads.Add(1)
			return loadPrice(ctx, db, 2)
		}
		for range 3 {
			if _, err := c.Fetch(ctx, "product:2", time.Minute, load); !errors.Is(err, cachelock.ErrNotFound) {
				t.Fatalf("negative=%v: Fetch of a missing row = %v, want ErrNotFound", negative, err)
			}
		}
		want := int64(3)
		if negative {
			want = 1
		}
		if n := loads.Load(); n != want {
			t.Fatalf("negative=%v: 3 Fetches of a missing row loaded %d times, want %d", negative, n, want)
		}
	}

	// Invalidate clears a cached "not found".
	c := newCache(t, srv, cachelock.WithNegativeCaching(time.Minute), cachelock.WithPrefix("neg-true:"))
	if _, err := db.Exec(`INSERT INTO products (id, price) VALUES (2, 50)`); err != nil {
		t.Fatal(err)
	}
	if err := c.Invalidate(ctx, "product:2"); err != nil {
		t.Fatal(err)
	}
	if got, loaded := cachedPrice(t, c, db, "product:2", 2); got != "50" || !loaded {
		t.Fatalf("after Invalidate: Fetch = %s (loaded %v), want 50 from a load", got, loaded)
	}
}

// A failed load is returned, not cached, and gives up its fill lease so
// that the next caller loads at once rather than after the lease.
func TestLoadErrorReleasesLease(t *testing.T) {
	srv := redistest.Start(t)
	c := newCache(t, srv, cachelock.WithFillLease(time.Minute))
	other := newCache(t, srv, cachelock.WithFillLease(time.Minute))
	boom := errors.New("database down")
	if _, err := c.Fetch(context.Background(), "k", time.Minute, func(context.Context) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("Fetch = %v, want the load's error", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := other.Fetch(ctx, "k", time.Minute, func(context.Context) ([]byte, error) { return []byte("ok"), nil })
	if err != nil || string(v) != "ok" {
		t.Fatalf("Fetch after a failed load = %q, %v; want a new load at once", v, err)
	}
}

// If invalidation fails after the write, Update reports ErrStale, unless the
// retry hook takes over.
func TestUpdateInvalidationFailure(t *testing.T) {
	for _, withHook := range []bool{false, true} {
		t.Run(fmt.Sprintf("hook=%v", withHook), func(t *testing.T) {
			cacheSrv, lockSrv := redistest.Start(t), redistest.Start(t)
			db := openDB(t)
			var hooked []string
			var opts []cachelock.Option
			if withHook {
				opts = append(opts, cachelock.WithInvalidateRetry(func(ctx context.Context, keys []string) error {
					hooked = append(hooked, keys...)
					return nil
				}))
			}
			quick := func(o *redis.Options) { o.MaxRetries = -1; o.DialTimeout = 200 * time.Millisecond }
			c := newCacheOn(t, cacheSrv.Client(t, quick), lockSrv.Client(t), opts...)
			err := c.Update(context.Background(), "product:1", func(ctx context.Context, fence uint64) error {
				cacheSrv.Kill(t) // Redis holding the cache dies after the commit
				return setPrice(ctx, db, 1, 300, fence)
			})
			if got := dbPrice(t, db, 1); got != "300" {
				t.Fatalf("database holds %s, want 300", got)
			}
			if withHook {
				if err != nil || len(hooked) != 1 || hooked[0] != "product:1" {
					t.Fatalf("Update = %v with the hook called for %v; want nil after the hook took product:1", err, hooked)
				}
				return
			}
			if !errors.Is(err, cachelock.ErrStale) || !errors.Is(err, lockmw.ErrUnavailable) {
				t.Fatalf("Update = %v, want an error matching ErrStale and lockmw.ErrUnavailable", err)
			}
		})
	}
}

// TTL jitter shortens TTLs by up to the given share.
func TestTTLJitter(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := newCache(t, srv, cachelock.WithTTLJitter(0.5))
	ctx := context.Background()
	ttl := time.Hour
	shortest := ttl
	for i := range 20 {
		key := fmt.Sprintf("k%d", i)
		if _, err := c.Fetch(ctx, key, ttl, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
			t.Fatal(err)
		}
		left := rdb.PTTL(ctx, cachelock.DefaultPrefix+key).Val()
		if left > ttl || left < ttl/2-time.Minute {
			t.Fatalf("entry TTL %v outside [ttl/2, ttl] for ttl %v and jitter 0.5", left, ttl)
		}
		shortest = min(shortest, left)
	}
	if shortest > ttl*95/100 {
		t.Fatalf("20 jittered TTLs were all within 5%% of %v (shortest %v): no jitter applied", ttl, shortest)
	}
}

// Bad arguments get clear errors and send nothing to Redis.
func TestInvalidInput(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	locker, err := lockmw.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	if _, err := cachelock.New(nil, locker); !errors.Is(err, lockmw.ErrNilClient) {
		t.Errorf("New(nil client) = %v, want ErrNilClient", err)
	}
	if _, err := cachelock.New(rdb, nil); !errors.Is(err, cachelock.ErrNilLocker) {
		t.Errorf("New(nil locker) = %v, want ErrNilLocker", err)
	}
	for name, opt := range map[string]cachelock.Option{
		"WithFillLease(0)":       cachelock.WithFillLease(0),
		"WithStaleReads(-1)":     cachelock.WithStaleReads(-1),
		"WithNegativeCaching(0)": cachelock.WithNegativeCaching(0),
		"WithTTLJitter(1)":       cachelock.WithTTLJitter(1),
		"WithPrefix(long)":       cachelock.WithPrefix(string(make([]byte, cachelock.MaxPrefixLen+1))),
	} {
		if _, err := cachelock.New(rdb, locker, opt); !errors.Is(err, lockmw.ErrInvalidOption) {
			t.Errorf("New(%s) = %v, want ErrInvalidOption", name, err)
		}
	}
	c, err := cachelock.New(rdb, locker)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	load := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	before := rdb.DBSize(ctx).Val()
	if _, err := c.Fetch(ctx, "", time.Minute, load); !errors.Is(err, lockmw.ErrInvalidKey) {
		t.Errorf("Fetch(empty key) = %v, want ErrInvalidKey", err)
	}
	if _, err := c.Fetch(ctx, "k", 0, load); !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Errorf("Fetch(ttl 0) = %v, want ErrInvalidOption", err)
	}
	if _, err := c.Fetch(ctx, "k", time.Minute, nil); !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Errorf("Fetch(nil load) = %v, want ErrInvalidOption", err)
	}
	if err := c.Invalidate(ctx, "ok", ""); !errors.Is(err, lockmw.ErrInvalidKey) {
		t.Errorf("Invalidate(empty key) = %v, want ErrInvalidKey", err)
	}
	if err := c.Update(ctx, "k", nil); !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Errorf("Update(nil write) = %v, want ErrInvalidOption", err)
	}
	if after := rdb.DBSize(ctx).Val(); after != before {
		t.Errorf("invalid calls changed Redis: %d keys before, %d after", before, after)
	}
}

// FencedExec refuses a missing row and a stale fence, and accepts a newer one.
func TestFencedExec(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	if err := setPrice(ctx, db, 1, 1, 5); err != nil {
		t.Fatalf("fence 5 on a fresh row: %v", err)
	}
	for _, tc := range []struct {
		id    int
		fence uint64
		ok    bool
	}{{1, 5, false}, {1, 4, false}, {1, 6, true}, {9, 99, false}} {
		err := setPrice(ctx, db, tc.id, 2, tc.fence)
		if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, cachelock.ErrFenced)) {
			t.Errorf("row %d, fence %d: %v, want ok=%v or ErrFenced", tc.id, tc.fence, err, tc.ok)
		}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := cachelock.FencedExec(ctx, tx, cachelock.DollarNumbers, setPriceQuery, 7, 3, 1); err != nil {
		t.Fatalf("FencedExec in a transaction: %v", err)
	}
	var _ cachelock.Execer = (*sql.Conn)(nil)
}

// scriptCounter is a go-redis hook counting the scripts a client runs.
type scriptCounter struct{ n atomic.Int64 }

func (s *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			s.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (s *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// FetchJSON round-trips a typed value through the cache.
func TestFetchJSON(t *testing.T) {
	srv := redistest.Start(t)
	c := newCache(t, srv)
	type product struct {
		ID    int
		Price int64
	}
	ctx := context.Background()
	var loads int
	load := func(context.Context) (product, error) {
		loads++
		return product{ID: 1, Price: 250}, nil
	}
	for range 2 {
		p, err := cachelock.FetchJSON(ctx, c, "product:1", time.Minute, load)
		if err != nil || p != (product{ID: 1, Price: 250}) {
			t.Fatalf("FetchJSON = %+v, %v", p, err)
		}
	}
	if loads != 1 {
		t.Fatalf("two FetchJSON calls loaded %d times, want 1", loads)
	}
	if _, err := cachelock.FetchJSON(ctx, c, "product:1", time.Minute, func(context.Context) (string, error) { return "", nil }); err == nil {
		t.Fatal("FetchJSON into a different type succeeded, want a decoding error")
	}
}

// A filler that stalls past its fill lease does not block the key: another
// process takes the lease over and fills, and the late filler's value is not
// installed over it.
func TestExpiredFillLeaseTakenOver(t *testing.T) {
	srv := redistest.Start(t)
	stalled := newCache(t, srv, cachelock.WithFillLease(100*time.Millisecond))
	other := newCache(t, srv, cachelock.WithFillLease(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	started := make(chan struct{})
	resume := make(chan struct{})
	done := make(chan string, 1)
	go func() {
		v, err := stalled.Fetch(ctx, "k", time.Minute, func(context.Context) ([]byte, error) {
			select {
			case <-started:
			default:
				close(started)
				<-resume
			}
			return []byte("late"), nil
		})
		if err != nil {
			v = []byte("error: " + err.Error())
		}
		done <- string(v)
	}()
	wait(t, started, 10*time.Second, "the stalled fill to start")
	v, err := other.Fetch(ctx, "k", time.Minute, func(context.Context) ([]byte, error) { return []byte("fresh"), nil })
	if err != nil || string(v) != "fresh" {
		t.Fatalf("Fetch while the filler stalls past its lease = %q, %v; want its own fill, \"fresh\"", v, err)
	}
	close(resume)
	if got := wait(t, done, 10*time.Second, "the stalled filler"); got != "fresh" {
		t.Fatalf("the stalled filler returned %q; its lease was taken over, so it should read the new fill, \"fresh\"", got)
	}
	v, err = other.Fetch(ctx, "k", time.Minute, func(context.Context) ([]byte, error) {
		return nil, errors.New("the fresh value should be cached")
	})
	if err != nil || string(v) != "fresh" {
		t.Fatalf("cache holds %q, %v; want \"fresh\"", v, err)
	}
}

// The fence goes where the query writes {fence}, in both placeholder
// styles SQLite accepts, even when a row's id equals the fence: binding the
// fence as the first argument would update that row instead. The old
// convention (fence as the first argument, again in args for "?") is
// refused before it reaches the database.
func TestFencedExecBindsEachArgumentInPlace(t *testing.T) {
	for _, tc := range []struct {
		ph    cachelock.Placeholders
		query string
	}{
		{cachelock.QuestionMarks, `UPDATE products SET price = ?, fence = {fence} WHERE id = ? AND fence < {fence}`},
		{cachelock.DollarNumbers, `UPDATE products SET price = $1, fence = {fence} WHERE id = $2 AND fence < {fence}`},
	} {
		t.Run(tc.ph.String(), func(t *testing.T) {
			db := openDB(t)
			ctx := context.Background()
			const fence = 7
			if _, err := db.Exec(`INSERT INTO products (id, price) VALUES (?, 700)`, fence); err != nil {
				t.Fatal(err)
			}
			if _, err := cachelock.FencedExec(ctx, db, tc.ph, tc.query, fence, 555, 1); err != nil {
				t.Fatalf("FencedExec: %v", err)
			}
			if p := dbPrice(t, db, 1); p != "555" {
				t.Errorf("row 1 price = %s, want 555", p)
			}
			if p := dbPrice(t, db, fence); p != "700" {
				t.Errorf("row %d (id = the fence) price = %s, want it untouched at 700", fence, p)
			}
			var stored int
			if err := db.QueryRow(`SELECT fence FROM products WHERE id = 1`).Scan(&stored); err != nil || stored != fence {
				t.Errorf("row 1 fence = %d, %v; want %d", stored, err, fence)
			}
			if _, err := cachelock.FencedExec(ctx, db, tc.ph, tc.query, fence, 556, 1); !errors.Is(err, cachelock.ErrFenced) {
				t.Errorf("the same fence again = %v, want ErrFenced", err)
			}
		})
	}
	db := openDB(t)
	ctx := context.Background()
	old := `UPDATE products SET price = ?, fence = ? WHERE id = ? AND fence < ?`
	if _, err := cachelock.FencedExec(ctx, db, cachelock.QuestionMarks, old, 7, 7, 555, 1, 7); !errors.Is(err, cachelock.ErrInvalidQuery) {
		t.Errorf("FencedExec with the fence in args = %v, want ErrInvalidQuery", err)
	}
	short := `UPDATE products SET price = ?, fence = {fence} WHERE id = ? AND fence < ?`
	if _, err := cachelock.FencedExec(ctx, db, cachelock.QuestionMarks, short, 7, 555, 1); !errors.Is(err, cachelock.ErrInvalidQuery) {
		t.Errorf("FencedExec with a ? for the fence = %v, want ErrInvalidQuery", err)
	}
	if p := dbPrice(t, db, 1); p != "100" {
		t.Errorf("refused queries changed row 1 to %s", p)
	}
}
