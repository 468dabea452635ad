package cachelock_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/cachelock"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

// cacheAside is the two operations the stalled-loader race needs, so that
// cachelock and a naive cache-aside can run the same scenario.
type cacheAside struct {
	fetch  func(ctx context.Context, key string, load func(ctx context.Context) ([]byte, error)) ([]byte, error)
	update func(ctx context.Context, key string, write func(ctx context.Context, fence uint64) error) error
}

// naiveCacheAside is the control: GET, on a miss load and SET; update the
// database, then DEL. Its writers take no lock and use a local counter as
// the fence, which is enough for one writer.
func naiveCacheAside(rdb *redis.Client) cacheAside {
	var fence uint64
	return cacheAside{
		fetch: func(ctx context.Context, key string, load func(ctx context.Context) ([]byte, error)) ([]byte, error) {
			v, err := rdb.Get(ctx, key).Bytes()
			if err == nil {
				return v, nil
			}
			if !errors.Is(err, redis.Nil) {
				return nil, err
			}
			v, err = load(ctx)
			if err != nil {
				return nil, err
			}
			return v, rdb.Set(ctx, key, v, time.Minute).Err()
		},
		update: func(ctx context.Context, key string, write func(ctx context.Context, fence uint64) error) error {
			fence++
			if err := write(ctx, fence); err != nil {
				return err
			}
			return rdb.Del(ctx, key).Err()
		},
	}
}

func cachelockAside(c *cachelock.Cache) cacheAside {
	return cacheAside{
		fetch: func(ctx context.Context, key string, load func(ctx context.Context) ([]byte, error)) ([]byte, error) {
			return c.Fetch(ctx, key, time.Minute, load)
		},
		update: func(ctx context.Context, key string, write func(ctx context.Context, fence uint64) error) error {
			return c.Update(ctx, key, write)
		},
	}
}

// stalledLoaderRace plays the classic race: a reader misses and loads the
// price (100) from the database, then stalls; a writer commits 200 and
// invalidates; the reader resumes and tries to cache 100. It returns what
// the stalled reader got, what a later read through reader serves and what
// the database holds.
func stalledLoaderRace(t *testing.T, db *sql.DB, reader, writer cacheAside) (stalled, served, stored string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const key = "product:1"

	loaded := make(chan string, 1)
	resume := make(chan struct{})
	readDone := make(chan error, 1)
	go func() {
		first := true
		v, err := reader.fetch(ctx, key, func(ctx context.Context) ([]byte, error) {
			v, err := loadPrice(ctx, db, 1)
			if first {
				first = false
				loaded <- string(v)
				<-resume // the stall: GC pause, slow network
			}
			return v, err
		})
		stalled = string(v)
		readDone <- err
	}()
	if got := wait(t, loaded, 10*time.Second, "the reader's load"); got != "100" {
		t.Fatalf("reader loaded %q, want 100", got)
	}

	err := writer.update(ctx, key, func(ctx context.Context, fence uint64) error {
		return setPrice(ctx, db, 1, 200, fence)
	})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	close(resume)
	if err := wait(t, readDone, 10*time.Second, "the stalled reader"); err != nil {
		t.Fatalf("stalled reader: %v", err)
	}

	v, err := reader.fetch(ctx, key, func(ctx context.Context) ([]byte, error) { return loadPrice(ctx, db, 1) })
	if err != nil {
		t.Fatalf("fetch after the race: %v", err)
	}
	return stalled, string(v), dbPrice(t, db, 1)
}

func TestStalledLoaderRace(t *testing.T) {
	srv := redistest.Start(t)

	t.Run("cachelock ends equal to the database", func(t *testing.T) {
		db := openDB(t)
		reader := cachelockAside(newCache(t, srv, cachelock.WithPrefix("fixed:")))
		writer := cachelockAside(newCache(t, srv, cachelock.WithPrefix("fixed:")))
		stalled, served, stored := stalledLoaderRace(t, db, reader, writer)
		if stored != "200" {
			t.Fatalf("database holds %s, want the writer's 200", stored)
		}
		if served != stored {
			t.Fatalf("cache serves %s, database holds %s: the stalled fill was installed after the invalidation", served, stored)
		}
		if stalled != "200" {
			t.Fatalf("the stalled reader returned %s; its fill was revoked, so it should have loaded again and got 200", stalled)
		}
	})

	t.Run("naive cache-aside control ends stale", func(t *testing.T) {
		db := openDB(t)
		naive := naiveCacheAside(srv.Client(t))
		_, served, stored := stalledLoaderRace(t, db, naive, naive)
		if stored != "200" {
			t.Fatalf("database holds %s, want the writer's 200", stored)
		}
		if served != "100" {
			t.Fatalf("naive cache-aside serves %s, want the stale 100: the control no longer reproduces the race", served)
		}
	})
}
