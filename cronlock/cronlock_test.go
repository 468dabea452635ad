//lint:file-ignore SA1019 the deprecated Singleton and New keep working: their tests use them on purpose.

package cronlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/lockmw/lockmw/cronlock"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/cronsuite"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// The behaviour tests of Singleton and of the Scheduler's claims that
// hold on any store (internal/testkit/lockmwtest/cronsuite), on one Redis.
func TestSuite(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	cronsuite.Run(t, cronsuite.Env{
		NewLocker: func(t testing.TB, opts ...lockmw.Option) *lockmw.Locker { return newLocker(t, srv, opts...) },
		TTL:       time.Second,
		Lose: func(t testing.TB, key string) {
			if err := admin.Del(context.Background(), lockmw.DefaultPrefix+"{"+key+"}").Err(); err != nil {
				t.Fatal(err)
			}
		},
	})
}

// Killing Redis under a running job cancels the job's context with ErrLost,
// and the wrapper logs the loss.
func TestRedisKilledCancelsJob(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t, func(o *redis.Options) {
		o.MaxRetries = -1
		o.DialTimeout = 100 * time.Millisecond
		o.ReadTimeout = 100 * time.Millisecond
	})
	l := newLockerOn(t, client, lockmw.WithTTL(500*time.Millisecond))
	cronsuite.CheckLossCancelsJob(t, l, "lost", 10*time.Second, func() { srv.Kill(t) })
}

// With Redis down the fire is skipped with an error log and the job does not
// run; once Redis is back, a later fire runs.
func TestRedisDownSkips(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t, func(o *redis.Options) {
		o.MaxRetries = -1
		o.DialTimeout = 100 * time.Millisecond
	})
	l := newLockerOn(t, client)
	logs := &cronsuite.RecordLogger{}
	var runs atomic.Int64
	job := cronlock.Singleton(l, "down", cronlock.WithLogger(logs), cronlock.WithMinHold(0))(cron.FuncJob(func() { runs.Add(1) }))

	srv.Kill(t)
	job.Run()
	if n := runs.Load(); n != 0 {
		t.Fatalf("the job ran %d times with Redis down, want 0", n)
	}
	skips := logs.Find(true, "skip")
	if len(skips) != 1 {
		t.Fatalf("want one error log of the skip, got %v", logs.Find(true, ""))
	}
	if err, _ := skips[0].KV["error"].(error); !errors.Is(err, lockmw.ErrUnavailable) {
		t.Errorf("skip logged error %v, want ErrUnavailable", err)
	}
	if skips[0].KV["job"] != "down" {
		t.Errorf("skip log names job %v, want down", skips[0].KV["job"])
	}

	srv.Restart(t)
	// The client may fail fast for a moment after the restart: fire again
	// until a fire runs.
	eventually(t, 10*time.Second, "a run after the restart", func() bool {
		job.Run()
		return runs.Load() == 1
	})
}
