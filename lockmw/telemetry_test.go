package lockmw_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// Spans and metrics carry the names and attributes of the documented
// telemetry contract.
func TestTelemetry(t *testing.T) {
	srv := redistest.Start(t)
	spans, tp, reader, mp := lockmwtest.NewTelemetry()
	l := newLocker(t, srv, lockmw.WithTracerProvider(tp), lockmw.WithMeterProvider(mp))
	rival := newLocker(t, srv)
	ctx := context.Background()
	name := lockmw.WithName("order:{id}")

	lease, err := l.Acquire(ctx, "order:42", name, lockmw.WithLeaseTTL(150*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	held := collect(t, reader)
	if v := sumInt(held, "lockmw.held", attribute.String("lock.name", "order:{id}")); v != 1 {
		t.Errorf("lockmw.held while holding = %d, want 1", v)
	}
	// Let the watchdog renew at least once.
	for renewals(t, reader) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Busy: a rival holds it while l tries.
	rl, err := rival.Acquire(ctx, "order:42")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, "order:42", name); !errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "order:42", name, lockmw.WithWait(20*time.Millisecond)); !errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatal(err)
	}
	_ = rl.Release(ctx)

	// Lost: the key disappears behind the holder's back.
	lost, err := l.Acquire(ctx, "order:43", name, lockmw.WithLeaseTTL(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Client(t).Del(ctx, lockKey("order:43")).Err(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, lost.Context(), 2*time.Second, "lease with deleted key")
	_ = lost.Release(ctx)
	// The watchdog cancels the context first and records the loss right
	// after: wait for the record.
	for deadline := time.Now().Add(5 * time.Second); sumInt(collect(t, reader), "lockmw.lost", attribute.String("lock.lost_reason", "expired")) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("lockmw.lost never counted the lost lease")
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Spans.
	var outcomes []string
	var sawRelease, sawLost bool
	for _, s := range spans.Ended() {
		attrs := attrMap(s.Attributes())
		if attrs["lock.name"] != "order:{id}" {
			t.Errorf("span %s lock.name = %q, want the template", s.Name(), attrs["lock.name"])
		}
		if s.InstrumentationScope().Name != lockmw.ScopeName {
			t.Errorf("span scope %q, want %q", s.InstrumentationScope().Name, lockmw.ScopeName)
		}
		switch s.Name() {
		case "lockmw.acquire":
			outcomes = append(outcomes, attrs["lock.outcome"])
			if _, ok := attrs["lock.wait_ms"]; !ok {
				t.Errorf("acquire span without lock.wait_ms: %v", attrs)
			}
			if attrs["lock.outcome"] == "acquired" && attrs["lock.fence"] == "" {
				t.Errorf("acquired span without lock.fence: %v", attrs)
			}
			if attrs["lock.outcome"] != "acquired" && s.Status().Code == codes.Error {
				t.Errorf("a %s acquisition is recorded as a span error", attrs["lock.outcome"])
			}
		case "lockmw.release":
			sawRelease = sawRelease || attrs["lock.outcome"] == "ok"
		case "lockmw.renew":
			if attrs["lock.outcome"] == "lost" && s.Status().Code == codes.Error {
				sawLost = true
			}
		}
	}
	want := []string{"acquired", "busy", "timeout", "acquired"}
	if len(outcomes) != len(want) {
		t.Fatalf("acquire span outcomes = %v, want %v", outcomes, want)
	}
	for i := range want {
		if outcomes[i] != want[i] {
			t.Errorf("acquire span outcomes = %v, want %v", outcomes, want)
			break
		}
	}
	if !sawRelease {
		t.Error("no lockmw.release span with outcome ok")
	}
	if !sawLost {
		t.Error("no lockmw.renew error span for the lost lease")
	}

	// Metrics.
	rm := collect(t, reader)
	for _, outcome := range []string{"acquired", "busy", "timeout"} {
		if n := histCount(rm, "lockmw.acquire.duration", attribute.String("lock.outcome", outcome)); n == 0 {
			t.Errorf("lockmw.acquire.duration has no %s point", outcome)
		}
	}
	if n := histCount(rm, "lockmw.hold.duration", attribute.String("lock.outcome", "ok")); n != 1 {
		t.Errorf("lockmw.hold.duration released count = %d, want 1", n)
	}
	if n := histCount(rm, "lockmw.hold.duration", attribute.String("lock.outcome", "lost")); n != 1 {
		t.Errorf("lockmw.hold.duration lost count = %d, want 1", n)
	}
	if v := sumInt(rm, "lockmw.held", attribute.String("lock.name", "order:{id}")); v != 0 {
		t.Errorf("lockmw.held after all releases = %d, want 0", v)
	}
	if v := sumInt(rm, "lockmw.lost", attribute.String("lock.lost_reason", "expired")); v != 1 {
		t.Errorf("lockmw.lost = %d, want 1", v)
	}
	if v := sumInt(rm, "lockmw.renewals", attribute.String("lock.outcome", "ok")); v == 0 {
		t.Error("lockmw.renewals counted no renewal")
	}
}

// collect returns the metrics r holds.
var collect = lockmwtest.Collect

func renewals(t *testing.T, r *sdkmetric.ManualReader) int64 {
	return sumInt(collect(t, r), "lockmw.renewals", attribute.String("lock.outcome", "ok"))
}

// sumInt adds up the points of an int64 sum metric that carry attr.
func sumInt(rm metricdata.ResourceMetrics, name string, attr attribute.KeyValue) int64 {
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, p := range sum.DataPoints {
					if v, ok := p.Attributes.Value(attr.Key); ok && v == attr.Value {
						total += p.Value
					}
				}
			}
		}
	}
	return total
}

// histCount counts the observations of a float64 histogram that carry attr.
func histCount(rm metricdata.ResourceMetrics, name string, attr attribute.KeyValue) uint64 {
	var total uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
				for _, p := range h.DataPoints {
					if v, ok := p.Attributes.Value(attr.Key); ok && v == attr.Value {
						total += p.Count
					}
				}
			}
		}
	}
	return total
}

func attrMap(kvs []attribute.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}
