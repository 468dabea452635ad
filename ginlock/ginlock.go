package ginlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockmw/lockmw/internal/adapt"
	"github.com/lockmw/lockmw/lockmw"
)

// ScopeName is the instrumentation scope of the middleware's tracer and meter:
// the package import path.
const ScopeName = "github.com/lockmw/lockmw/ginlock"

// SpanName is the name of the span around each request the middleware handles.
const SpanName = "ginlock.lock"

// Outcomes reported as lock.outcome on the span and the ginlock.requests
// counter: the values every lockmw adapter reports.
const (
	OutcomeAcquired = adapt.OutcomeAcquired // the lock was taken and released after the handlers
	OutcomeBusy     = adapt.OutcomeBusy     // held by another request: 409
	OutcomeTimeout  = adapt.OutcomeTimeout  // the request's context ended while waiting
	OutcomeError    = adapt.OutcomeError    // the store unavailable or the Locker closed
	OutcomeInvalid  = adapt.OutcomeInvalid  // no usable key in the request: 400 or 413
	OutcomeLost     = adapt.OutcomeLost     // the lock was lost while the handlers ran
)

// New returns middleware that holds the lock on the resource named by key
// while the rest of the chain runs: see the package documentation for keys,
// responses and telemetry. Requests on one key run their handlers one at a
// time across every instance whose Locker shares the Redis and key prefix.
//
// New panics if locker or key is nil or an option is invalid (a template
// without exactly one named placeholder, a negative wait; the panic's error
// matches lockmw.ErrInvalidOption): these are programming errors, found
// when the routes are set up. Nil options are skipped.
func New(locker *lockmw.Locker, key KeyFunc, opts ...Option) gin.HandlerFunc {
	cfg, err := newConfig(opts)
	adapt.MustSetup("ginlock.New", locker == nil, key == nil, err)
	tracer, meter := adapt.Instruments(ScopeName, cfg.tp, cfg.mp)
	m := &middleware{locker: locker, keyFunc: key, cfg: cfg, holds: adapt.NewHolds(locker), tracer: tracer,
		requests: adapt.Counter(meter, "ginlock.requests", "{request}", "Requests handled by ginlock middleware, by lock.name and lock.outcome.")}
	return m.handle
}

type middleware struct {
	locker  *lockmw.Locker
	keyFunc KeyFunc
	cfg     *config
	holds   *adapt.Holds // hold durations by lock name, for Retry-After

	tracer   trace.Tracer
	requests metric.Int64Counter

	// misconfiguredRoutes holds the routes (gin's FullPath) whose setup
	// mistake has been logged.
	misconfiguredRoutes sync.Map
}

// lockName returns the lock.name of a request: the template, or else the
// route pattern.
func (m *middleware) lockName(c *gin.Context) string {
	if !m.cfg.template.IsZero() {
		return m.cfg.template.String()
	}
	if p := c.FullPath(); p != "" {
		return p
	}
	return "ginlock"
}

