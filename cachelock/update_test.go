package cachelock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/cachelock"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// One row cached under two keys (by id and by SKU): Updates name the row as
// the resource they fence, whichever keys they invalidate, so an update
// through either key is accepted, and every key it names serves the new
// value afterwards.
func TestUpdateFencesTheRowAcrossCacheKeys(t *testing.T) {
	srv := redistest.Start(t)
	db := openDB(t)
	a := newCache(t, srv)
	b := newCache(t, srv) // another process
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const byID, bySKU, row = "product:1", "product-sku:ABC", "products/1"

	for _, k := range []string{byID, bySKU} {
		if v, _ := cachedPrice(t, a, db, k, 1); v != "100" {
			t.Fatalf("%s = %s, want 100", k, v)
		}
	}
	update := func(c *cachelock.Cache, price int, keys ...string) error {
		return c.Update(ctx, row, func(ctx context.Context, fence uint64) error {
			return setPrice(ctx, db, 1, price, fence)
		}, cachelock.Invalidating(keys...))
	}
	for i := range 5 {
		if err := update(a, 200+i, byID); err != nil {
			t.Fatalf("update %d through %s: %v", i+1, byID, err)
		}
	}
	if err := update(b, 300, bySKU); err != nil {
		t.Fatalf("update through %s after 5 through %s: %v (want accepted: the fence is the row's)", bySKU, byID, err)
	}
	if v, _ := cachedPrice(t, a, db, bySKU, 1); v != "300" {
		t.Fatalf("%s = %s after its update, want 300", bySKU, v)
	}
	if err := update(a, 400, byID, bySKU); err != nil {
		t.Fatalf("update through both keys: %v", err)
	}
	for _, c := range []*cachelock.Cache{a, b} {
		for _, k := range []string{byID, bySKU} {
			if v, _ := cachedPrice(t, c, db, k, 1); v != "400" {
				t.Fatalf("%s = %s after the update of both keys, want 400 (database %s)", k, v, dbPrice(t, db, 1))
			}
		}
	}
}

// Update without Invalidating locks per cache key: updating one row through
// two of its keys that way does not serialize the writers. One after the
// other, every write lands (fences are store-wide); a write overtaken by
// the other key's while its Update ran is fenced out, and the error says
// why and what to write instead.
func TestUpdateWithoutInvalidatingExplainsFencedWrites(t *testing.T) {
	srv := redistest.Start(t)
	db := openDB(t)
	c := newCache(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, key := range []string{"product:1", "product:1", "product:1", "product-sku:ABC", "product:1"} {
		err := c.Update(ctx, key, func(ctx context.Context, fence uint64) error {
			return setPrice(ctx, db, 1, 100+i, fence)
		})
		if err != nil {
			t.Fatalf("update %d through %s, one after the other: %v", i+1, key, err)
		}
	}
	// "product:1" takes its fence, then "product-sku:ABC" takes a higher
	// one and writes first.
	holding, overtaken := make(chan struct{}), make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- c.Update(ctx, "product:1", func(ctx context.Context, fence uint64) error {
			close(holding)
			<-overtaken
			return setPrice(ctx, db, 1, 500, fence)
		})
	}()
	<-holding
	if err := c.Update(ctx, "product-sku:ABC", func(ctx context.Context, fence uint64) error {
		return setPrice(ctx, db, 1, 600, fence)
	}); err != nil {
		t.Fatalf("update through product-sku:ABC: %v", err)
	}
	close(overtaken)
	err := <-errc
	if !errors.Is(err, cachelock.ErrFenced) {
		t.Fatalf("update through product:1 overtaken by one through product-sku:ABC = %v, want ErrFenced", err)
	}
	for _, want := range []string{"another resource", "no Invalidating", "cache key \"product:1\"", "Invalidating"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("fenced Update: %q does not say %q", err, want)
		}
	}
	// With Invalidating the row is the resource: the fence error carries
	// no such advice; a write that ran FencedExec with another fence than
	// Update's is told so.
	err = c.Update(ctx, "products/1", func(ctx context.Context, fence uint64) error {
		_, err := cachelock.FencedExec(ctx, db, cachelock.DollarNumbers, setPriceQuery, 0, 1, 1) // fence 0: never newer
		return err
	}, cachelock.Invalidating("product:1"))
	if !errors.Is(err, cachelock.ErrFenced) || strings.Contains(err.Error(), "no Invalidating") || !strings.Contains(err.Error(), "with fence 0, not this Update's fence") {
		t.Errorf("Update with Invalidating, write fenced with fence 0: %v; want ErrFenced naming both fences, without the advice", err)
	}
}

