package cachelock_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lockmw/lockmw/cachelock"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

// Fetch, Update and Invalidate report spans with their outcome, and Fetch
// counts hits, misses and loads.
func TestTelemetry(t *testing.T) {
	srv := redistest.Start(t)
	db := openDB(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	mp, counter := meter(t)
	c := newCache(t, srv, cachelock.WithTracerProvider(tp), cachelock.WithMeterProvider(mp))
	ctx := context.Background()
	load := func(ctx context.Context) ([]byte, error) { return loadPrice(ctx, db, 1) }

	for range 3 {
		if _, err := c.Fetch(ctx, "product:1", time.Minute, load); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Update(ctx, "product:1", func(ctx context.Context, fence uint64) error {
		return setPrice(ctx, db, 1, 5, fence)
	}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int64{
		"cachelock.hits": 2, "cachelock.misses": 1, "cachelock.loads": 1, "cachelock.invalidations": 1,
	} {
		if got := counter(name); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}

	var outcomes []string
	for _, s := range spans.Ended() {
		var outcome string
		fenced := false
		for _, a := range s.Attributes() {
			switch a.Key {
			case attribute.Key("cache.outcome"):
				outcome = a.Value.AsString()
			case attribute.Key("lock.fence"): // the lease's fence, named as by every adapter
				fenced = a.Value.AsInt64() > 0
			}
		}
		if fenced != (s.Name() == "cachelock.update") {
			t.Errorf("span %s: lock.fence set: %v, want it on cachelock.update only", s.Name(), fenced)
		}
		outcomes = append(outcomes, s.Name()+"="+outcome)
	}
	want := []string{
		"cachelock.fetch=loaded", "cachelock.fetch=hit", "cachelock.fetch=hit",
		"cachelock.invalidate=ok", "cachelock.update=ok",
	}
	if len(outcomes) != len(want) {
		t.Fatalf("spans %v, want %v", outcomes, want)
	}
	for i := range want {
		if outcomes[i] != want[i] {
			t.Fatalf("spans %v, want %v", outcomes, want)
		}
	}
}