func (m *middleware) handle(c *gin.Context) {
	if m.cfg.skip != nil && m.cfg.skip(c) {
		return // c.Next() follows: gin runs the rest of the chain
	}
	req := c.Request
	name := m.lockName(c)
	ctx, span := m.tracer.Start(req.Context(), SpanName, trace.WithAttributes(adapt.AttrName.String(name)))
	outcome := OutcomeError
	finished := false
	defer func() {
		if !finished { // a handler panicked: the lock was released; say so
			span.SetStatus(codes.Error, "handler panicked")
		}
		span.SetAttributes(adapt.AttrOutcome.String(outcome))
		span.End()
		m.requests.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(adapt.AttrName.String(name), adapt.AttrOutcome.String(outcome)))
	}()

	key, err := m.key(c)
	if err != nil {
		outcome = OutcomeInvalid
		finished = true
		if errors.Is(err, ErrMisconfigured) {
			outcome = OutcomeError
			m.misconfigured(c, span, err)
		}
		m.reject(c, m.cfg.onError, err)
		return
	}

	opts := append(append([]lockmw.AcquireOption(nil), m.cfg.acquireOpts...), lockmw.WithName(name))
	start := time.Now()
	var lease *lockmw.Lease
	if m.cfg.waitSet {
		lease, err = m.locker.Acquire(ctx, key, append(opts, lockmw.WithWait(m.cfg.wait))...)
	} else {
		lease, err = m.locker.TryAcquire(ctx, key, opts...)
	}
	acquiredAt := time.Now()
	span.SetAttributes(adapt.AttrWaitMS.Int64(acquiredAt.Sub(start).Milliseconds()))
	hold := m.holds.For(name)
	if err != nil {
		finished = true
		outcome = adapt.AcquireOutcome(ctx, err)
		switch outcome {
		case OutcomeBusy:
			if m.cfg.holderInBusy {
				err = adapt.WithHolder(ctx, m.locker, key, err)
			}
			wait, known := hold.Wait(lockmw.RetryAfter(err))
			if known {
				err = &estimatedError{err: err, wait: wait}
			}
			m.reject(c, m.cfg.onBusy, err)
		case OutcomeInvalid:
			m.reject(c, m.cfg.onError, fmt.Errorf("%w: %w", ErrNoKey, err))
		case OutcomeTimeout:
			m.reject(c, m.cfg.onError, err)
		default:
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			if errors.Is(err, lockmw.ErrStoreSetup) {
				// A setup mistake, not an outage: 500, logged once.
				m.storeNotSetUp(c, err)
			} else {
				m.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "ginlock: lock unavailable",
					slog.String("lock.name", name), slog.String("key", key), slog.Any("error", err))
			}
			m.reject(c, m.cfg.onError, err)
		}
		return
	}
	span.SetAttributes(adapt.AttrFence.Int64(int64(lease.Fence())))
	outcome = OutcomeAcquired

	prev, hadPrev := c.Get(leaseKey)
	writer := c.Writer
	var held *heldWriter
	if !m.cfg.streaming {
		held = newHeldWriter(writer)
		c.Writer = held
	}
	defer func() {
		c.Request, c.Writer = req, writer
		if hadPrev {
			c.Set(leaseKey, prev)
		} else {
			c.Delete(leaseKey)
		}
		// The lock was lost if its context ended with ErrLost before the
		// release, or the release found it gone.
		cause := context.Cause(lease.Context())
		lost := errors.Is(cause, lockmw.ErrLost)
		// Release even when the request's context has ended (the core
		// bounds the call by the lease TTL), keeping its trace.
		relErr := lease.Release(context.WithoutCancel(ctx))
		hold.Observe(time.Since(acquiredAt))
		if errors.Is(relErr, lockmw.ErrLost) && !lost {
			lost, cause = true, relErr
		}
		if !finished {
			return // a panic: what the handler wrote is dropped for gin.Recovery's answer
		}
		if lost {
			outcome = OutcomeLost
			span.RecordError(cause)
			span.SetStatus(codes.Error, "lock lost while the handlers ran")
			m.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "ginlock: lock lost while the handlers ran",
				slog.String("lock.name", name), slog.String("key", key), slog.Any("cause", cause))
			answered := writer.Written() || (held != nil && (held.Written() || held.Status() != http.StatusOK))
			if !answered {
				err := fmt.Errorf("ginlock: lock %q was lost while the handlers ran: %w", key, cause)
				held = nil // nothing to send from the handler
				m.cfg.onError(c, err)
				if !c.Writer.Written() && c.Writer.Status() == http.StatusOK {
					DefaultErrorHandler(c, err)
				}
				recordServerError(c, err)
			}
		} else if relErr != nil {
			span.RecordError(relErr) // the lock expires after its TTL
		}
		if held != nil {
			held.commit()
		}
	}()
	c.Request = req.WithContext(lease.Context())
	if !m.cfg.requestContextOnly && c.Done() == nil {
		// gin's Context does not reach c.Request's context: a handler that
		// used c as its context would not see a lost lock, and locking the
		// same key with c would wait for this very lock.
		outcome = OutcomeError
		finished = true
		err := fmt.Errorf("%w: the gin engine does not set ContextWithFallback: set engine.ContextWithFallback = true "+
			"(so that the *gin.Context carries the lease context), or give ginlock.WithRequestContextOnly() "+
			"if every handler uses c.Request.Context()", ErrMisconfigured)
		m.misconfigured(c, span, err)
		held = nil
		c.Writer = writer
		m.reject(c, m.cfg.onError, err)
		return
	}
	c.Set(leaseKey, lease)
	c.Next()
	finished = true
}

// misconfigured reports a setup mistake loudly: an error span for every
// request, besides the 500 answer, and an error log line the first time
// the route meets it (the same mistake fails every request: a line per
// request would bury it).
func (m *middleware) misconfigured(c *gin.Context, span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
	route := c.FullPath()
	if _, logged := m.misconfiguredRoutes.LoadOrStore(route, struct{}{}); logged {
		return
	}
	m.cfg.logger.LogAttrs(c.Request.Context(), slog.LevelError, "ginlock: middleware misconfigured for route; every request to it is answered 500 until it is fixed (logged once per route)",
		slog.String("route", route), slog.Any("error", err))
}

