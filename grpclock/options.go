package grpclock

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockmw/lockmw/internal/adapt"
)

// An Option configures UnaryServerInterceptor and StreamServerInterceptor.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// A Selector decides whether calls to fullMethod ("/pkg.Service/Method") are
// locked and under which name template. The template is both the lock key
// pattern and the low-cardinality telemetry name: its one {placeholder}
// (any name, as in "order:{id}") is replaced by the value the KeyFunc
// returns. The placeholder's name must not be empty, and the template has
// no other braces (the rule ginlock's WithName follows too). An empty
// template locks the KeyFunc's value as it is, reported under the method's
// full name.
type Selector func(fullMethod string) (template string, locked bool)

type config struct {
	selector Selector
	methods  map[string]string // WithMethods' templates, when it chose the selector
	wait     time.Duration     // 0: fail fast
	newFirst func(fullMethod string) any
	firstSet bool // WithFirstMessage was given
	tp       trace.TracerProvider
	mp       metric.MeterProvider
	logger   *slog.Logger
	// holderInBusy: WithHolderInBusy
	holderInBusy bool
}

// newConfig applies opts, skipping nil ones, and validates the result: the
// mistakes found are returned, matching lockmw.ErrInvalidOption.
func newConfig(opts []Option) (*config, error) {
	c := &config{selector: func(string) (string, bool) { return "", true }}
	adapt.Apply(opts, func(o Option) { o.apply(c) })
	if c.logger == nil {
		c.logger = slog.Default()
	}
	var misuse adapt.Misuse
	if c.selector == nil {
		misuse.Addf("grpclock.WithSelector(nil)", "give a Selector, or use WithMethods")
	}
	for _, method := range slices.Sorted(maps.Keys(c.methods)) {
		if _, err := parseTemplate(c.methods[method]); err != nil {
			misuse.Add("grpclock.WithMethods: method "+method, err)
		}
	}
	if c.wait < 0 {
		misuse.Addf(fmt.Sprintf("grpclock.WithWait(%v)", c.wait), "the wait must not be negative")
	}
	if c.firstSet && c.newFirst == nil {
		misuse.Addf("grpclock.WithFirstMessage(nil)", "give a constructor of the stream's first message, such as func(string) any { return new(pb.BuyRequest) }")
	}
	return c, misuse.Err()
}

// WithLogger sets the logger for what clients are not told: the cause of
// codes.Unavailable and of a lost lock (Warn), of codes.InvalidArgument
// (Info), and setup mistakes behind codes.Internal (Error). Without it
// slog.Default() is used.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithMethods locks only the listed methods, each under its name template
// (see Selector), and lets every other call through without touching Redis:
//
//	grpclock.WithMethods(map[string]string{
//		"/shop.Shop/Buy":    "item:{id}",
//		"/shop.Shop/Refund": "item:{id}",
//	})
//
// The interceptor constructors panic if a template is not empty and is not
// a template (see Selector): that is a programming error, caught when the
// interceptor is built. Without WithMethods or WithSelector every method
// is locked.
func WithMethods(templates map[string]string) Option {
	m := maps.Clone(templates)
	return optionFunc(func(c *config) {
		c.methods = m
		c.selector = func(fullMethod string) (string, bool) {
			tmpl, ok := m[fullMethod]
			return tmpl, ok
		}
	})
}

// WithSelector decides per call which methods are locked and under which
// name template, for rules a fixed map cannot express (a whole service, a
// method prefix). A template it returns that is not empty and is not a
// template (see Selector) fails the call with codes.Internal. The
// interceptor constructors panic if s is nil.
func WithSelector(s Selector) Option {
	return optionFunc(func(c *config) { c.selector, c.methods = s, nil })
}

// WithWait makes a call wait up to d for a busy lock instead of failing at
// once with codes.Aborted; the wait also ends with the call's deadline or
// cancellation (codes.DeadlineExceeded, codes.Canceled). The default, 0, is
// a single attempt. The interceptor constructors panic if d is negative.
func WithWait(d time.Duration) Option {
	return optionFunc(func(c *config) { c.wait = d })
}

// WithFirstMessage makes StreamServerInterceptor take a stream's lock key
// from its first message: it receives that message into newMsg(fullMethod)
// (a pointer, such as new(pb.BuyRequest)), passes it to the KeyFunc as req,
// and hands it to the handler's first RecvMsg, so the handler sees the
// stream unchanged. Proto messages are copied with proto.Merge, other types
// by assignment; the handler must receive into the same type.
//
// Without it, a stream's KeyFunc gets req == nil, which suits Metadata and
// custom funcs reading ctx. Unary calls ignore this option. The
// interceptor constructors panic if newMsg is nil.
func WithFirstMessage(newMsg func(fullMethod string) any) Option {
	return optionFunc(func(c *config) { c.newFirst, c.firstSet = newMsg, true })
}

// WithTracerProvider sets the OpenTelemetry tracer provider for the
// per-call lock span. Without it the global provider is used.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tp = tp })
}

// WithMeterProvider sets the OpenTelemetry meter provider for the
// grpclock.calls counter. Without it the global provider is used.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// WithHolderInBusy adds the holder's description (lockmw.WithHolderInfo of
// the Locker that holds the lock) to busy answers, as an
// errdetails.ErrorInfo (Reason "LOCK_HELD", Domain "lockmw", Metadata
// "holder"). Off by default: a description may name hosts, which a client
// should not see unless the service means it to. A busy answer then costs
// one more read of the store (Locker.Inspect, bounded to 250ms; without an
// answer in time, the busy answer goes out without it).
func WithHolderInBusy() Option {
	return optionFunc(func(c *config) { c.holderInBusy = true })
}
