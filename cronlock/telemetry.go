package cronlock

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockmw/lockmw/internal/adapt"
)

// ScopeName is the instrumentation scope of cronlock's tracer and meter: the
// package import path.
const ScopeName = "github.com/lockmw/lockmw/cronlock"

// Span, metric and attribute names, as documented in the package overview.
const (
	spanRun = "cronlock.run"

	metricRuns        = "cronlock.runs"
	metricSkips       = "cronlock.skips"
	metricRunDuration = "cronlock.run.duration"
	metricGaps        = "cronlock.gaps"

	attrJob        = attribute.Key("cron.job")
	attrInstance   = attribute.Key("cron.instance")
	attrOutcome    = attribute.Key("cron.outcome")
	attrSkipReason = attribute.Key("cron.skip_reason")
)

// Run outcomes (cron.outcome) and skip reasons (cron.skip_reason).
const (
	outcomeOK      = "ok"
	outcomeError   = "error"
	outcomePanic   = "panic"
	outcomeLost    = "lost"
	outcomeMaxHold = "max_hold"

	reasonBusy        = "busy"
	reasonUnavailable = "unavailable"
	reasonSetup       = "setup"
	reasonClaimed     = "claimed"
)

// telemetry holds one Singleton's tracer and instruments.
type telemetry struct {
	tracer      trace.Tracer
	runs        metric.Int64Counter
	skips       metric.Int64Counter
	runDuration metric.Float64Histogram
	gaps        metric.Int64Counter
	job         attribute.KeyValue
}

// newTelemetry returns the telemetry of the job name, from tp and mp or
// the global providers. An instrument the meter refuses is reported to
// otel.Handle and replaced by a no-op one: telemetry never stops a job.
func newTelemetry(name string, tp trace.TracerProvider, mp metric.MeterProvider) *telemetry {
	tracer, m := adapt.Instruments(ScopeName, tp, mp)
	t := &telemetry{tracer: tracer, job: attrJob.String(name)}
	t.runs = adapt.Counter(m, metricRuns, "{run}",
		"Fires this instance ran, by cron.job and cron.outcome (ok, error, panic, lost, max_hold).")
	t.skips = adapt.Counter(m, metricSkips, "{fire}",
		"Fires this instance skipped, by cron.job and cron.skip_reason (busy: another run holds the lock; unavailable: the store could not be asked; setup: the store is not set up for lockmw, e.g. its tables are missing).")
	t.gaps = adapt.Counter(m, metricGaps, "{fire}",
		"Fires of a Scheduler's job that no instance claimed, counted by the instance that claimed a later fire, by cron.job.")
	var err error
	t.runDuration, err = m.Float64Histogram(metricRunDuration, metric.WithUnit("s"),
		metric.WithDescription("Time a job ran, by cron.job and cron.outcome."))
	if err != nil {
		otel.Handle(err)
		t.runDuration, _ = noop.NewMeterProvider().Meter("").Float64Histogram(metricRunDuration)
	}
	return t
}

// start begins the span of one fire.
func (t *telemetry) start(instance string) (context.Context, trace.Span) {
	return t.tracer.Start(context.Background(), spanRun,
		trace.WithAttributes(t.job, attrInstance.String(instance)))
}

// skipped ends a fire's span and counts the skip. Busy is not a span error.
func (t *telemetry) skipped(ctx context.Context, span trace.Span, reason string, err error) {
	span.SetAttributes(attrOutcome.String("skipped"), attrSkipReason.String(reason))
	if reason != reasonBusy && reason != reasonClaimed {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	t.skips.Add(ctx, 1, metric.WithAttributes(t.job, attrSkipReason.String(reason)))
}

// gap counts n fires that no instance claimed.
func (t *telemetry) gap(ctx context.Context, n int) {
	t.gaps.Add(ctx, int64(n), metric.WithAttributes(t.job))
}

// ran ends a fire's span and records the run.
func (t *telemetry) ran(ctx context.Context, span trace.Span, fence uint64, outcome string, took time.Duration, err error) {
	span.SetAttributes(attrOutcome.String(outcome), adapt.AttrFence.Int64(int64(fence)))
	if outcome != outcomeOK {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetStatus(codes.Error, outcome)
		}
	}
	span.End()
	attrs := metric.WithAttributes(t.job, attrOutcome.String(outcome))
	t.runs.Add(ctx, 1, attrs)
	t.runDuration.Record(ctx, took.Seconds(), attrs)
}
