package grpclock

import (
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
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
// returns. An empty template locks the KeyFunc's value as it is, reported
// under the method's full name.
type Selector func(fullMethod string) (template string, locked bool)

type config struct {
	selector Selector
	wait     time.Duration // 0: fail fast
	newFirst func(fullMethod string) any
	tp       trace.TracerProvider
	mp       metric.MeterProvider
	logger   *slog.Logger
}

func newConfig(opts []Option) *config {
	c := &config{selector: func(string) (string, bool) { return "", true }}
	for _, o := range opts {
		o.apply(c)
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c
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
// It panics if a template is not empty and lacks exactly one {placeholder}:
// that is a programming error, caught when the interceptor is built.
// Without WithMethods or WithSelector every method is locked.
func WithMethods(templates map[string]string) Option {
	m := make(map[string]string, len(templates))
	for method, tmpl := range templates {
		if _, _, err := splitTemplate(tmpl); err != nil {
			panic(fmt.Sprintf("grpclock.WithMethods: method %s: %v", method, err))
		}
		m[method] = tmpl
	}
	return optionFunc(func(c *config) {
		c.selector = func(fullMethod string) (string, bool) {
			tmpl, ok := m[fullMethod]
			return tmpl, ok
		}
	})
}

// WithSelector decides per call which methods are locked and under which
// name template, for rules a fixed map cannot express (a whole service, a
// method prefix). A template it returns that lacks exactly one
// {placeholder} fails the call with codes.Internal.
func WithSelector(s Selector) Option {
	if s == nil {
		panic("grpclock.WithSelector: nil Selector")
	}
	return optionFunc(func(c *config) { c.selector = s })
}

// WithWait makes a call wait up to d for a busy lock instead of failing at
// once with codes.Aborted; the wait also ends with the call's deadline or
// cancellation (codes.DeadlineExceeded, codes.Canceled). The default, 0, is
// a single attempt. It panics if d is negative.
func WithWait(d time.Duration) Option {
	if d < 0 {
		panic(fmt.Sprintf("grpclock.WithWait: negative wait %v", d))
	}
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
// custom funcs reading ctx. Unary calls ignore this option.
func WithFirstMessage(newMsg func(fullMethod string) any) Option {
	if newMsg == nil {
		panic("grpclock.WithFirstMessage: nil constructor")
	}
	return optionFunc(func(c *config) { c.newFirst = newMsg })
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
