package redispeers_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/benchsuite"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// Benchmarks of lockmw on one redis-server beside what a Redis user would
// pick instead, each contender on a client of its own (as a process would
// have): raw SET NX PX polled every pollEvery and released by a
// compare-and-delete script; redsync's Mutex on go-redis, retrying every
// pollEvery (its default, 50-250 ms between 32 tries, gives up under this
// contention); rueidislock with its defaults (a lock is a majority of
// three keys, waiters woken by client-side caching invalidations).
// Commands are counted by the server (INFO stats).

const (
	pollEvery = time.Millisecond
	ttl       = 10 * time.Second
)

// kinds are the implementations compared on srv.
func kinds(srv *redistest.Server) []benchsuite.Kind {
	return []benchsuite.Kind{
		{Name: "lockmw", New: func(tb testing.TB) benchsuite.Mutex {
			l, err := lockmw.New(client(tb, srv))
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { _ = l.Close() })
			return benchsuite.Locker{L: l}
		}},
		{Name: "raw-setnx-poll1ms", New: func(tb testing.TB) benchsuite.Mutex {
			return raw(client(tb, srv))
		}},
		{Name: "redsync", New: func(tb testing.TB) benchsuite.Mutex {
			rs := redsync.New(goredis.NewPool(client(tb, srv)))
			return redsyncMutex{rs: rs}
		}},
		{Name: "rueidislock", New: func(tb testing.TB) benchsuite.Mutex {
			l, err := rueidislock.NewLocker(rueidislock.LockerOption{
				ClientOption: rueidis.ClientOption{InitAddress: []string{srv.Addr()}},
			})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(l.Close)
			return rueidisMutex{l: l}
		}},
	}
}

// client is a go-redis client of its own on srv, with the README's
// settings (no retries, pipelines on the main pool) but timeouts long
// enough that a loaded machine's slow reply is not an error.
func client(tb testing.TB, srv *redistest.Server) *redis.Client {
	return srv.Client(tb, func(o *redis.Options) {
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = time.Second, time.Second, time.Second
		o.MaxRetries, o.PipelinePoolSize = -1, -1
	})
}

// release is the compare-and-delete of the raw loop.
var release = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// raw is SET NX PX polled every pollEvery, released by release.
func raw(c *redis.Client) benchsuite.Poll {
	var n atomic.Int64
	tokens := map[string]string{}
	return benchsuite.Poll{
		Try: func(ctx context.Context, key string) (bool, error) {
			tok := strconv.FormatInt(n.Add(1), 16)
			ok, err := c.SetNX(ctx, key, tok, ttl).Result()
			if ok {
				tokens[key] = tok
			}
			return ok, err
		},
		Unlock: func(ctx context.Context, key string) {
			_ = release.Run(ctx, c, []string{key}, tokens[key]).Err()
		},
		Every: pollEvery,
	}
}

// redsyncMutex is a redsync Mutex per lock call, retrying every pollEvery
// until the call's context ends.
type redsyncMutex struct{ rs *redsync.Redsync }

func (m redsyncMutex) Lock(ctx context.Context, key string) (func(), error) {
	mu := m.rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(math.MaxInt32), redsync.WithRetryDelay(pollEvery))
	if err := mu.LockContext(ctx); err != nil {
		return nil, err
	}
	return func() { _, _ = mu.UnlockContext(context.Background()) }, nil
}

// rueidisMutex is a rueidislock Locker: WithContext waits for the lock.
type rueidisMutex struct{ l rueidislock.Locker }

func (m rueidisMutex) Lock(ctx context.Context, key string) (func(), error) {
	_, cancel, err := m.l.WithContext(ctx, key)
	if err != nil {
		return nil, err
	}
	return cancel, nil
}

// commands counts the commands srv processed.
func commands(srv *redistest.Server) benchsuite.Counter {
	return benchsuite.Counter{Unit: "cmds", Count: func(tb testing.TB) int64 {
		n, err := strconv.ParseInt(srv.Info(tb, "stats")["total_commands_processed"], 10, 64)
		if err != nil {
			tb.Fatal(errors.Join(errors.New("INFO stats total_commands_processed"), err))
		}
		return n
	}}
}

// BenchmarkUncontended is one goroutine taking and releasing a free lock,
// for each implementation.
func BenchmarkUncontended(b *testing.B) {
	srv := redistest.Start(b)
	benchsuite.UncontendedCounted(b, kinds(srv), commands(srv))
}

// BenchmarkContended is benchsuite.Contenders clients of each
// implementation taking turns on one key, holding it benchsuite.HoldFor.
func BenchmarkContended(b *testing.B) {
	srv := redistest.Start(b)
	benchsuite.ContendedCounted(b, kinds(srv), commands(srv))
}