// storeNotSetUp logs, once per route, that the Locker's store is not set up
// for lockmw (lockmw.ErrStoreSetup: its tables missing).
func (m *middleware) storeNotSetUp(c *gin.Context, err error) {
	route := c.FullPath()
	if _, logged := m.misconfiguredRoutes.LoadOrStore("store not set up: "+route, struct{}{}); logged {
		return
	}
	m.cfg.logger.LogAttrs(c.Request.Context(), slog.LevelError, "ginlock: the lock store is not set up; every request to the route is answered 500 until it is (logged once per route)",
		slog.String("route", route), slog.Any("error", err))
}

// estimatedError is a busy error with the middleware's estimate of the wait
// (see RetryAfterSeconds).
type estimatedError struct {
	err  error
	wait time.Duration
}

func (e *estimatedError) Error() string { return e.err.Error() }
func (e *estimatedError) Unwrap() error { return e.err }

// leaseKey is where the lease is kept in the gin.Context.
type leaseKeyType struct{}

var leaseKey leaseKeyType

// LeaseFrom returns the lease the middleware holds for this request, or nil
// outside a locked chain. With several ginlock middlewares in one chain it is
// the innermost one's. Its Fence is the token to hand to a store that rejects
// late writers.
func LeaseFrom(c *gin.Context) *lockmw.Lease {
	v, _ := c.Get(leaseKey)
	lease, _ := v.(*lockmw.Lease)
	return lease
}

// key runs the KeyFunc and forms the lock key.
func (m *middleware) key(c *gin.Context) (string, error) {
	id, err := m.keyFunc(c)
	if err == nil {
		id, err = checkID("the lock key's identifier", id)
	}
	if err != nil {
		if errors.Is(err, ErrNoKey) || errors.Is(err, ErrMisconfigured) {
			return "", err
		}
		return "", fmt.Errorf("%w: %w", ErrNoKey, err)
	}
	key := m.cfg.template.Key(id)
	if len(key) > lockmw.MaxKeyLen {
		return "", fmt.Errorf("%w: the key would be %d bytes, more than %d", ErrNoKey, len(key), lockmw.MaxKeyLen)
	}
	return key, nil
}

// reject writes h's response, or the default one if h wrote nothing,
// records err in c.Errors if the answer is a server error (see
// recordServerError), and aborts the chain.
func (m *middleware) reject(c *gin.Context, h ErrorHandler, err error) {
	h(c, err)
	if !c.Writer.Written() && c.Writer.Status() == http.StatusOK {
		if errors.Is(err, lockmw.ErrNotAcquired) {
			DefaultBusyHandler(c, err)
		} else {
			DefaultErrorHandler(c, err)
		}
	}
	recordServerError(c, err)
	c.Abort()
}

// recordServerError records err in c.Errors, for gin's loggers and otelgin,
// when the response written is a server error (500 and up). A 4xx answer
// (busy, bad input, a lost lock) is the client's to handle: otelgin marks
// the server span an error whenever c.Errors is not empty, and
// OpenTelemetry's HTTP conventions leave a server span unset for 4xx. The
// middleware's own span, counter and logger record every outcome.
func recordServerError(c *gin.Context, err error) {
	if c.Writer.Status() >= http.StatusInternalServerError {
		_ = c.Error(err)
	}
}

// Problem types of the default responses, RFC 9457 "type" URIs that lead to
// this documentation.
const (
	ProblemBusy          = "https://pkg.go.dev/github.com/lockmw/lockmw/ginlock#ProblemBusy"
	ProblemNoKey         = "https://pkg.go.dev/github.com/lockmw/lockmw/ginlock#ProblemNoKey"
	ProblemBodyTooLarge  = "https://pkg.go.dev/github.com/lockmw/lockmw/ginlock#ProblemBodyTooLarge"
	ProblemUnavailable   = "https://pkg.go.dev/github.com/lockmw/lockmw/ginlock#ProblemUnavailable"
	ProblemLost          = "https://pkg.go.dev/github.com/lockmw/lockmw/ginlock#ProblemLost"
	ProblemMisconfigured = "https://pkg.go.dev/github.com/lockmw/lockmw/ginlock#ProblemMisconfigured"
)

