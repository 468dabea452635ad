package grpclock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockmw/lockmw/lockmw"
)

// ScopeName is the instrumentation scope of grpclock's tracer and meter:
// the package import path.
const ScopeName = "github.com/lockmw/lockmw/grpclock"

// SpanName is the name of the span grpclock starts for every locked call.
const SpanName = "grpclock.lock"

const (
	attrName    = attribute.Key("lock.name")
	attrOutcome = attribute.Key("lock.outcome")
	attrWaitMS  = attribute.Key("lock.wait_ms")
	attrFence   = attribute.Key("lock.fence")
)

// Values of lock.outcome on grpclock spans and metrics.
const (
	outcomeAcquired = "acquired" // the handler ran holding the lock
	outcomeLost     = "lost"     // the handler ran, and the lock was lost meanwhile
	outcomeBusy     = "busy"     // held by another call: codes.Aborted
	outcomeTimeout  = "timeout"  // the call ended while waiting: codes.Canceled or DeadlineExceeded
	outcomeInvalid  = "invalid"  // no usable key: codes.InvalidArgument (or Internal)
	outcomeError    = "error"    // Redis unavailable or locker closed: codes.Unavailable
)

// UnaryServerInterceptor returns an interceptor that runs each selected
// unary call while holding the lock named by key (see KeyFunc, Selector).
//
//   - The handler gets the lease context: it carries the call's values and
//     deadline, and is cancelled if the lock is lost. The lock is released
//     when the handler returns, also when it panics.
//   - A busy lock fails the call with codes.Aborted and, when the holder's
//     remaining TTL is known, an errdetails.RetryInfo carrying it; with
//     WithWait the call waits instead, at most until its deadline.
//   - Redis unavailable (or the Locker closed) gives codes.Unavailable; a
//     missing or invalid key gives codes.InvalidArgument; a call cancelled
//     or timed out while waiting gives codes.Canceled or DeadlineExceeded.
//   - If the lock was lost and the handler returned a plain (non-status)
//     error, such as the context's, the call fails with codes.Aborted.
//   - Calls the selector leaves out go straight to the handler without
//     touching Redis.
//
// It panics on invalid options (see each option), when the server is built.
func UnaryServerInterceptor(locker *lockmw.Locker, key KeyFunc, opts ...Option) grpc.UnaryServerInterceptor {
	in := newInterceptor(locker, key, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (_ any, err error) {
		tmpl, locked := in.cfg.selector(info.FullMethod)
		if !locked {
			return handler(ctx, req)
		}
		call, err := in.lock(ctx, info.FullMethod, tmpl, req)
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
// RecvMsg. A stream that ends before its first message fails with
// codes.InvalidArgument.
func StreamServerInterceptor(locker *lockmw.Locker, key KeyFunc, opts ...Option) grpc.StreamServerInterceptor {
	in := newInterceptor(locker, key, opts)
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
					return status.Errorf(codes.InvalidArgument,
						"grpclock: %s: the stream ended before its first message, which carries the lock key", info.FullMethod)
				}
				return err
			}
		}
		call, err := in.lock(ss.Context(), info.FullMethod, tmpl, first)
		if err != nil {
			return err
		}
		defer func() { err = call.finish(err) }()
		return handler(srv, &lockedStream{ServerStream: ss, ctx: call.lease.Context(), first: first})
	}
}

// lockedStream is the handler's view of a locked stream: the lease context,
// and the peeked first message delivered again.
type lockedStream struct {
	grpc.ServerStream
	ctx   context.Context
	first any // nil once delivered
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
	return redeliver(m, first)
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
	return status.Errorf(codes.Internal,
		"grpclock: the handler receives %T but WithFirstMessage made %T; make them the same type", dst, src)
}

type interceptor struct {
	locker *lockmw.Locker
	key    KeyFunc
	cfg    *config
	tracer trace.Tracer
	calls  metric.Int64Counter
}

func newInterceptor(locker *lockmw.Locker, key KeyFunc, opts []Option) *interceptor {
	if locker == nil {
		panic("grpclock: nil *lockmw.Locker")
	}
	if key == nil {
		panic("grpclock: nil KeyFunc")
	}
	cfg := newConfig(opts)
	tp, mp := cfg.tp, cfg.mp
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	calls, err := mp.Meter(ScopeName).Int64Counter("grpclock.calls",
		metric.WithDescription("Locked gRPC calls, by lock.name and lock.outcome."),
		metric.WithUnit("{call}"))
	if err != nil {
		otel.Handle(err)
		calls, _ = noop.NewMeterProvider().Meter(ScopeName).Int64Counter("grpclock.calls")
	}
	return &interceptor{locker: locker, key: key, cfg: cfg, tracer: tp.Tracer(ScopeName), calls: calls}
}

// lockedCall is one call holding its lock.
type lockedCall struct {
	in      *interceptor
	callCtx context.Context // the call's own context, under the span
	lease   *lockmw.Lease
	span    trace.Span
	name    string
}

