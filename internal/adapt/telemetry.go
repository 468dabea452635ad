package adapt

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockmw/lockmw/lockmw"
)

// Attribute keys of the adapters' spans and metrics. lock.fence is the
// fencing token of the lease an adapter holds, under this one key in every
// adapter (and in lockmw's own spans).
const (
	AttrName    = attribute.Key("lock.name")    // the low-cardinality lock name: a template or route
	AttrOutcome = attribute.Key("lock.outcome") // one of the Outcome values
	AttrWaitMS  = attribute.Key("lock.wait_ms") // how long the acquisition took, in milliseconds
	AttrFence   = attribute.Key("lock.fence")   // the lease's fencing token, once acquired
)

// Values of lock.outcome: what became of one locked request or call.
const (
	OutcomeAcquired = "acquired" // the lock was taken, and released after the work
	OutcomeBusy     = "busy"     // held by another owner (or the wait for it ran out)
	OutcomeTimeout  = "timeout"  // the caller's context ended while waiting
	OutcomeError    = "error"    // the store unavailable or the Locker closed
	OutcomeInvalid  = "invalid"  // no usable key
	OutcomeLost     = "lost"     // the lock was lost while the work ran
)

// AcquireOutcome returns the lock.outcome of an acquisition through
// lockmw's Acquire or TryAcquire with ctx that returned err:
// OutcomeAcquired for nil, OutcomeBusy for lockmw.ErrNotAcquired,
// OutcomeInvalid for lockmw.ErrInvalidKey, OutcomeTimeout when ctx has
// ended (whatever the store said: the caller is gone) or err is a context
// error, and OutcomeError otherwise (lockmw.ErrUnavailable, lockmw.ErrClosed). Each adapter maps
// the outcome to its own answer (HTTP status, gRPC code, skip reason).
func AcquireOutcome(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return OutcomeAcquired
	case errors.Is(err, lockmw.ErrNotAcquired):
		return OutcomeBusy
	case errors.Is(err, lockmw.ErrInvalidKey):
		return OutcomeInvalid
	case ctx.Err() != nil, isContextErr(err) && !errors.Is(err, lockmw.ErrUnavailable):
		return OutcomeTimeout
	}
	return OutcomeError
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// Instruments returns the tracer and meter of instrumentation scope
// scope, from tp and mp, or from the global providers where they are nil.
func Instruments(scope string, tp trace.TracerProvider, mp metric.MeterProvider) (trace.Tracer, metric.Meter) {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	return tp.Tracer(scope), mp.Meter(scope)
}

// Counter creates the counter name on m. If m refuses it, the error goes to
// otel.Handle and a no-op counter is returned: telemetry never stops an
// adapter.
func Counter(m metric.Meter, name, unit, description string) metric.Int64Counter {
	c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(description))
	if err != nil {
		otel.Handle(err)
		c, _ = noop.NewMeterProvider().Meter("").Int64Counter(name)
	}
	return c
}