const (
	problemContentType   = "application/problem+json"
	defaultRetryAfterSec = 1 // Retry-After when the wait is unknown, and on 503
)

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Holder is the lock holder's description, on busy answers of a
	// middleware given WithHolderInBusy (when the store reported one).
	Holder string `json:"holder,omitempty"`
}

// WriteProblem writes p as an application/problem+json response with status
// p.Status.
func WriteProblem(c *gin.Context, p Problem) {
	c.Render(p.Status, problemRender{p})
}

// DefaultBusyHandler answers 409 Conflict with a Retry-After header of
// RetryAfterSeconds(err).
func DefaultBusyHandler(c *gin.Context, err error) {
	c.Header("Retry-After", strconv.Itoa(RetryAfterSeconds(err)))
	detail := "the resource is being changed by another request; retry later"
	var busy *lockmw.NotAcquiredError
	if errors.As(err, &busy) && busy.Key != "" {
		detail = busy.Key + " is being changed by another request; retry later"
	}
	holder, _ := HolderOf(err)
	WriteProblem(c, Problem{Type: ProblemBusy, Title: "Resource busy", Status: http.StatusConflict, Detail: detail, Holder: holder})
}

// HolderOf returns the lock holder's description that a middleware given
// WithHolderInBusy added to a busy error, for a custom busy handler.
func HolderOf(err error) (string, bool) { return adapt.HolderOf(err) }

// RetryAfterSeconds returns the Retry-After value for a busy error, in whole
// seconds, rounded up, and at least 1. For the errors the middleware hands to
// its busy handler it is the expected wait: the moving average of how long
// this process's requests held locks of the same name (and Locker), bounded
// by the holder's remaining lease (lockmw.RetryAfter), or 1 while no hold
// has been seen. For other errors it is the remaining lease; 1 when nothing
// is known.
func RetryAfterSeconds(err error) int {
	var est *estimatedError
	d, ok := time.Duration(0), false
	if errors.As(err, &est) {
		d, ok = est.wait, true
	} else {
		d, ok = lockmw.RetryAfter(err)
	}
	if !ok || d <= 0 {
		return defaultRetryAfterSec
	}
	return max(1, int(math.Ceil(d.Seconds())))
}

// DefaultErrorHandler answers:
//
//   - 400 Bad Request for ErrNoKey (413 Content Too Large for
//     ErrBodyTooLarge), with the reason in the detail;
//   - 409 Conflict (type ProblemLost) for lockmw.ErrLost: the lock was lost
//     while the handlers ran and they wrote no response, so whether their
//     work took effect is unknown;
//   - 500 Internal Server Error for ErrMisconfigured, without the details
//     (they are logged);
//   - 503 Service Unavailable with Retry-After: 1 otherwise: the store
//     unavailable, the Locker closed, or the request's context ended while
//     waiting. The detail does not expose the underlying error.
func DefaultErrorHandler(c *gin.Context, err error) {
	switch {
	case errors.Is(err, ErrBodyTooLarge):
		WriteProblem(c, Problem{Type: ProblemBodyTooLarge, Title: "Request body too large",
			Status: http.StatusRequestEntityTooLarge, Detail: strings.TrimPrefix(err.Error(), "ginlock: ")})
	case errors.Is(err, ErrNoKey):
		WriteProblem(c, Problem{Type: ProblemNoKey, Title: "Missing or invalid resource key",
			Status: http.StatusBadRequest, Detail: strings.TrimPrefix(err.Error(), "ginlock: ")})
	case errors.Is(err, lockmw.ErrLost):
		WriteProblem(c, Problem{Type: ProblemLost, Title: "Lock lost", Status: http.StatusConflict,
			Detail: "the resource's lock was lost while the request ran, so its effect is unknown; check the resource before retrying"})
	case errors.Is(err, lockmw.ErrStoreSetup):
		WriteProblem(c, Problem{Type: ProblemMisconfigured, Title: "Server misconfigured",
			Status: http.StatusInternalServerError, Detail: "the lock store is not set up for this service"})
	case errors.Is(err, ErrMisconfigured):
		WriteProblem(c, Problem{Type: ProblemMisconfigured, Title: "Server misconfigured",
			Status: http.StatusInternalServerError, Detail: "the lock middleware is set up wrong for this route"})
	default:
		detail := "the lock service is unavailable; retry later"
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			detail = "the request ended while waiting for the lock"
		}
		c.Header("Retry-After", strconv.Itoa(defaultRetryAfterSec))
		WriteProblem(c, Problem{Type: ProblemUnavailable, Title: "Lock service unavailable",
			Status: http.StatusServiceUnavailable, Detail: detail})
	}
}