// lock starts the call's span, finds its key and takes the lock. On
// failure the span is ended and the error is a gRPC status.
func (in *interceptor) lock(ctx context.Context, method, tmpl string, req any) (*lockedCall, error) {
	name := tmpl
	if name == "" {
		name = method
	}
	ctx, span := in.tracer.Start(ctx, SpanName, trace.WithAttributes(attrName.String(name)))
	before, after, err := splitTemplate(tmpl)
	if err != nil {
		return nil, in.fail(ctx, span, name, outcomeInvalid, status.Errorf(codes.Internal, "grpclock: %s: %v", method, err))
	}
	id, err := in.key(ctx, method, req)
	if err == nil && id == "" {
		err = fmt.Errorf("%w: %s: the key is empty", ErrMissingKey, method)
	}
	if err != nil {
		if _, isStatus := status.FromError(err); !isStatus {
			if !errors.Is(err, ErrMissingKey) {
				err = fmt.Errorf("grpclock: %s: cannot find the lock key: %w", method, err)
			}
			err = status.Error(codes.InvalidArgument, err.Error())
		}
		return nil, in.fail(ctx, span, name, outcomeInvalid, err)
	}
	key := id
	if tmpl != "" {
		key = before + id + after
	}

	start := time.Now()
	var lease *lockmw.Lease
	if in.cfg.wait > 0 {
		lease, err = in.locker.Acquire(ctx, key, lockmw.WithWait(in.cfg.wait), lockmw.WithName(name))
	} else {
		lease, err = in.locker.TryAcquire(ctx, key, lockmw.WithName(name))
	}
	span.SetAttributes(attrWaitMS.Int64(time.Since(start).Milliseconds()))
	if err != nil {
		outcome, st := acquireStatus(ctx, method, key, err)
		return nil, in.fail(ctx, span, name, outcome, st)
	}
	span.SetAttributes(attrFence.Int64(int64(lease.Fence())))
	return &lockedCall{in: in, callCtx: ctx, lease: lease, span: span, name: name}, nil
}

// acquireStatus maps a failed acquisition to an outcome and a gRPC status.
func acquireStatus(ctx context.Context, method, key string, err error) (string, error) {
	switch {
	case errors.Is(err, lockmw.ErrNotAcquired):
		st := status.New(codes.Aborted, fmt.Sprintf("grpclock: %s: lock %q is held by another call; retry later", method, key))
		if d, ok := lockmw.RetryAfter(err); ok && d > 0 {
			st = status.New(codes.Aborted, fmt.Sprintf("grpclock: %s: lock %q is held by another call; retry in %v", method, key, d))
			if withInfo, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)}); derr == nil {
				st = withInfo
			}
		}
		return outcomeBusy, st.Err()
	case ctx.Err() != nil:
		return outcomeTimeout, status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, lockmw.ErrInvalidKey):
		return outcomeInvalid, status.Errorf(codes.InvalidArgument, "grpclock: %s: %v", method, err)
	case errors.Is(err, lockmw.ErrUnavailable), errors.Is(err, lockmw.ErrClosed):
		return outcomeError, status.Errorf(codes.Unavailable, "grpclock: %s: cannot take lock %q: %v", method, key, err)
	default:
		return outcomeError, status.Errorf(codes.Internal, "grpclock: %s: cannot take lock %q: %v", method, key, err)
	}
}

// fail records a call that did not get its lock and ends its span. Busy
// and cancelled calls are normal outcomes, not span errors.
func (in *interceptor) fail(ctx context.Context, span trace.Span, name, outcome string, err error) error {
	span.SetAttributes(attrOutcome.String(outcome))
	switch outcome {
	case outcomeBusy:
	case outcomeError:
		span.RecordError(err)
		span.SetStatus(otelcodes.Error, err.Error())
	default:
		span.RecordError(err)
	}
	in.calls.Add(ctx, 1, metric.WithAttributes(attrName.String(name), attrOutcome.String(outcome)))
	span.End()
	return err
}

// finish releases the lock after the handler returned (or panicked), ends
// the span, and turns a plain error from a handler whose lock was lost into
// codes.Aborted.
func (c *lockedCall) finish(handlerErr error) error {
	cause := context.Cause(c.lease.Context())
	lost := errors.Is(cause, lockmw.ErrLost)
	relErr := c.lease.Release(context.WithoutCancel(c.callCtx))
	if errors.Is(relErr, lockmw.ErrLost) && !lost {
		lost, cause = true, relErr
	}
	outcome := outcomeAcquired
	if lost {
		outcome = outcomeLost
		c.span.RecordError(cause)
		c.span.SetStatus(otelcodes.Error, cause.Error())
		if _, isStatus := status.FromError(handlerErr); handlerErr != nil && !isStatus {
			handlerErr = status.Errorf(codes.Aborted, "grpclock: lock %q was lost while the call ran: %v", c.lease.Key(), cause)
		}
	} else if relErr != nil {
		c.span.RecordError(relErr) // the lock expires after its TTL
	}
	c.span.SetAttributes(attrOutcome.String(outcome))
	c.in.calls.Add(c.callCtx, 1, metric.WithAttributes(attrName.String(c.name), attrOutcome.String(outcome)))
	c.span.End()
	return handlerErr
}