// An Update under a wrong resource (the row updated once under another
// name) wins once: its write lands, and the row's correct Updates land
// after it, with fences that keep rising (the issue: they were all fenced
// out, for as long as the wrong resource's counter, seeded from the
// Redis clock, stayed ahead of the right one's).
func TestUpdateUnderAWrongResourceWinsOnce(t *testing.T) {
	srv := redistest.Start(t)
	db := openDB(t)
	c := newCache(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var fences []uint64
	update := func(resource string, price int, opts ...cachelock.UpdateOption) error {
		return c.Update(ctx, resource, func(ctx context.Context, fence uint64) error {
			if resource == "products/1" {
				fences = append(fences, fence)
			}
			return setPrice(ctx, db, 1, price, fence)
		}, opts...)
	}
	for i := range 3 {
		if err := update("products/1", 200+i, cachelock.Invalidating("product:1")); err != nil {
			t.Fatalf("update %d of products/1: %v", i+1, err)
		}
	}
	if err := update("product-sku:ABC", 300); err != nil {
		t.Fatalf("update of the same row under product-sku:ABC: %v, want it to land (once)", err)
	}
	if v := dbPrice(t, db, 1); v != "300" {
		t.Fatalf("price %s after the update under product-sku:ABC, want 300", v)
	}
	for i := range 3 {
		if err := update("products/1", 400+i, cachelock.Invalidating("product:1")); err != nil {
			t.Errorf("update %d of products/1 after one under product-sku:ABC: %v, want it to land", i+1, err)
		}
	}
	if v := dbPrice(t, db, 1); v != "402" {
		t.Errorf("price %s, want 402, the last update's", v)
	}
	if v, _ := cachedPrice(t, c, db, "product:1", 1); v != "402" {
		t.Errorf("product:1 serves %s, want 402", v)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Errorf("fences of products/1 %v: not strictly rising", fences)
			break
		}
	}
}

// A fenced-out write of a row that does not exist says so, and gives the
// advice about two cache keys only as what it would take if the row did
// exist: "product:3" is the only key ever used.
func TestUpdateOfAMissingRowSaysSo(t *testing.T) {
	srv := redistest.Start(t)
	db := openDB(t)
	c := newCache(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, opts := range [][]cachelock.UpdateOption{nil, {cachelock.Invalidating("product:3")}} {
		resource := "product:3"
		if opts != nil {
			resource = "products/3"
		}
		err := c.Update(ctx, resource, func(ctx context.Context, fence uint64) error {
			return setPrice(ctx, db, 3, 300, fence)
		}, opts...)
		if !errors.Is(err, cachelock.ErrFenced) {
			t.Fatalf("Update(%q) of a missing row = %v, want ErrFenced", resource, err)
		}
		for _, want := range []string{"the row does not exist", "only if it does exist"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Update(%q) of a missing row: %q does not say %q", resource, err, want)
			}
		}
	}
}

