package ginlock_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/ginlock"
	"github.com/lockmw/lockmw/internal/lockmwtest/ginsuite"
	"github.com/lockmw/lockmw/internal/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// ginlock's store-independent behaviour (internal/lockmwtest/ginsuite) on
// Redis. The tests below it need Redis' own faults.
func TestSuiteRedis(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ginsuite.Run(t, ginsuite.Env{
		Name: "redis",
		NewLocker: func(t testing.TB, opts ...lockmw.Option) *lockmw.Locker {
			return newLocker(t, srv, opts...)
		},
		Lose: func(prefix, key string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			n, err := admin.Del(ctx, lockKey(prefix, key)).Result()
			if err == nil && n != 1 {
				err = fmt.Errorf("DEL %s deleted %d keys, want the held lock", lockKey(prefix, key), n)
			}
			return err
		},
		LeaseTTL: func(t testing.TB, prefix, key string) time.Duration {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			pttl, err := admin.PTTL(ctx, lockKey(prefix, key)).Result()
			if err != nil {
				t.Fatalf("PTTL %s: %v", lockKey(prefix, key), err)
			}
			return pttl
		},
		KnowsHolderTTL: true,
	})
}

func TestRetryAfterSecondsRoundsUp(t *testing.T) {
	for _, tc := range []struct {
		left time.Duration
		want int
	}{
		{time.Millisecond, 1},
		{time.Second, 1},
		{1500 * time.Millisecond, 2},
		{2*time.Second + time.Nanosecond, 3},
		{0, 1}, // unknown
	} {
		err := fmt.Errorf("wrapped: %w", &lockmw.NotAcquiredError{Key: "k", RetryAfter: tc.left})
		if got := ginlock.RetryAfterSeconds(err); got != tc.want {
			t.Errorf("RetryAfterSeconds(%v left) = %d, want %d", tc.left, got, tc.want)
		}
	}
}

// Redis down or stalled is 503 problem+json with Retry-After, and the
// handler does not run.
func TestRedisUnavailable(t *testing.T) {
	for _, fault := range []string{"paused", "killed"} {
		t.Run(fault, func(t *testing.T) {
			srv := redistest.Start(t)
			l := newLockerOn(t, srv.Client(t, func(o *redis.Options) {
				o.ReadTimeout = 200 * time.Millisecond
				o.MaxRetries = -1
			}))
			var ran bool
			e := newEngine(http.MethodPost, "/orders/:id",
				ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}")),
				func(c *gin.Context) { ran = true })
			if fault == "paused" {
				srv.Pause(t)
				defer srv.Resume(t)
			} else {
				srv.Kill(t)
			}
			var rec *httptest.ResponseRecorder
			within(t, 20*time.Second, "a request while Redis is "+fault, func() {
				rec = serve(e, httptest.NewRequest(http.MethodPost, "/orders/1", nil))
			})
			p := problem(t, rec, http.StatusServiceUnavailable)
			if p.Type != ginlock.ProblemUnavailable {
				t.Errorf("type = %q, want %q", p.Type, ginlock.ProblemUnavailable)
			}
			if rec.Header().Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
			if ran {
				t.Error("the handler ran without the lock")
			}
		})
	}
}

// When Redis stalls past the lease TTL while the handler runs, the
// handler's request context is cancelled with cause ErrLost.
func TestLostLockCancelsTheHandlerWhenRedisPauses(t *testing.T) {
	srv := redistest.Start(t)
	l := newLockerOn(t, srv.Client(t, func(o *redis.Options) {
		o.ReadTimeout = 100 * time.Millisecond
		o.MaxRetries = -1
	}), lockmw.WithTTL(300*time.Millisecond))
	t.Cleanup(func() { srv.Resume(t) })
	ginsuite.CheckLossCancelsHandler(t, l, func() { srv.Pause(t) }, func() { srv.Resume(t) }) // the resume lets the release through (or time out)
}
