package grpclock_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"

	"github.com/lockmw/lockmw/grpclock"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// Every locked call gets a grpclock.lock span under otelgrpc's server span
// and above lockmw's acquire span, with the template as lock.name, the
// outcome, the wait and the fence; busy is not a span error, Redis down is.
// The grpclock.calls counter agrees.
func TestTelemetry(t *testing.T) {
	sr, tp, reader, mp := lockmwtest.NewTelemetry()

	srv := redistest.Start(t)
	locker := newLockerOn(t, srv.Client(t, fastFailing), lockmw.WithTracerProvider(tp))
	holder := newLocker(t, srv)
	conn := serve(t, locker, func(ctx context.Context, o *order) (*order, error) { return o, nil }, server{
		opts:  []grpclock.Option{itemMethods, grpclock.WithTracerProvider(tp), grpclock.WithMeterProvider(mp)},
		stats: otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp)),
	})

	lease, err := holder.Acquire(t.Context(), "item:busy")
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range kinds {
		if _, err := call(t.Context(), conn, kind, &order{Item: "ok"}); err != nil {
			t.Fatalf("%s acquired: %v", kind, err)
		}
		_, err := call(t.Context(), conn, kind, &order{Item: "busy"})
		wantCode(t, err, codes.Aborted)
	}
	_ = lease.Release(t.Context())
	srv.Pause(t)
	for _, kind := range kinds {
		_, err := call(t.Context(), conn, kind, &order{Item: "down"})
		wantCode(t, err, codes.Unavailable)
	}
	srv.Resume(t)

	// otelgrpc ends its server spans after the reply is sent: wait for all six.
	var spans []sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		spans = sr.Ended()
		n := 0
		for _, s := range spans {
			if s.SpanKind() == trace.SpanKindServer {
				n++
			}
		}
		if n == 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d otelgrpc server spans ended, want 6", n)
		}
	}
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
	}
	outcomes := map[string]int{}
	for _, s := range spans {
		switch s.Name() {
		case "lockmw.acquire":
			if p := byID[s.Parent().SpanID()]; p == nil || p.Name() != grpclock.SpanName {
				t.Errorf("lockmw.acquire is not a child of %s", grpclock.SpanName)
			}
		case grpclock.SpanName:
			attrs := attrMap(s.Attributes())
			outcome := attrs["lock.outcome"].AsString()
			outcomes[outcome]++
			if p := byID[s.Parent().SpanID()]; p == nil || p.SpanKind() != trace.SpanKindServer {
				t.Errorf("%s span (%s) is not a child of the otelgrpc server span", grpclock.SpanName, outcome)
			}
			if got := attrs["lock.name"].AsString(); got != "item:{id}" {
				t.Errorf("lock.name = %q, want the template item:{id}", got)
			}
			if _, ok := attrs["lock.wait_ms"]; !ok {
				t.Errorf("%s span has no lock.wait_ms", outcome)
			}
			switch outcome {
			case "acquired":
				if attrs["lock.fence"].AsInt64() <= 0 || s.Status().Code == otelcodes.Error {
					t.Errorf("acquired span: fence %v, status %v", attrs["lock.fence"], s.Status())
				}
			case "busy":
				if s.Status().Code == otelcodes.Error || len(s.Events()) != 0 {
					t.Errorf("busy span recorded as an error: status %v, events %v", s.Status(), s.Events())
				}
			case "error":
				if s.Status().Code != otelcodes.Error {
					t.Errorf("Redis-down span status = %v, want Error", s.Status())
				}
			}
		}
	}
	if want := map[string]int{"acquired": 2, "busy": 2, "error": 2}; !equalCounts(outcomes, want) {
		t.Errorf("span outcomes = %v, want %v", outcomes, want)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	counted := map[string]int{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "grpclock.calls" || sm.Scope.Name != grpclock.ScopeName {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				outcome, _ := dp.Attributes.Value("lock.outcome")
				counted[outcome.AsString()] += int(dp.Value)
			}
		}
	}
	if want := map[string]int{"acquired": 2, "busy": 2, "error": 2}; !equalCounts(counted, want) {
		t.Errorf("grpclock.calls by outcome = %v, want %v", counted, want)
	}
}

func attrMap(kvs []attribute.KeyValue) map[string]attribute.Value {
	m := map[string]attribute.Value{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
