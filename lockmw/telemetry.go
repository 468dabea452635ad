package lockmw

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of lockmw's tracer and meter: the
// package import path.
const ScopeName = "github.com/lockmw/lockmw/lockmw"

// Span, metric and attribute names, as documented in the package overview.
const (
	spanAcquire = "lockmw.acquire"
	spanRelease = "lockmw.release"
	spanRenew   = "lockmw.renew"

	metricAcquireDuration = "lockmw.acquire.duration"
	metricHoldDuration    = "lockmw.hold.duration"
	metricHeld            = "lockmw.held"
	metricWaiting         = "lockmw.waiting"
	metricRenewals        = "lockmw.renewals"
	metricLost            = "lockmw.lost"

	attrName    = attribute.Key("lock.name")
	attrOutcome = attribute.Key("lock.outcome")
	attrWaitMS  = attribute.Key("lock.wait_ms")
	attrFence   = attribute.Key("lock.fence")
	attrReason  = attribute.Key("lock.lost_reason")
	attrCount   = attribute.Key("lock.count")
)

// Outcomes reported as lock.outcome.
const (
	outcomeAcquired = "acquired"
	outcomeBusy     = "busy"
	outcomeTimeout  = "timeout"
	outcomeError    = "error"
	outcomeLost     = "lost"
	outcomeOK       = "ok"
)

// globalPackage is where the OpenTelemetry API keeps its default, delegating
// providers: while one of those is in place nobody configured telemetry.
const globalPackage = "go.opentelemetry.io/otel/internal/global"

// telemetry holds a Locker's tracer and instruments. Every method is safe to
// call with telemetry disabled, and then allocates nothing.
type telemetry struct {
	tp     trace.TracerProvider // from WithTracerProvider; nil: the global one
	tracer atomic.Pointer[tracerEntry]

	acquireDuration metric.Float64Histogram
	holdDuration    metric.Float64Histogram
	held            metric.Int64UpDownCounter
	waiting         metric.Int64UpDownCounter
	renewals        metric.Int64Counter
	lost            metric.Int64Counter

	renewOK, renewFailed metric.MeasurementOption
}

type tracerEntry struct {
	tp     trace.TracerProvider
	tracer trace.Tracer // nil: tracing not configured
}

func newTelemetry(tp trace.TracerProvider, mp metric.MeterProvider) (*telemetry, error) {
	if mp == nil {
		// The global provider delegates to whatever is set later, and
		// reports Enabled() == false until then.
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(ScopeName)
	t := &telemetry{
		tp:          tp,
		renewOK:     metric.WithAttributeSet(attribute.NewSet(attrOutcome.String(outcomeOK))),
		renewFailed: metric.WithAttributeSet(attribute.NewSet(attrOutcome.String(outcomeError))),
	}
	var errs []error
	var err error
	t.acquireDuration, err = m.Float64Histogram(metricAcquireDuration, metric.WithUnit("s"),
		metric.WithDescription("Time from the start of an acquisition to its outcome, by lock.name and lock.outcome."))
	errs = append(errs, err)
	t.holdDuration, err = m.Float64Histogram(metricHoldDuration, metric.WithUnit("s"),
		metric.WithDescription("Time a lock was held, from acquisition to release or loss, by lock.name and lock.outcome."))
	errs = append(errs, err)
	t.held, err = m.Int64UpDownCounter(metricHeld, metric.WithUnit("{lease}"),
		metric.WithDescription("Leases currently held, by lock.name."))
	errs = append(errs, err)
	t.waiting, err = m.Int64UpDownCounter(metricWaiting, metric.WithUnit("{call}"),
		metric.WithDescription("Acquire calls currently waiting for a lock another owner holds, by lock.name."))
	errs = append(errs, err)
	t.renewals, err = m.Int64Counter(metricRenewals, metric.WithUnit("{renewal}"),
		metric.WithDescription("Lease renewals sent by the watchdog, by lock.outcome (ok or error)."))
	errs = append(errs, err)
	t.lost, err = m.Int64Counter(metricLost, metric.WithUnit("{lease}"),
		metric.WithDescription("Leases lost before release, by lock.name and lock.lost_reason."))
	errs = append(errs, err)
	return t, errors.Join(errs...)
}

// tracerFor returns the tracer to use now, or nil when no tracer provider is
// configured (neither WithTracerProvider nor otel.SetTracerProvider).
func (t *telemetry) currentTracer() trace.Tracer {
	tp := t.tp
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if e := t.tracer.Load(); e != nil && sameProvider(e.tp, tp) {
		return e.tracer
	}
	e := &tracerEntry{tp: tp}
	if reflect.Indirect(reflect.ValueOf(tp)).Type().PkgPath() != globalPackage {
		e.tracer = tp.Tracer(ScopeName)
	}
	t.tracer.Store(e)
	return e.tracer
}

func sameProvider(a, b trace.TracerProvider) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

// startSpan starts span spanName for lock name, or returns (ctx, nil) when
// tracing is not configured.
func (t *telemetry) startSpan(ctx context.Context, spanName, name string) (context.Context, trace.Span) {
	tr := t.currentTracer()
	if tr == nil {
		return ctx, nil
	}
	return tr.Start(ctx, spanName, trace.WithAttributes(attrName.String(name)))
}

// acquireDone ends an acquisition's span and records its duration.
func (t *telemetry) acquireDone(ctx context.Context, span trace.Span, name, outcome string, wait time.Duration, fence uint64, err error) {
	if span != nil {
		span.SetAttributes(attrOutcome.String(outcome), attrWaitMS.Int64(wait.Milliseconds()))
		if fence > 0 {
			span.SetAttributes(attrFence.Int64(int64(fence)))
		}
		if outcome == outcomeError {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
	if t.acquireDuration.Enabled(ctx) {
		t.acquireDuration.Record(ctx, wait.Seconds(), metric.WithAttributes(attrName.String(name), attrOutcome.String(outcome)))
	}
	if outcome == outcomeAcquired && t.held.Enabled(ctx) {
		t.held.Add(ctx, 1, metric.WithAttributes(attrName.String(name)))
	}
}

// waitingFor adds n (1: a wait began, -1: it ended) to lockmw.waiting.
func (t *telemetry) waitingFor(ctx context.Context, name string, n int64) {
	if t.waiting.Enabled(ctx) {
		t.waiting.Add(ctx, n, metric.WithAttributes(attrName.String(name)))
	}
}

// leaseRecord is what telemetry records of a lease (each lease holds one):
// the name it is measured by, its fence, and when it was acquired.
type leaseRecord struct {
	name       string // telemetry name: WithName's, else the key
	fence      uint64
	acquiredAt time.Time
}

// releaseSpanDone ends a release's span; outcome is outcomeOK, outcomeLost
// or outcomeError.
func (t *telemetry) releaseSpanDone(span trace.Span, s *leaseRecord, outcome string, err error) {
	if span != nil {
		span.SetAttributes(attrOutcome.String(outcome), attrFence.Int64(int64(s.fence)))
		if outcome == outcomeError {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// leaseEnded records the end of a held lease, released or lost.
func (t *telemetry) leaseEnded(ctx context.Context, s *leaseRecord, outcome string) {
	if t.holdDuration.Enabled(ctx) {
		t.holdDuration.Record(ctx, time.Since(s.acquiredAt).Seconds(),
			metric.WithAttributes(attrName.String(s.name), attrOutcome.String(outcome)))
	}
	if t.held.Enabled(ctx) {
		t.held.Add(ctx, -1, metric.WithAttributes(attrName.String(s.name)))
	}
}

// renewed counts one watchdog round trip's results.
func (t *telemetry) renewed(ctx context.Context, ok, failed int, err error) {
	if t.renewals.Enabled(ctx) {
		if ok > 0 {
			t.renewals.Add(ctx, int64(ok), t.renewOK)
		}
		if failed > 0 {
			t.renewals.Add(ctx, int64(failed), t.renewFailed)
		}
	}
	if failed > 0 {
		if tr := t.currentTracer(); tr != nil {
			_, span := tr.Start(ctx, spanRenew, trace.WithAttributes(attrOutcome.String(outcomeError), attrCount.Int(failed)))
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			span.End()
		}
	}
}

// leaseLost records a lease lost before release, with a span saying why.
func (t *telemetry) leaseLost(ctx context.Context, s *leaseRecord, lost *LostError) {
	if tr := t.currentTracer(); tr != nil {
		_, span := tr.Start(ctx, spanRenew, trace.WithAttributes(
			attrName.String(s.name), attrOutcome.String(outcomeLost),
			attrReason.String(string(lost.Reason)), attrFence.Int64(int64(s.fence))))
		span.RecordError(lost)
		span.SetStatus(codes.Error, lost.Error())
		span.End()
	}
	t.leaseEnded(ctx, s, outcomeLost)
	// Counted last: once lockmw.lost shows the loss, everything above is recorded.
	if t.lost.Enabled(ctx) {
		t.lost.Add(ctx, 1, metric.WithAttributes(attrName.String(s.name), attrReason.String(string(lost.Reason))))
	}
}
