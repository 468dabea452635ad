package lockmw

import (
	"context"
	"errors"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// With no provider configured, the telemetry on the acquire, release and
// renew paths allocates nothing; with one, the same calls record spans.
func TestTelemetryDisabledAllocatesNothing(t *testing.T) {
	s := &Lease{leaseRecord: leaseRecord{name: "order:{id}", fence: 7, acquiredAt: time.Now()}}
	fail := errors.New("renewal failed")
	run := func(tel *telemetry) {
		ctx := context.Background()
		opCtx, span := tel.startSpan(ctx, spanAcquire, s.name)
		tel.acquireDone(opCtx, span, s.name, outcomeAcquired, time.Millisecond, s.fence, nil)
		rctx, span := tel.startSpan(ctx, spanRelease, s.name)
		tel.releaseSpanDone(span, &s.leaseRecord, outcomeOK, nil)
		tel.leaseEnded(rctx, &s.leaseRecord, outcomeOK)
		tel.renewed(ctx, 10, 1, fail)
	}

	off, err := newTelemetry(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(200, func() { run(off) }); allocs != 0 {
		t.Errorf("disabled telemetry allocates %v times per operation, want 0", allocs)
	}

	spans := tracetest.NewSpanRecorder()
	on, err := newTelemetry(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)), nil)
	if err != nil {
		t.Fatal(err)
	}
	run(on)
	if got := len(spans.Ended()); got != 3 {
		t.Errorf("enabled telemetry recorded %d spans, want 3 (acquire, release, renew)", got)
	}
}
