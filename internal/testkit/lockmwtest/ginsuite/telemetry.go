package ginsuite

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/contrib/instrumentation/github.com/gin-gonic/gin/otelgin"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lockmw/lockmw/ginlock"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/lockmw"
)

// Each locked request gets a ginlock.lock span under otelgin's server span,
// with the core's acquire span and the handler's spans inside it, and is
// counted by outcome. Busy is not a span error.
func (r *runner) spansNestUnderOtelgin(t *testing.T) {
	recorder, tp, reader, mp := lockmwtest.NewTelemetry()
	l := r.locker(t, lockmw.WithTracerProvider(tp))

	e := NewGin()
	e.Use(otelgin.Middleware("orders", otelgin.WithTracerProvider(tp)))
	e.POST("/orders/:id", ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}"),
		ginlock.WithTracerProvider(tp), ginlock.WithMeterProvider(mp)),
		func(c *gin.Context) {
			_, span := tp.Tracer("handler").Start(c.Request.Context(), "charge")
			span.End()
			c.Status(http.StatusOK)
		})

	if rec := Serve(e, httptest.NewRequest(http.MethodPost, "/orders/42", nil)); rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	holder := r.locker(t)
	lease, err := holder.Acquire(context.Background(), "order:43")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	if rec := Serve(e, httptest.NewRequest(http.MethodPost, "/orders/43", nil)); rec.Code != http.StatusConflict {
		t.Fatalf("status %d, want 409", rec.Code)
	}

	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range recorder.Ended() {
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	servers, locks := byName["POST /orders/:id"], byName[ginlock.SpanName]
	if len(servers) != 2 || len(locks) != 2 || len(byName["charge"]) != 1 {
		t.Fatalf("spans: %d otelgin, %d %s, %d charge; want 2, 2, 1 (all: %v)", len(servers), len(locks), ginlock.SpanName, len(byName["charge"]), names(recorder.Ended()))
	}
	for i, want := range []string{ginlock.OutcomeAcquired, ginlock.OutcomeBusy} {
		lock, server := locks[i], servers[i]
		if lock.Parent().SpanID() != server.SpanContext().SpanID() || lock.SpanContext().TraceID() != server.SpanContext().TraceID() {
			t.Errorf("%s span %d is not a child of the otelgin span", ginlock.SpanName, i)
		}
		attrs := attrMap(lock.Attributes())
		if attrs["lock.name"] != attribute.StringValue("order:{id}") || attrs["lock.outcome"] != attribute.StringValue(want) {
			t.Errorf("span %d: lock.name %v, lock.outcome %v; want order:{id}, %s", i, attrs["lock.name"], attrs["lock.outcome"], want)
		}
		if _, ok := attrs["lock.wait_ms"]; !ok {
			t.Errorf("span %d has no lock.wait_ms", i)
		}
		if lock.Status().Code == codes.Error {
			t.Errorf("span %d (%s) is an error span", i, want)
		}
	}
	if attrs := attrMap(locks[0].Attributes()); attrs["lock.fence"].AsInt64() < 1 {
		t.Errorf("acquired span has lock.fence %v", attrs["lock.fence"])
	}
	lockSpan := locks[0].SpanContext().SpanID()
	if byName["charge"][0].Parent().SpanID() != lockSpan {
		t.Error("the handler's span is not a child of the ginlock span")
	}
	var acquireUnderLock bool
	for _, s := range byName["lockmw.acquire"] {
		acquireUnderLock = acquireUnderLock || s.Parent().SpanID() == lockSpan
	}
	if !acquireUnderLock {
		t.Error("no lockmw.acquire span is a child of the ginlock span")
	}
	if counts := countOutcomes(t, reader, "order:{id}"); counts[ginlock.OutcomeAcquired] != 1 || counts[ginlock.OutcomeBusy] != 1 {
		t.Errorf("ginlock.requests by outcome = %v, want acquired 1, busy 1", counts)
	}
}

// A lock lost while the handler runs is reported as outcome lost.
func (r *runner) lostOutcomeOnTheSpan(t *testing.T) {
	r.needLose(t)
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	l := r.locker(t, lockmw.WithTTL(r.env.ShortTTL))
	e := NewEngine(http.MethodPost, "/orders/:id",
		ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}"), ginlock.WithTracerProvider(tp)),
		func(c *gin.Context) {
			r.lose(t, "order:11")
			<-c.Request.Context().Done()
			c.Status(http.StatusOK)
		})
	lockmwtest.Within(t, 10*time.Second+2*r.env.ShortTTL, "a request whose lock is lost", func() {
		Serve(e, httptest.NewRequest(http.MethodPost, "/orders/11", nil))
	})
	spans := recorder.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	if got := attrMap(spans[0].Attributes())["lock.outcome"]; got != attribute.StringValue(ginlock.OutcomeLost) {
		t.Errorf("lock.outcome = %v, want lost", got)
	}
}

// countOutcomes sums ginlock.requests by lock.outcome, over the lock name
// name (all names when empty).
func countOutcomes(t testing.TB, reader *sdkmetric.ManualReader, name string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "ginlock.requests" {
				for _, dp := range sum.DataPoints {
					outcome, _ := dp.Attributes.Value("lock.outcome")
					if n, _ := dp.Attributes.Value("lock.name"); name == "" || n.AsString() == name {
						counts[outcome.AsString()] += dp.Value
					}
				}
			}
		}
	}
	return counts
}

func attrMap(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}
