package lockmw_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

// pipelineCounter is a go-redis hook counting pipelined round trips and the
// commands in them.
type pipelineCounter struct {
	pipelines, commands atomic.Int64
}

func (p *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}

func (p *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		p.pipelines.Add(1)
		p.commands.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

var _ redis.Hook = (*pipelineCounter)(nil)

// Holding 10,000 leases costs no goroutine or timer per lease: the goroutine
// count stays flat while the watchdog renews every lease at least twice, in
// batched round trips.
//
// The test waits for the renewals (a count), not for a span of wall-clock
// time: on a loaded machine a tick may come late, and the TTL is long enough
// that a late tick does not end a lease (a lease ending is then a failure).
// With 6 s, at load 23 on two cores under -race, round trips of thousands
// of renewals took longer than the leases' validity and all 10,000 ended.
func TestWatchdogScalesTo10kLeases(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t, func(o *redis.Options) { o.PoolSize = 16 })
	hook := &pipelineCounter{}
	client.AddHook(hook)
	l := newLockerOn(t, client)
	ctx := context.Background()
	const n, ttl = 10000, 15 * time.Second

	runtime.GC()
	base := runtime.NumGoroutine()

	leases := acquireMany(t, l, n, ttl)

	// Count only the renewals from here on (concurrent acquisitions share
	// pipelines too).
	pipes0, cmds0 := hook.pipelines.Load(), hook.commands.Load()

	// Hold them until each was renewed about twice (renewals come every
	// TTL/3), sampling the goroutine count. The bound is for a stuck
	// watchdog.
	maxExtra := 0
	lockmwtest.Eventually(t, 120*time.Second, "two renewals per lease", func() bool {
		maxExtra = max(maxExtra, runtime.NumGoroutine()-base)
		return hook.commands.Load()-cmds0 >= 2*n
	})
	for i, lease := range leases {
		if err := lease.Context().Err(); err != nil {
			t.Fatalf("lease %d ended: %v", i, context.Cause(lease.Context()))
		}
	}
	if keys, err := client.DBSize(ctx).Result(); err != nil || keys < n {
		t.Fatalf("DBSIZE = %d (%v); want all %d locks still in Redis", keys, err, n)
	}
	// The pool's connections and a few in-flight renewal round trips: not
	// one per lease.
	if maxExtra > 64 {
		t.Errorf("holding %d leases added up to %d goroutines", n, maxExtra)
	}
	pipes, renewals := hook.pipelines.Load()-pipes0, hook.commands.Load()-cmds0
	if perTrip := renewals / max(pipes, 1); perTrip < 100 {
		t.Errorf("%d renewals in %d round trips (%d each): renewals are not batched", renewals, pipes, perTrip)
	}
	t.Logf("%d leases: %d renewals in %d round trips, at most %d extra goroutines", n, renewals, pipes, maxExtra)

	for _, lease := range leases {
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