// Writers of one row through different cache keys are serialized by the
// row's lock: concurrent Updates through two keys all commit, none fenced.
func TestConcurrentUpdatesOfARowThroughTwoKeys(t *testing.T) {
	srv := redistest.Start(t)
	db := openDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for w, key := range []string{"product:1", "product-sku:ABC", "product:1", "product-sku:ABC"} {
		c := newCache(t, srv)
		wg.Go(func() {
			for i := range 10 {
				errs <- c.Update(ctx, "products/1", func(ctx context.Context, fence uint64) error {
					return setPrice(ctx, db, 1, 1000*w+i, fence)
				}, cachelock.Invalidating(key))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Update: %v", err)
		}
	}
}

// Update refuses an empty Invalidating and bad keys before locking.
func TestUpdateInvalidatingBadInput(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := newCacheOn(t, rdb, srv.Client(t))
	ctx := context.Background()
	write := func(context.Context, uint64) error { t.Error("write called for bad input"); return nil }
	if err := c.Update(ctx, "products/1", write, cachelock.Invalidating()); !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Errorf("Update with Invalidating() = %v, want ErrInvalidOption", err)
	}
	if err := c.Update(ctx, "products/1", write, cachelock.Invalidating("ok", "")); !errors.Is(err, lockmw.ErrInvalidKey) {
		t.Errorf("Update with an empty key = %v, want ErrInvalidKey", err)
	}
	if err := c.Update(ctx, "", write); !errors.Is(err, lockmw.ErrInvalidKey) {
		t.Errorf("Update of an empty resource = %v, want ErrInvalidKey", err)
	}
	if n := rdb.DBSize(ctx).Val(); n != 0 {
		t.Errorf("bad Updates left %d keys in Redis", n)
	}
}

// New refuses a nil pointer in a non-nil interface, as it does nil.
func TestNewRejectsTypedNilClient(t *testing.T) {
	srv := redistest.Start(t)
	locker, err := lockmw.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	var nilClient *redis.Client
	if _, err := cachelock.New(nilClient, locker); !errors.Is(err, lockmw.ErrNilClient) {
		t.Fatalf("New((*redis.Client)(nil)) = %v, want ErrNilClient", err)
	}
	var nilCluster *redis.ClusterClient
	if _, err := cachelock.New(nilCluster, locker); !errors.Is(err, lockmw.ErrNilClient) {
		t.Fatalf("New((*redis.ClusterClient)(nil)) = %v, want ErrNilClient", err)
	}
}

// New sends nothing to Redis, so it cannot tell a closed client or Locker;
// the first call that needs them says so with errors.Is-able errors.
func TestClosedClientAndLockerAreReportedOnUse(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	locker, err := lockmw.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := cachelock.New(rdb, locker)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := locker.Close(); err != nil {
		t.Fatal(err)
	}
	write := func(context.Context, uint64) error { t.Error("write called with a closed Locker"); return nil }
	if err := c.Update(ctx, "products/1", write); !errors.Is(err, lockmw.ErrClosed) {
		t.Errorf("Update with a closed Locker = %v, want lockmw.ErrClosed", err)
	}
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(ctx, "k")
	if !errors.Is(err, redis.ErrClosed) || !errors.Is(err, lockmw.ErrUnavailable) {
		t.Errorf("Get with a closed client = %v, want redis.ErrClosed and lockmw.ErrUnavailable", err)
	}
}

// The cache and the locks may live on different deployments (the locks,
// say, on a Redlock quorum): entries stay in the cache's Redis, locks in
// the Locker's, and fencing and invalidation keep working.
func TestCacheAndLocksOnSeparateDeployments(t *testing.T) {
	servers := redistest.StartN(t, 2)
	cacheRDB, lockRDB := servers[0].Client(t), servers[1].Client(t)
	db := openDB(t)
	a := newCacheOn(t, cacheRDB, lockRDB)
	b := newCacheOn(t, servers[0].Client(t), servers[1].Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if v, _ := cachedPrice(t, a, db, "product:1", 1); v != "100" {
		t.Fatalf("first read = %s, want 100", v)
	}
	var fences []uint64
	for i, c := range []*cachelock.Cache{a, b, a} {
		err := c.Update(ctx, "products/1", func(ctx context.Context, fence uint64) error {
			fences = append(fences, fence)
			return setPrice(ctx, db, 1, 200+i, fence)
		}, cachelock.Invalidating("product:1"))
		if err != nil {
			t.Fatalf("Update %d: %v", i, err)
		}
		if v, _ := cachedPrice(t, b, db, "product:1", 1); v != fmt.Sprint(200+i) {
			t.Fatalf("after Update %d the cache serves %s, want %d", i, v, 200+i)
		}
	}
	if !(fences[0] < fences[1] && fences[1] < fences[2]) {
		t.Fatalf("fences %v do not rise", fences)
	}
	lockKeys, _ := lockRDB.Keys(ctx, "*").Result()
	cacheKeys, _ := cacheRDB.Keys(ctx, "*").Result()
	for _, k := range lockKeys {
		if len(k) >= len(cachelock.DefaultPrefix) && k[:len(cachelock.DefaultPrefix)] == cachelock.DefaultPrefix {
			t.Errorf("cache entry %q on the lock deployment", k)
		}
	}
	if len(cacheKeys) != 1 || cacheKeys[0] != cachelock.DefaultPrefix+"product:1" {
		t.Errorf("cache deployment holds %v, want only the entry of product:1", cacheKeys)
	}
}

// recordingLogger returns a logger that keeps every record.
func recordingLogger() (*slog.Logger, func() []slog.Record) {
	h := &recordHandler{}
	return slog.New(h), func() []slog.Record {
		h.mu.Lock()
		defer h.mu.Unlock()
		return append([]slog.Record(nil), h.records...)
	}
}

type recordHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.records = append(h.records, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }
