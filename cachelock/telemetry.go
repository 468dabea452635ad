package cachelock

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockmw/lockmw/internal/adapt"
)

// ScopeName is the instrumentation scope of cachelock's tracer and meter: the
// package import path.
const ScopeName = "github.com/lockmw/lockmw/cachelock"

// Span, metric and attribute names, as documented in the package overview.
const (
	spanFetch      = "cachelock.fetch"
	spanUpdate     = "cachelock.update"
	spanInvalidate = "cachelock.invalidate"
	spanGet        = "cachelock.get"

	attrOutcome = attribute.Key("cache.outcome")
	attrKeys    = attribute.Key("cache.keys")

	// attrFence is the fencing token of Update's lease: lock.fence, the key
	// of every lockmw adapter. Before, cachelock called it cache.fence.
	attrFence = adapt.AttrFence
)

// Fetch outcomes, reported as cache.outcome.
const (
	outcomeHit      = "hit"      // served from the cache
	outcomeNegative = "negative" // a cached "not found"
	outcomeLoaded   = "loaded"   // this process loaded the value under a fill lease
	outcomeFilled   = "filled"   // waited for another caller's fill
	outcomeStale    = "stale"    // served an invalidated value
	outcomeFallback = "fallback" // Redis unavailable: loaded without the cache
	outcomeMiss     = "miss"     // Get found no current value
	outcomeError    = "error"
	outcomeOK       = "ok"
)

// telemetry holds a Cache's tracer and instruments.
type telemetry struct {
	tracer        trace.Tracer
	hits          metric.Int64Counter
	misses        metric.Int64Counter
	loads         metric.Int64Counter
	staleServed   metric.Int64Counter
	revokedFills  metric.Int64Counter
	invalidations metric.Int64Counter
}

func newTelemetry(tp trace.TracerProvider, mp metric.MeterProvider) (*telemetry, error) {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(ScopeName)
	t := &telemetry{tracer: tp.Tracer(ScopeName)}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	t.hits = counter("cachelock.hits", "{fetch}", "Fetches served from the cache, including cached not-found answers.")
	t.misses = counter("cachelock.misses", "{fetch}", "Fetches that found no value: they loaded, waited for a fill, got a stale value or fell back to load, by cache.outcome.")
	t.loads = counter("cachelock.loads", "{load}", "Calls of a load function, by cache.outcome (ok, error, fallback).")
	t.staleServed = counter("cachelock.stale_served", "{fetch}", "Fetches that returned an invalidated value marked stale.")
	t.revokedFills = counter("cachelock.fills.revoked", "{fill}", "Loaded values not installed because an invalidation revoked their fill lease or it expired.")
	t.invalidations = counter("cachelock.invalidations", "{key}", "Keys invalidated, by cache.outcome (ok or error).")
	return t, errors.Join(errs...)
}

func (t *telemetry) start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
}

// end ends span with outcome, recording err as the span's error unless it is
// one of the expected answers in expected.
func end(span trace.Span, outcome string, err error, expected ...error) {
	span.SetAttributes(attrOutcome.String(outcome))
	if err != nil {
		for _, e := range expected {
			if errors.Is(err, e) {
				span.End()
				return
			}
		}
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func outcomeAttr(outcome string) metric.AddOption {
	return metric.WithAttributes(attrOutcome.String(outcome))
}

// recordFetch counts one Fetch caller's result.
func (t *telemetry) recordFetch(ctx context.Context, outcome string) {
	switch outcome {
	case outcomeHit, outcomeNegative:
		t.hits.Add(ctx, 1, outcomeAttr(outcome))
	case outcomeError:
	default:
		t.misses.Add(ctx, 1, outcomeAttr(outcome))
		if outcome == outcomeStale {
			t.staleServed.Add(ctx, 1)
		}
	}
}
