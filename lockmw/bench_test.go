package lockmw_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

// BenchmarkLockUnlock measures uncontended TryAcquire+Release against a
// local redis-server, at 1 and 32 concurrent goroutines, reporting ops/s.
func BenchmarkLockUnlock(b *testing.B) {
	srv := redistest.Start(b)
	for _, goroutines := range []int{1, 32} {
		b.Run(fmt.Sprintf("goroutines=%d", goroutines), func(b *testing.B) {
			client := srv.Client(b, benchClient, func(o *redis.Options) { o.PoolSize = goroutines })
			l := newLockerOn(b, client)
			ctx := context.Background()
			var next atomic.Int64
			b.ResetTimer()
			start := time.Now()
			runGoroutines(b, goroutines, func() error {
				key := "bench:" + strconv.FormatInt(next.Add(1)%1024, 10)
				lease, err := l.TryAcquire(ctx, key)
				if err != nil {
					return nil // another goroutine holds this key right now
				}
				return lease.Release(ctx)
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
		})
	}
}

// benchClient gives a benchmark's client short timeouts and no retries
// inside go-redis, as the README's client has, so that New does not warn
// about a slow client (a line per Locker, hundreds per make bench run).
// Timeouts and retries act only on a failed or stalled command, which a
// benchmark does not measure; the pools are left as go-redis makes them
// (PipelinePoolSize too), so the measured path is go-redis' default one.
// The timeouts are a second, not the README's 300ms: a loaded benchmark
// machine must not turn a slow reply into an error.
func benchClient(o *redis.Options) {
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = time.Second, time.Second, time.Second
	o.MaxRetries = -1
}

// benchClusterClient is benchClient for a Cluster client, whose
// redirects (3) count as retries too: its timeouts are 500ms.
func benchClusterClient(o *redis.ClusterOptions) {
	d := 500 * time.Millisecond
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = d, d, d
	o.MaxRetries = -1
}

// rawRelease is the compare-and-delete the raw floor pays for an unlock.
var rawRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// BenchmarkRawFloor is the floor lockmw's uncontended path is held to:
// go-redis doing SET NX PX and then an EVALSHA compare-and-delete, nothing
// else, on the same kind of server and key spread as BenchmarkLockUnlock.
func BenchmarkRawFloor(b *testing.B) {
	srv := redistest.Start(b)
	for _, goroutines := range []int{1, 32} {
		b.Run(fmt.Sprintf("goroutines=%d", goroutines), func(b *testing.B) {
			client := srv.Client(b, benchClient, func(o *redis.Options) { o.PoolSize = goroutines })
			ctx := context.Background()
			var next atomic.Int64
			b.ResetTimer()
			start := time.Now()
			runGoroutines(b, goroutines, func() error {
				key := "raw:" + strconv.FormatInt(next.Add(1)%1024, 10)
				token := strconv.FormatInt(next.Load(), 16)
				ok, err := client.SetNX(ctx, key, token, 10*time.Second).Result()
				if err != nil || !ok {
					return err
				}
				return rawRelease.Run(ctx, client, []string{key}, token).Err()
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
		})
	}
}

// runGoroutines runs op b.N times in all, from exactly n goroutines.
func runGoroutines(b *testing.B, n int, op func() error) {
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if err := op(); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
