package ginlock_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/github.com/gin-gonic/gin/otelgin"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockmw/lockmw/ginlock"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/ginsuite"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// ginlock's store-independent behaviour (internal/testkit/lockmwtest/ginsuite)
// on Redis. The tests below it need Redis' own faults.
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

// With otelgin in the chain, the request's server span is an error for a
// 5xx answer only: a busy 409 and a bad-input 400 leave it unset (ginlock
// does not put them in c.Errors, which otelgin turns into an error status),
// as OpenTelemetry's HTTP conventions want for a client's error.
func TestServerSpanStatusThroughOtelgin(t *testing.T) {
	srv := redistest.Start(t)
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	l, closed := newLocker(t, srv), newLocker(t, srv)
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	holder := newLocker(t, srv)
	lease, err := holder.Acquire(context.Background(), "order:7")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())

	e := newGin()
	e.Use(otelgin.Middleware("orders", otelgin.WithTracerProvider(tp)))
	handler := func(c *gin.Context) { c.Status(http.StatusOK) }
	e.POST("/orders/:id", ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}"), ginlock.WithTracerProvider(tp)), handler)
	e.POST("/q", ginlock.New(l, ginlock.Query("id"), ginlock.WithTracerProvider(tp)), handler)
	e.POST("/closed/:id", ginlock.New(closed, ginlock.Param("id"), ginlock.WithTracerProvider(tp)), handler)

	for _, tc := range []struct {
		path   string
		status int
		want   codes.Code
	}{
		{"/orders/7", http.StatusConflict, codes.Unset},           // busy
		{"/q", http.StatusBadRequest, codes.Unset},                // no key
		{"/closed/1", http.StatusServiceUnavailable, codes.Error}, // the Locker is closed
		{"/orders/8", http.StatusOK, codes.Unset},                 // acquired
	} {
		exporter.Reset()
		if rec := serve(e, httptest.NewRequest(http.MethodPost, tc.path, nil)); rec.Code != tc.status {
			t.Fatalf("POST %s: status %d, want %d", tc.path, rec.Code, tc.status)
		}
		var server *tracetest.SpanStub
		spans := exporter.GetSpans()
		for i := range spans {
			if spans[i].SpanKind == trace.SpanKindServer {
				server = &spans[i]
			}
		}
		if server == nil {
			t.Fatalf("POST %s: no server span among %d spans", tc.path, len(spans))
		}
		if server.Status.Code != tc.want {
			t.Errorf("POST %s (%d): server span status %v %q, want %v", tc.path, tc.status, server.Status.Code, server.Status.Description, tc.want)
		}
	}
}

// A setup mistake answers every request 500, and is logged once per route,
// not once per request.
func TestSetupMistakeLoggedOncePerRoute(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv)
	var logs lockmwtest.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	e := gin.New() // no ContextWithFallback
	mw := ginlock.New(l, ginlock.Param("id"), ginlock.WithLogger(logger))
	e.POST("/orders/:id", mw, func(c *gin.Context) { t.Error("handler ran") })
	e.POST("/items/:id", mw, func(c *gin.Context) { t.Error("handler ran") })
	for i := range 20 {
		for _, path := range []string{"/orders/", "/items/"} {
			if rec := serve(e, httptest.NewRequest(http.MethodPost, path+strconv.Itoa(i), nil)); rec.Code != http.StatusInternalServerError {
				t.Fatalf("POST %s%d: status %d, want 500", path, i, rec.Code)
			}
		}
	}
	lines := strings.Count(logs.String(), "level=ERROR")
	if lines != 2 || !strings.Contains(logs.String(), "/orders/:id") || !strings.Contains(logs.String(), "/items/:id") ||
		!strings.Contains(logs.String(), "ContextWithFallback") {
		t.Errorf("%d ERROR lines for 40 requests on 2 routes, want 2, one per route, naming the fix:\n%s", lines, logs.String())
	}
}

// The first busy answer, before any hold has been seen, tells the client to
// come back in 1s, not after the holder's 10s lease (which the watchdog
// keeps renewing), as the README's program showed.
func TestFirstRetryAfterIsNotTheTTL(t *testing.T) {
	srv := redistest.Start(t)
	holder := newLocker(t, srv)
	lease, err := holder.Acquire(context.Background(), "order:42", lockmw.WithLeaseTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	e := newEngine(http.MethodPost, "/orders/:id",
		ginlock.New(newLocker(t, srv), ginlock.Param("id"), ginlock.WithName("order:{id}")),
		func(c *gin.Context) { c.Status(http.StatusOK) })
	rec := serve(e, httptest.NewRequest(http.MethodPost, "/orders/42", nil))
	problem(t, rec, http.StatusConflict)
	if got := rec.Header().Get("Retry-After"); got != "1" {
		t.Errorf("first busy answer: Retry-After %q, want 1 (no hold seen yet), not the holder's 10s lease", got)
	}
}
