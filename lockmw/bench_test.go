package lockmw_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/redistest"
)

// BenchmarkLockUnlock measures uncontended TryAcquire+Release against a
// local redis-server, at 1 and 32 concurrent goroutines, reporting ops/s.
func BenchmarkLockUnlock(b *testing.B) {
	srv := redistest.Start(b)
	for _, goroutines := range []int{1, 32} {
		b.Run(fmt.Sprintf("goroutines=%d", goroutines), func(b *testing.B) {
			client := srv.Client(b, func(o *redis.Options) { o.PoolSize = goroutines })
			l := newLockerOn(b, client)
			ctx := context.Background()
			var next atomic.Int64
			b.SetParallelism(max(1, goroutines/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := "bench:" + strconv.FormatInt(next.Add(1)%1024, 10)
					lease, err := l.TryAcquire(ctx, key)
					if err != nil {
						continue // another goroutine holds this key right now
					}
					if err := lease.Release(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
		})
	}
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
			client := srv.Client(b, func(o *redis.Options) { o.PoolSize = goroutines })
			ctx := context.Background()
			var next atomic.Int64
			b.SetParallelism(max(1, goroutines/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := "raw:" + strconv.FormatInt(next.Add(1)%1024, 10)
					token := strconv.FormatInt(next.Load(), 16)
					ok, err := client.SetNX(ctx, key, token, 10*time.Second).Result()
					if err != nil {
						b.Error(err)
						return
					}
					if !ok {
						continue
					}
					if err := rawRelease.Run(ctx, client, []string{key}, token).Err(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
		})
	}
}
