package grpclock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strconv"
	"sync"
	"time"

	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockmw/lockmw/internal/adapt"
	"github.com/lockmw/lockmw/lockmw"
)

// ScopeName is the instrumentation scope of grpclock's tracer and meter:
// the package import path.
const ScopeName = "github.com/lockmw/lockmw/grpclock"

// SpanName is the name of the span grpclock starts for every locked call.
const SpanName = "grpclock.lock"

// The lock.outcome values every lockmw adapter reports.
const (
	outcomeAcquired = adapt.OutcomeAcquired // the handler ran holding the lock
	outcomeLost     = adapt.OutcomeLost     // the handler ran, and the lock was lost meanwhile
	outcomeBusy     = adapt.OutcomeBusy     // held by another call: codes.Aborted
	outcomeTimeout  = adapt.OutcomeTimeout  // the call ended while waiting: codes.Canceled or DeadlineExceeded
	outcomeInvalid  = adapt.OutcomeInvalid  // no usable key: codes.InvalidArgument (or Internal)
	outcomeError    = adapt.OutcomeError    // the store unavailable or locker closed: codes.Unavailable
)

// UnaryServerInterceptor returns an interceptor that runs each selected
// unary call while holding the lock named by key (see KeyFunc, Selector).
//
//   - The handler gets the lease context: it carries the call's values and
//     deadline, and is cancelled if the lock is lost. The lock is released
//     when the handler returns, also when it panics.
//   - A busy lock fails the call with codes.Aborted, an
//     errdetails.RetryInfo and a grpc-retry-pushback-ms trailer carrying
//     the expected wait (see the package documentation); with WithWait the
//     call waits instead, at most until its deadline.
//   - The store unavailable (or the Locker closed) gives codes.Unavailable; a
//     missing or invalid key gives codes.InvalidArgument; a call cancelled
//     or timed out while waiting gives codes.Canceled or DeadlineExceeded.
//     Clients get fixed messages; causes go to the span and the log.
//   - If the lock was lost and the handler returned a plain (non-status)
//     error, such as the context's, the call fails with codes.Aborted.
//   - Calls the selector leaves out go straight to the handler without
//     touching the store.
//
// It panics when the server is built if locker or key is nil or an option
// is invalid (see each option; the panic's error matches
// lockmw.ErrInvalidOption). Nil options are skipped.
func UnaryServerInterceptor(locker *lockmw.Locker, key KeyFunc, opts ...Option) grpc.UnaryServerInterceptor {
	in := newInterceptor("grpclock.UnaryServerInterceptor", locker, key, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (_ any, err error) {
		tmpl, locked := in.cfg.selector(info.FullMethod)
		if !locked {
			return handler(ctx, req)
		}
		call, err := in.lock(ctx, info.FullMethod, tmpl, req, func(md metadata.MD) { _ = grpc.SetTrailer(ctx, md) })
		if err != nil {
			return nil, err
		}
		defer func() { err = call.finish(err) }()
		return handler(call.lease.Context(), req)
	}
}

// StreamServerInterceptor returns an interceptor that runs each selected
// stream while holding the lock named by key, with the same guarantees and
// status codes as UnaryServerInterceptor; the handler's stream.Context() is
// the lease context.
//
// A stream's key comes from the call (Metadata, or a KeyFunc reading ctx:
// req is nil), or, with WithFirstMessage, from its first message, which is
// received before the lock is taken and re-delivered to the handler's first
// RecvMsg. A client-streaming or bidirectional stream that ends before its
// first message fails with codes.InvalidArgument. On a server-streaming
// method gRPC itself answers codes.Internal ("cardinality violation: received
// no request message") the moment the message is found missing, before any
// interceptor can answer; the lock is not taken and the handler does not
// run.
func StreamServerInterceptor(locker *lockmw.Locker, key KeyFunc, opts ...Option) grpc.StreamServerInterceptor {
	in := newInterceptor("grpclock.StreamServerInterceptor", locker, key, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		tmpl, locked := in.cfg.selector(info.FullMethod)
		if !locked {
			return handler(srv, ss)
		}
		var first any
		if in.cfg.newFirst != nil {
			first = in.cfg.newFirst(info.FullMethod)
			if err := ss.RecvMsg(first); err != nil {
				if errors.Is(err, io.EOF) {
					return status.Error(codes.InvalidArgument, msgNoFirstMessage)
				}
				return err
			}
		}
		call, err := in.lock(ss.Context(), info.FullMethod, tmpl, first, ss.SetTrailer)
		if err != nil {
			return err
		}
		defer func() { err = call.finish(err) }()
		return handler(srv, &lockedStream{ServerStream: ss, ctx: call.lease.Context(), first: first, in: in, method: info.FullMethod})
	}
}

// lockedStream is the handler's view of a locked stream: the lease context,
// and the peeked first message delivered again.
type lockedStream struct {
	grpc.ServerStream
	ctx    context.Context
	first  any // nil once delivered
	in     *interceptor
	method string
}

func (s *lockedStream) Context() context.Context { return s.ctx }

// RecvMsg delivers the peeked first message, then reads from the stream.
// gRPC forbids concurrent RecvMsg calls, so no lock is needed.
func (s *lockedStream) RecvMsg(m any) error {
	if s.first == nil {
		return s.ServerStream.RecvMsg(m)
	}
	first := s.first
	s.first = nil
	if err := redeliver(m, first); err != nil {
		return s.in.misconfigured(s.ctx, s.method, err)
	}
	return nil
}

// redeliver copies the peeked message src into the handler's message dst.
func redeliver(dst, src any) error {
	if dm, ok := dst.(proto.Message); ok {
		if sm, ok := src.(proto.Message); ok &&
			dm.ProtoReflect().Descriptor().FullName() == sm.ProtoReflect().Descriptor().FullName() {
			proto.Reset(dm)
			proto.Merge(dm, sm)
			return nil
		}
	} else if dv, sv := reflect.ValueOf(dst), reflect.ValueOf(src); dv.IsValid() && sv.IsValid() && dv.Type() == sv.Type() &&
		dv.Kind() == reflect.Pointer && !dv.IsNil() && !sv.IsNil() {
		dv.Elem().Set(sv.Elem())
		return nil
	}
	return fmt.Errorf("%w: the handler receives %T but WithFirstMessage made %T; make them the same type", ErrMisconfigured, dst, src)
}

type interceptor struct {
	locker *lockmw.Locker
	key    KeyFunc
	cfg    *config
	tracer trace.Tracer
	calls  metric.Int64Counter
	holds  *adapt.Holds // hold durations by lock name, for RetryInfo
	// setupLogged holds the methods whose store-not-set-up error was
	// logged.
	setupLogged sync.Map
}

func newInterceptor(what string, locker *lockmw.Locker, key KeyFunc, opts []Option) *interceptor {
	cfg, err := newConfig(opts)
	adapt.MustSetup(what, locker == nil, key == nil, err)
	tracer, meter := adapt.Instruments(ScopeName, cfg.tp, cfg.mp)
	return &interceptor{locker: locker, key: key, cfg: cfg, tracer: tracer, holds: adapt.NewHolds(locker),
		calls: adapt.Counter(meter, "grpclock.calls", "{call}", "Locked gRPC calls, by lock.name and lock.outcome.")}
}

// lockedCall is one call holding its lock.
type lockedCall struct {
	in         *interceptor
	callCtx    context.Context // the call's own context, under the span
	lease      *lockmw.Lease
	span       trace.Span
	name       string
	acquiredAt time.Time
	hold       *adapt.Hold
}

// Messages sent to clients: stable, and free of server internals (addresses,
// configuration advice), which go to the span and the log instead.
const (
	msgMissingKey     = "grpclock: the call carries no lock key"
	msgInvalidKey     = "grpclock: the call's lock key is invalid"
	msgNoFirstMessage = "grpclock: the stream ended before its first message, which carries the lock key"
	msgUnavailable    = "grpclock: the lock service is unavailable; retry later"
	msgMisconfigured  = "grpclock: the server is misconfigured for this method"
	msgStoreSetup     = "grpclock: the server's lock store is not set up"
	msgLost           = "grpclock: the lock was lost while the call ran; its effect is unknown"
)

// retryPushbackKey is the trailer through which gRPC's retry policy takes
// the server's retry delay, in milliseconds.
const retryPushbackKey = "grpc-retry-pushback-ms"

// lock starts the call's span, finds its key and takes the lock. On
// failure the span is ended and the error is a gRPC status; a busy call's
// retry delay also goes to setTrailer.
func (in *interceptor) lock(ctx context.Context, method, tmpl string, req any, setTrailer func(metadata.MD)) (*lockedCall, error) {
	name := tmpl
	if name == "" {
		name = method
	}
	ctx, span := in.tracer.Start(ctx, SpanName, trace.WithAttributes(adapt.AttrName.String(name)))
	template, err := parseTemplate(tmpl)
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrMisconfigured, err)
		return nil, in.fail(ctx, span, name, outcomeInvalid, in.misconfigured(ctx, method, err), err)
	}
	id, err := in.key(ctx, method, req)
	if err == nil {
		if id == "" {
			err = fmt.Errorf("%w: %s: the key is empty", ErrMissingKey, method)
		} else if cerr := adapt.CheckID("the lock key", id); cerr != nil {
			err = fmt.Errorf("%s: %w", method, cerr)
		}
	}
	if err != nil {
		if errors.Is(err, ErrMisconfigured) {
			return nil, in.fail(ctx, span, name, outcomeInvalid, in.misconfigured(ctx, method, err), err)
		}
		st := err
		if _, isStatus := status.FromError(err); !isStatus {
			msg := msgInvalidKey
			if errors.Is(err, ErrMissingKey) {
				msg = msgMissingKey
			}
			st = status.Error(codes.InvalidArgument, msg)
			in.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "grpclock: call refused: no usable lock key",
				slog.String("method", method), slog.Any("error", err))
		}
		return nil, in.fail(ctx, span, name, outcomeInvalid, st, err)
	}
	key := template.Key(id)

	start := time.Now()
	var lease *lockmw.Lease
	if in.cfg.wait > 0 {
		lease, err = in.locker.Acquire(ctx, key, lockmw.WithWait(in.cfg.wait), lockmw.WithName(name))
	} else {
		lease, err = in.locker.TryAcquire(ctx, key, lockmw.WithName(name))
	}
	acquiredAt := time.Now()
	span.SetAttributes(adapt.AttrWaitMS.Int64(acquiredAt.Sub(start).Milliseconds()))
	hold := in.holds.For(name)
	if err != nil {
		if in.cfg.holderInBusy && adapt.AcquireOutcome(ctx, err) == outcomeBusy {
			err = adapt.WithHolder(ctx, in.locker, key, err)
		}
		outcome, st := acquireStatus(ctx, key, err, hold)
		if outcome == outcomeBusy {
			if d, ok := retryDelayOf(st); ok {
				setTrailer(metadata.Pairs(retryPushbackKey, strconv.FormatInt(max(1, d.Milliseconds()), 10)))
			}
		}
		switch {
		case outcome == outcomeError && errors.Is(err, lockmw.ErrStoreSetup):
			// A setup mistake, not an outage: Internal, logged once.
			if _, logged := in.setupLogged.LoadOrStore(method, struct{}{}); !logged {
				in.cfg.logger.LogAttrs(ctx, slog.LevelError, "grpclock: the lock store is not set up; every call to the method is answered Internal until it is (logged once per method)",
					slog.String("method", method), slog.Any("error", err))
			}
		case outcome == outcomeError:
			in.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "grpclock: lock unavailable",
				slog.String("method", method), slog.String("key", key), slog.Any("error", err))
		case outcome == outcomeInvalid:
			in.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "grpclock: call refused: no usable lock key",
				slog.String("method", method), slog.Any("error", err))
		}
		return nil, in.fail(ctx, span, name, outcome, st, err)
	}
	span.SetAttributes(adapt.AttrFence.Int64(int64(lease.Fence())))
	return &lockedCall{in: in, callCtx: ctx, lease: lease, span: span, name: name, acquiredAt: acquiredAt, hold: hold}, nil
}

