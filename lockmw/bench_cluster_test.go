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

	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

// BenchmarkClusterLockUnlock measures uncontended TryAcquire+Release on a
// local three-master Redis Cluster, at 1 and 32 concurrent goroutines,
// reporting ops/s. Keys spread over all masters.
func BenchmarkClusterLockUnlock(b *testing.B) {
	c := redistest.StartCluster(b)
	for _, goroutines := range []int{1, 32} {
		b.Run(fmt.Sprintf("goroutines=%d", goroutines), func(b *testing.B) {
			client := c.Client(b, benchClusterClient, func(o *redis.ClusterOptions) { o.PoolSize = goroutines })
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
