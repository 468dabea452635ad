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

	"github.com/lockmw/lockmw/cachelock"
	"github.com/lockmw/lockmw/lockmw"
)

// Product prices read through the cache and changed through Update, with the
// database rejecting writers that lost their lock.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
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
	var db *sql.DB // sql.Open(...), with products(id, price, fence)
	ctx := context.Background()

	// Read: one load per key across the fleet on a miss.
	price, err := cache.Fetch(ctx, "product:42", 10*time.Minute, func(ctx context.Context) ([]byte, error) {
		var p int64
		err := db.QueryRowContext(ctx, `SELECT price FROM products WHERE id = $1`, 42).Scan(&p)
		return []byte(strconv.FormatInt(p, 10)), err
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("price:", string(price))

	// Write: serialized per key, fenced in the database, then invalidated.
	err = cache.Update(ctx, "product:42", func(ctx context.Context, fence uint64) error {
		_, err := cachelock.FencedExec(ctx, db,
			`UPDATE products SET price = $2, fence = $1 WHERE id = $3 AND fence < $1`, fence, 1999, 42)
		return err
	})
	switch {
	case errors.Is(err, lockmw.ErrLost), errors.Is(err, cachelock.ErrFenced):
		fmt.Println("lost the lock mid-write; the database kept the newer writer's price")
	case errors.Is(err, cachelock.ErrStale):
		fmt.Println("price changed, but the cache may serve the old one until its TTL")
	case err != nil:
		log.Fatal(err)
	}
}

// Cache "not found" answers, so that requests for missing rows do not all
// reach the database.
func ExampleWithNegativeCaching() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
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
	var db *sql.DB
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
}

// Retry a failed invalidation in the background, so that Update succeeds
// even while Redis blips after the database commit.
func ExampleWithInvalidateRetry() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
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