// misconfigured logs a setup mistake and returns the status the client
// gets for it.
func (in *interceptor) misconfigured(ctx context.Context, method string, err error) error {
	in.cfg.logger.LogAttrs(ctx, slog.LevelError, "grpclock: interceptor misconfigured for method",
		slog.String("method", method), slog.Any("error", err))
	return status.Error(codes.Internal, msgMisconfigured)
}

// acquireStatus maps a failed acquisition to its outcome
// (adapt.AcquireOutcome) and a gRPC status. A busy call's RetryInfo is the
// expected wait (see adapt.Hold.Wait).
func acquireStatus(ctx context.Context, key string, err error, hold *adapt.Hold) (string, error) {
	outcome := adapt.AcquireOutcome(ctx, err)
	switch outcome {
	case outcomeBusy:
		st := status.New(codes.Aborted, fmt.Sprintf("grpclock: lock %q is held by another call; retry later", key))
		if d, ok := hold.Wait(lockmw.RetryAfter(err)); ok && d > 0 {
			if withInfo, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)}); derr == nil {
				st = withInfo
			}
		}
		if holder, ok := adapt.HolderOf(err); ok {
			info := &errdetails.ErrorInfo{Reason: "LOCK_HELD", Domain: "lockmw", Metadata: map[string]string{"holder": holder}}
			if withInfo, derr := st.WithDetails(info); derr == nil {
				st = withInfo
			}
		}
		return outcome, st.Err()
	case outcomeTimeout:
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return outcome, status.FromContextError(err).Err()
	case outcomeInvalid:
		return outcome, status.Error(codes.InvalidArgument, msgInvalidKey)
	default: // lockmw.ErrUnavailable, lockmw.ErrClosed, lockmw.ErrStoreSetup
		if errors.Is(err, lockmw.ErrStoreSetup) {
			return outcome, status.Error(codes.Internal, msgStoreSetup)
		}
		return outcome, status.Error(codes.Unavailable, msgUnavailable)
	}
}

