package cachelock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/lockmw/lockmw/cachelock"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// A write that outlasts Update's lease is reported as lost also when the
// watchdog's timer that ends the lease context fires late: Update checks
// the lease's deadline itself. The keys are invalidated all the same (the
// write may have committed).
func TestUpdateCheckedAgainstTheLeaseDeadline(t *testing.T) {
	srv := redistest.Start(t)
	db := openDB(t)
	const ttl = 2 * time.Second
	stall := lockmwtest.NewWatchdogStall()
	locker := lockmwtest.NewLocker(t, srv, lockmw.WithTTL(ttl), lockmw.WithLogger(stall.Logger()))
	c, err := cachelock.New(srv.Client(t), locker, cachelock.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const key = "product:1"
	if v, _ := cachedPrice(t, c, db, key, 1); v != "100" {
		t.Fatalf("%s = %s, want 100", key, v)
	}

	err = c.Update(ctx, key, func(ctx context.Context, fence uint64) error {
		// The watchdog stalls, so the lease's deadline passes (every
		// renewal left before the stall) while its timer does not fire.
		stall.Stall(t, locker)
		stalled := time.Now()
		lockmwtest.Eventually(t, 2*ttl, "the lease deadline passing", func() bool { return time.Since(stalled) > ttl })
		if ctx.Err() != nil {
			t.Fatalf("the lease context ended though the watchdog stalled: %v", context.Cause(ctx))
		}
		return setPrice(ctx, db, 1, 200, fence)
	})
	if !errors.Is(err, lockmw.ErrLost) || !strings.Contains(err.Error(), "during the write") {
		t.Fatalf("Update whose write outlasted its lease: %v, want ErrLost, lost during the write", err)
	}
	if _, err := c.Get(ctx, key); !errors.Is(err, cachelock.ErrMiss) {
		t.Fatalf("Get after the Update: %v, want ErrMiss (invalidated)", err)
	}
}

// stallAfterFence is a TracerProvider whose spans call hook when the fence
// attribute is set on them: Update sets it on its span once the lock is
// taken, before write.
type stallAfterFence struct {
	noop.TracerProvider
	hook func()
}

func (p stallAfterFence) Tracer(string, ...trace.TracerOption) trace.Tracer {
	return fenceTracer{hook: p.hook}
}

type fenceTracer struct {
	noop.Tracer
	hook func()
}

func (t fenceTracer) Start(ctx context.Context, _ string, _ ...trace.SpanStartOption) (context.Context, trace.Span) {
	s := fenceSpan{Span: trace.SpanFromContext(ctx), hook: t.hook}
	return trace.ContextWithSpan(ctx, s), s
}

type fenceSpan struct {
	trace.Span
	hook func()
}

func (s fenceSpan) SetAttributes(kv ...attribute.KeyValue) {
	for _, a := range kv {
		if a.Key == "lock.fence" {
			s.hook()
		}
	}
}

// An Update whose lease is past its deadline when write would start (the
// goroutine stalled after the lock was taken, the watchdog's timer late)
// does not run write, and reports the lock lost: Update checks the lease's
// deadline before the write too, not only after it.
func TestUpdateNotWrittenPastTheLeaseDeadline(t *testing.T) {
	srv := redistest.Start(t)
	db := openDB(t)
	const ttl = 2 * time.Second
	stall := lockmwtest.NewWatchdogStall()
	locker := lockmwtest.NewLocker(t, srv, lockmw.WithTTL(ttl), lockmw.WithLogger(stall.Logger()))
	hook := func() {
		// Between the lock and write: the watchdog stalls, and the lease's
		// deadline passes while its timer does not fire.
		stall.Stall(t, locker)
		stalled := time.Now()
		lockmwtest.Eventually(t, 2*ttl, "the lease deadline passing", func() bool { return time.Since(stalled) > ttl })
	}
	c, err := cachelock.New(srv.Client(t), locker, cachelock.WithLogger(slog.New(slog.DiscardHandler)),
		cachelock.WithTracerProvider(stallAfterFence{hook: hook}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const key = "product:1"
	if v, _ := cachedPrice(t, c, db, key, 1); v != "100" {
		t.Fatalf("%s = %s, want 100", key, v)
	}

	wrote := false
	err = c.Update(ctx, key, func(ctx context.Context, fence uint64) error {
		wrote = true
		if ctx.Err() != nil {
			t.Errorf("the lease context ended though the watchdog stalled: %v", context.Cause(ctx))
		}
		return setPrice(ctx, db, 1, 200, fence)
	})
	if wrote {
		t.Fatal("Update ran write under a lease already past its deadline")
	}
	if !errors.Is(err, lockmw.ErrLost) || !strings.Contains(err.Error(), "before the write") {
		t.Fatalf("Update whose lease was past its deadline before write: %v, want ErrLost, lost before the write", err)
	}
	if v, _ := cachedPrice(t, c, db, key, 1); v != "100" {
		t.Fatalf("%s = %s after an Update that must not have written, want 100", key, v)
	}
}
