package ginlock

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockmw/lockmw/internal/adapt"
	"github.com/lockmw/lockmw/lockmw"
)

// An Option configures the middleware returned by New.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// ErrorHandler writes the response for a request whose lock was not taken.
// It should write a status and body; the middleware aborts the chain after it
// returns, and writes the default response if it wrote nothing.
type ErrorHandler func(c *gin.Context, err error)

type config struct {
	name        string         // WithName's template, as given
	named       bool           // WithName was given
	template    adapt.Template // zero: the key is the identifier, lock.name the route
	wait        time.Duration
	waitSet     bool
	acquireOpts []lockmw.AcquireOption
	onBusy      ErrorHandler
	onError     ErrorHandler
	tp          trace.TracerProvider
	mp          metric.MeterProvider
	logger      *slog.Logger
	skip        func(*gin.Context) bool
	streaming   bool // send responses as written, before the release
	// requestContextOnly: the engine need not set ContextWithFallback
	requestContextOnly bool
	holderInBusy       bool // WithHolderInBusy
}

// newConfig applies opts, skipping nil ones, and validates the result: the
// mistakes found are returned, matching lockmw.ErrInvalidOption.
func newConfig(opts []Option) (*config, error) {
	c := &config{onBusy: DefaultBusyHandler, onError: DefaultErrorHandler}
	adapt.Apply(opts, func(o Option) { o.apply(c) })
	if c.logger == nil {
		c.logger = slog.Default()
	}
	var misuse adapt.Misuse
	if c.named {
		t, err := adapt.ParseTemplate(c.name)
		if err != nil {
			misuse.Add(fmt.Sprintf("ginlock.WithName(%q)", c.name), err)
		}
		c.template = t
	}
	if c.wait < 0 {
		misuse.Addf(fmt.Sprintf("ginlock.WithWait(%v)", c.wait), "the wait must not be negative")
	}
	c.waitSet = c.wait > 0
	return c, misuse.Err()
}

// WithName sets the template of the lock key, which is also the lock's name in
// telemetry (lock.name). It has exactly one placeholder, a name in braces:
// with "order:{id}", identifier "42" locks the key "order:42", reported as
// "order:{id}". The placeholder's name must not be empty, and the text
// around the placeholder must not contain braces. New panics otherwise.
func WithName(template string) Option {
	return optionFunc(func(c *config) { c.name, c.named = template, true })
}

// WithWait makes the middleware wait up to d for a busy lock instead of
// answering 409 at once; the wait also ends when the request's context does.
// WithWait(0) is the default: a single attempt. New panics if d is
// negative.
func WithWait(d time.Duration) Option {
	return optionFunc(func(c *config) { c.wait = d })
}

// WithAcquireOptions passes options such as lockmw.WithLeaseTTL to every
// acquisition. The middleware's own WithName and WithWait take precedence over
// their lockmw counterparts given here.
func WithAcquireOptions(opts ...lockmw.AcquireOption) Option {
	return optionFunc(func(c *config) {
		c.acquireOpts = append(c.acquireOpts, opts...)
	})
}

// WithBusyHandler replaces the 409 response written when another request holds
// the lock (or WithWait ran out). err matches lockmw.ErrNotAcquired;
// RetryAfterSeconds(err) is the middleware's estimate of the wait, and
// lockmw.RetryAfter(err) how long the holder's lease has left.
func WithBusyHandler(h ErrorHandler) Option {
	return optionFunc(func(c *config) {
		if h != nil {
			c.onBusy = h
		}
	})
}

// WithErrorHandler replaces the response written when the lock could not be
// tried: err matches ErrNoKey (the request carries no usable key; also
// ErrBodyTooLarge), ErrMisconfigured, lockmw.ErrUnavailable,
// lockmw.ErrClosed, or the request context's error. It also answers a
// request whose lock was lost while its handlers ran when they wrote no
// response: err then matches lockmw.ErrLost.
func WithErrorHandler(h ErrorHandler) Option {
	return optionFunc(func(c *config) {
		if h != nil {
			c.onError = h
		}
	})
}

// WithTracerProvider sets the OpenTelemetry tracer provider of the
// middleware's spans. Without it the global provider is used.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tp = tp })
}

// WithMeterProvider sets the OpenTelemetry meter provider of the middleware's
// counter. Without it the global provider is used.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// WithLogger sets the logger for failures an operator should see: the
// store unavailable, a lock lost while the handlers ran (Warn), and setup mistakes
// (Error, once per route). Without it slog.Default() is used.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithSkip leaves the requests for which skip returns true to the rest of
// the chain without a lock, a span or a Redis call: for example a dry-run
// flag, or safe methods on a group of routes.
func WithSkip(skip func(c *gin.Context) bool) Option {
	return optionFunc(func(c *config) { c.skip = skip })
}

// WithStreaming sends the handlers' response as they write it, as gin does
// without the middleware. By default the middleware holds the response
// until the lock is released, so that a client that has read its complete
// response and sends its next request on the same resource never finds its
// own finished request still holding the lock. Use WithStreaming for large
// or streamed responses (server-sent events, downloads) that should not be
// held in memory; a handler that calls Flush (or hijacks the connection)
// streams from then on in any case. With it, the client can receive the
// response before the release, and a next request sent at once may get 409.
func WithStreaming() Option {
	return optionFunc(func(c *config) { c.streaming = true })
}

// WithRequestContextOnly lets the middleware run on an engine that does not
// set ContextWithFallback, for handlers that use c.Request.Context() and
// never the *gin.Context itself as their context. Without fallback, the
// *gin.Context is neither cancelled when the lock is lost nor carries the
// lease, so lockmw calls made with c on the same key would wait for this
// request's own lock. By default the middleware refuses such an engine: it
// answers 500 (ErrMisconfigured) and logs how to fix it.
func WithRequestContextOnly() Option {
	return optionFunc(func(c *config) { c.requestContextOnly = true })
}

// WithHolderInBusy adds the holder's description (lockmw.WithHolderInfo of
// the Locker that holds the lock) to busy answers: DefaultBusyHandler puts
// it in the problem's "holder" member, and a custom busy handler reads it
// with HolderOf. Off by default: a description may name hosts, which a
// client should not see unless the service means it to. A busy answer then
// costs one more read of the store (Locker.Inspect, bounded to 250ms;
// without an answer in time, the busy answer goes out without it).
func WithHolderInBusy() Option {
	return optionFunc(func(c *config) { c.holderInBusy = true })
}