// retryDelayOf returns the RetryInfo delay of a status error.
func retryDelayOf(err error) (time.Duration, bool) {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// fail records a call that did not get its lock, with cause (which the
// client does not see) on the span, and ends the span. Busy and cancelled
// calls are normal outcomes, not span errors.
func (in *interceptor) fail(ctx context.Context, span trace.Span, name, outcome string, st, cause error) error {
	span.SetAttributes(adapt.AttrOutcome.String(outcome))
	switch outcome {
	case outcomeBusy:
	case outcomeError:
		span.RecordError(cause)
		span.SetStatus(otelcodes.Error, cause.Error())
	default:
		span.RecordError(cause)
		if errors.Is(cause, ErrMisconfigured) {
			span.SetStatus(otelcodes.Error, cause.Error())
		}
	}
	in.calls.Add(ctx, 1, metric.WithAttributes(adapt.AttrName.String(name), adapt.AttrOutcome.String(outcome)))
	span.End()
	return st
}

// finish releases the lock after the handler returned (or panicked), ends
// the span, and turns a plain error from a handler whose lock was lost into
// codes.Aborted.
func (c *lockedCall) finish(handlerErr error) error {
	cause := context.Cause(c.lease.Context())
	lost := errors.Is(cause, lockmw.ErrLost)
	relErr := c.lease.Release(context.WithoutCancel(c.callCtx))
	c.hold.Observe(time.Since(c.acquiredAt))
	if errors.Is(relErr, lockmw.ErrLost) && !lost {
		lost, cause = true, relErr
	}
	outcome := outcomeAcquired
	if lost {
		outcome = outcomeLost
		c.span.RecordError(cause)
		c.span.SetStatus(otelcodes.Error, cause.Error())
		c.in.cfg.logger.LogAttrs(c.callCtx, slog.LevelWarn, "grpclock: lock lost while the call ran",
			slog.String("lock.name", c.name), slog.String("key", c.lease.Key()), slog.Any("cause", cause))
		if _, isStatus := status.FromError(handlerErr); handlerErr != nil && !isStatus {
			handlerErr = status.Error(codes.Aborted, msgLost)
		}
	} else if relErr != nil {
		c.span.RecordError(relErr) // the lock expires after its TTL
	}
	c.span.SetAttributes(adapt.AttrOutcome.String(outcome))
	c.in.calls.Add(c.callCtx, 1, metric.WithAttributes(adapt.AttrName.String(c.name), adapt.AttrOutcome.String(outcome)))
	c.span.End()
	return handlerErr
}
