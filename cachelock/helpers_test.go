package cachelock_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	_ "modernc.org/sqlite"

	"github.com/lockmw/lockmw/cachelock"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// newCache returns a Cache with its own Redis client and Locker on srv, as a
// separate process would have, closed at cleanup.
func newCache(t testing.TB, srv *redistest.Server, opts ...cachelock.Option) *cachelock.Cache {
	t.Helper()
	return newCacheOn(t, srv.Client(t), srv.Client(t), opts...)
}

// newCacheOn returns a Cache whose entries live on cacheRDB and whose Locker
// uses lockRDB.
func newCacheOn(t testing.TB, cacheRDB, lockRDB redis.UniversalClient, opts ...cachelock.Option) *cachelock.Cache {
	t.Helper()
	locker, err := lockmw.New(lockRDB, lockmw.WithTTL(2*time.Second))
	if err != nil {
		t.Fatalf("lockmw.New: %v", err)
	}
	t.Cleanup(func() { _ = locker.Close() })
	quiet := cachelock.WithLogger(slog.New(slog.DiscardHandler))
	c, err := cachelock.New(cacheRDB, locker, append([]cachelock.Option{quiet}, opts...)...)
	if err != nil {
		t.Fatalf("cachelock.New: %v", err)
	}
	return c
}

// openDB opens a fresh SQLite database in a temporary directory with a
// products table holding product 1 at price 100, fence 0.
func openDB(t testing.TB) *sql.DB {
	t.Helper()
	dsn := "file:" + filepath.Join(t.TempDir(), "shop.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.Exec(`CREATE TABLE products (id INTEGER PRIMARY KEY, price INTEGER NOT NULL, fence INTEGER NOT NULL DEFAULT 0)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO products (id, price) VALUES (1, 100)`); err != nil {
		t.Fatal(err)
	}
	return db
}

// loadPrice reads product id's price as the cache stores it.
func loadPrice(ctx context.Context, db *sql.DB, id int) ([]byte, error) {
	var price int
	err := db.QueryRowContext(ctx, `SELECT price FROM products WHERE id = ?`, id).Scan(&price)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, cachelock.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return []byte(strconv.Itoa(price)), nil
}

// dbPrice returns product id's price, failing the test on error.
func dbPrice(t testing.TB, db *sql.DB, id int) string {
	t.Helper()
	v, err := loadPrice(context.Background(), db, id)
	if err != nil {
		t.Fatalf("reading product %d: %v", id, err)
	}
	return string(v)
}

// setPriceQuery is the fenced UPDATE of the tests, with price and id.
const setPriceQuery = `UPDATE products SET price = $1, fence = {fence} WHERE id = $2 AND fence < {fence}`

// setPrice writes product id's price with fence, fenced.
func setPrice(ctx context.Context, db *sql.DB, id, price int, fence uint64) error {
	_, err := cachelock.FencedExec(ctx, db, cachelock.DollarNumbers, setPriceQuery, fence, price, id)
	return err
}

// cachedPrice returns what the cache serves for key: the cached value if it
// holds one, and the load's value otherwise; loaded says which.
func cachedPrice(t testing.TB, c *cachelock.Cache, db *sql.DB, key string, id int) (value string, loaded bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v, err := c.Fetch(ctx, key, time.Minute, func(ctx context.Context) ([]byte, error) {
		loaded = true
		return loadPrice(ctx, db, id)
	})
	if err != nil {
		t.Fatalf("Fetch(%q): %v", key, err)
	}
	return string(v), loaded
}

// wait receives from ch, failing the test after limit.
func wait[T any](t testing.TB, ch <-chan T, limit time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(limit):
		t.Fatalf("timed out after %v waiting for %s", limit, what)
		panic("unreachable")
	}
}

// meter returns a MeterProvider and a function that reads counter name's
// total from it.
func meter(t testing.TB) (*sdkmetric.MeterProvider, func(name string) int64) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp, func(name string) int64 {
		t.Helper()
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != name {
					continue
				}
				sum, ok := m.Data.(metricdata.Sum[int64])
				if !ok {
					t.Fatalf("metric %s is %T, want an int64 sum", name, m.Data)
				}
				for _, dp := range sum.DataPoints {
					total += dp.Value
				}
			}
		}
		return total
	}
}
