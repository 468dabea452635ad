package lockmw_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// BenchmarkRedlock measures uncontended TryAcquire+Release through a
// Redlock Locker over 5 local masters, at 1 and 32 concurrent goroutines,
// reporting ops/s. Each op is one acquire round and one release round, each
// sent to all 5 masters.
func BenchmarkRedlock(b *testing.B) {
	masters := redistest.StartN(b, 5)
	for _, goroutines := range []int{1, 32} {
		b.Run(fmt.Sprintf("goroutines=%d", goroutines), func(b *testing.B) {
			clients := redlockClients(b, masters, benchClient, func(o *redis.Options) { o.PoolSize = goroutines })
			l, err := lockmw.NewRedlock(clients)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close() })
			ctx := context.Background()
			var next atomic.Int64
			b.SetParallelism(max(1, goroutines/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := "bench:" + strconv.FormatInt(next.Add(1)%1024, 10)
					lease, err := l.TryAcquire(ctx, key)
					if errors.Is(err, lockmw.ErrNotAcquired) {
						continue // another goroutine holds this key right now
					}
					if err != nil {
						b.Error(err)
						return
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
