package cachelock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"

	"github.com/lockmw/lockmw/cachelock"
	"github.com/lockmw/lockmw/lockmw"
)

// redisAddr is the Redis the examples use. TestMain points it at a
// redis-server of its own.
var redisAddr = "localhost:6379"

// Product prices read through the cache and changed through Update, with the
// database rejecting writers that lost their lock.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, // settings: see lockmw
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond,
		MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true, PipelinePoolSize: -1})
	defer rdb.Close()
	locker, err := lockmw.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	cache, err := cachelock.New(rdb, locker, cachelock.WithTTLJitter(0.1))
	if err != nil {
		log.Fatal(err)
	}

	// The database, here SQLite in memory (modernc.org/sqlite), with
	// products(id, price, fence).
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one in-memory database
	if _, err := db.Exec(`CREATE TABLE products (id INTEGER PRIMARY KEY, price INTEGER, fence INTEGER);
		INSERT INTO products VALUES (42, 1499, 0)`); err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	// Read: one load per key across the fleet on a miss. A missing row is
	// cachelock.ErrNotFound, never a nil value.
	loadPrice := func(ctx context.Context) ([]byte, error) {
		var p int64
		err := db.QueryRowContext(ctx, `SELECT price FROM products WHERE id = $1`, 42).Scan(&p)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, cachelock.ErrNotFound
		}
		return []byte(strconv.FormatInt(p, 10)), err
	}
	price, err := cache.Fetch(ctx, "product:42", 10*time.Minute, loadPrice)
	fmt.Println("price:", string(price), err)

	// Write: serialized and fenced per row, then every cache key of the row
	// is invalidated. The query writes the fence as {fence}; FencedExec
	// binds it there and refuses a placeholder count that does not match.
	err = cache.Update(ctx, "products/42", func(ctx context.Context, fence uint64) error {
		_, err := cachelock.FencedExec(ctx, db, cachelock.DollarNumbers,
			`UPDATE products SET price = $1, fence = {fence} WHERE id = $2 AND fence < {fence}`, fence, 1999, 42)
		return err
	}, cachelock.Invalidating("product:42", "product-sku:ABC-42"))
	switch {
	case errors.Is(err, lockmw.ErrLost), errors.Is(err, cachelock.ErrFenced):
		fmt.Println("lost the lock mid-write; the database kept the newer writer's price")
	case errors.Is(err, cachelock.ErrStale):
		fmt.Println("price changed, but the cache may serve the old one until its TTL")
	case err != nil:
		log.Fatal(err)
	}

	// The next read misses and loads the new price.
	price, err = cache.Fetch(ctx, "product:42", 10*time.Minute, loadPrice)
	fmt.Println("price:", string(price), err)
	// Output:
	// price: 1499 <nil>
	// price: 1999 <nil>
}

// Read only what the cache holds, and leave misses to a batch loader.
func ExampleCache_Get() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr}) // and the settings of the package example
	defer rdb.Close()
	locker, err := lockmw.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	cache, err := cachelock.New(rdb, locker)
	if err != nil {
		log.Fatal(err)
	}
	v, err := cache.Get(context.Background(), "product:7")
	switch {
	case errors.Is(err, cachelock.ErrMiss):
		fmt.Println("not cached: load it")
	case errors.Is(err, cachelock.ErrNotFound):
		fmt.Println("cached as missing")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("cached:", string(v))
	}
	// Output: not cached: load it
}

// A fenced write for MySQL (or SQLite) with "?" placeholders: the fence is
// written as {fence}, never as a "?", so it cannot take an argument's place.
// (Compiled, not run.)
func ExampleFencedExec() {
	var tx *sql.Tx // db.BeginTx(...)
	var cache *cachelock.Cache
	err := cache.Update(context.Background(), "products/42", func(ctx context.Context, fence uint64) error {
		_, err := cachelock.FencedExec(ctx, tx, cachelock.QuestionMarks,
			"UPDATE products SET price = ?, fence = {fence} WHERE id = ? AND fence < {fence}", fence, 1999, 42)
		if err != nil {
			return err // ErrFenced: a newer writer got there first
		}
		return tx.Commit()
	}, cachelock.Invalidating("product:42"))
	if err != nil {
		log.Print(err)
	}
}

// Cache "not found" answers, so that requests for missing rows do not all
// reach the database.
func ExampleWithNegativeCaching() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr}) // and the settings of the package example
	defer rdb.Close()
	locker, err := lockmw.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	cache, err := cachelock.New(rdb, locker, cachelock.WithNegativeCaching(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one in-memory database
	if _, err := db.Exec(`CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)`); err != nil {
		log.Fatal(err)
	}
	_, err = cache.Fetch(context.Background(), "user:7", time.Hour, func(ctx context.Context) ([]byte, error) {
		var name string
		err := db.QueryRowContext(ctx, `SELECT name FROM users WHERE id = $1`, 7).Scan(&name)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, cachelock.ErrNotFound // cached for 30s
		}
		return []byte(name), err
	})
	if errors.Is(err, cachelock.ErrNotFound) {
		fmt.Println("no such user")
	}
	// Output: no such user
}

// Retry a failed invalidation in the background, so that Update succeeds
// even while Redis blips after the database commit.
func ExampleWithInvalidateRetry() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr}) // and the settings of the package example
	defer rdb.Close()
	locker, err := lockmw.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	var cache *cachelock.Cache
	retry := func(ctx context.Context, keys []string) error {
		go func() {
			for delay := 100 * time.Millisecond; delay < time.Minute; delay *= 2 {
				time.Sleep(delay)
				if cache.Invalidate(ctx, keys...) == nil {
					return
				}
			}
			log.Printf("cache keys %v may stay stale until their TTL", keys)
		}()
		return nil // taken over: Update reports success
	}
	cache, err = cachelock.New(rdb, locker, cachelock.WithInvalidateRetry(retry))
	if err != nil {
		log.Fatal(err)
	}
	_ = cache
}
