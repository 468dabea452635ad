package grpclock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/lockmw/lockmw/grpclock"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

var itemMethods = grpclock.WithMethods(map[string]string{
	methodBuy:    "item:{id}",
	methodOrders: "item:{id}",
})

// The handler runs holding the lock, under the template-built key, with the
// lease context (reentrant for the same key, carrying the call's metadata),
// sees the request intact (a stream's peeked first message re-delivered),
// and the lock is released afterwards.
func TestAcquiredHandlerGetsLeaseContext(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	locker, other := newLocker(t, srv), newLocker(t, srv)
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			type seen struct {
				held, nested, otherBusy bool
				md                      []string
				note                    string
			}
			saw := make(chan seen, 1)
			conn := serve(t, locker, func(ctx context.Context, o *order) (*order, error) {
				var s seen
				s.held = lockHeld(t, rdb, "item:"+o.Item)
				if nested, err := locker.TryAcquire(ctx, "item:"+o.Item); err == nil {
					s.nested = true
					_ = nested.Release(ctx)
				}
				_, err := other.TryAcquire(context.Background(), "item:"+o.Item)
				s.otherBusy = errors.Is(err, lockmw.ErrNotAcquired)
				md, _ := metadata.FromIncomingContext(ctx)
				s.md = md.Get("x-client")
				s.note = o.Note
				saw <- s
				return &order{Item: o.Item, Note: "bought"}, nil
			}, server{opts: []grpclock.Option{itemMethods}})

			reply, err := call(withMD(t.Context(), "x-client", "c1"), conn, kind, &order{Item: "42", Note: "hello"})
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			s := waitFor(t, saw, 5*time.Second, "handler")
			if !s.held || !s.otherBusy {
				t.Errorf("in the handler: lock item:42 held in Redis = %v, busy for another Locker = %v; want both", s.held, s.otherBusy)
			}
			if !s.nested {
				t.Error("the handler's context is not the lease context: TryAcquire of the same key with it was not reentrant")
			}
			if len(s.md) != 1 || s.md[0] != "c1" || s.note != "hello" {
				t.Errorf("handler saw metadata %q and note %q, want [c1] and hello", s.md, s.note)
			}
			if reply.Note != "bought" {
				t.Errorf("reply = %+v", reply)
			}
			if lockHeld(t, rdb, "item:42") {
				t.Error("lock item:42 still held after the call")
			}
		})
	}
}

// A busy lock fails the call at once with Aborted and a RetryInfo carrying
// the holder's remaining lease time; the handler does not run.
func TestBusyIsAbortedWithRetryInfo(t *testing.T) {
	srv := redistest.Start(t)
	locker, holder := newLocker(t, srv), newLocker(t, srv)
	var ran atomic.Int32
	conn := serve(t, locker, func(ctx context.Context, o *order) (*order, error) {
		ran.Add(1)
		return o, nil
	}, server{opts: []grpclock.Option{itemMethods}})
	lease, err := holder.Acquire(t.Context(), "item:7")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Release(context.Background()) }()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			_, err := call(t.Context(), conn, kind, &order{Item: "7"})
			st := wantCode(t, err, codes.Aborted)
			if !strings.Contains(st.Message(), "item:7") {
				t.Errorf("message %q does not name the lock", st.Message())
			}
			delay := retryDelay(t, st)
			if delay <= 0 || delay > lockmw.DefaultTTL {
				t.Errorf("RetryInfo delay = %v, want in (0, %v]", delay, lockmw.DefaultTTL)
			}
		})
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("handler ran %d times for busy calls", n)
	}
}

func retryDelay(t testing.TB, st *status.Status) time.Duration {
	t.Helper()
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	t.Fatalf("status %v has no RetryInfo (details %v)", st, st.Details())
	return 0
}

// WithWait waits for the holder to go away; the wait ends with WithWait's
// bound (Aborted) or with the call's deadline (DeadlineExceeded).
func TestWithWait(t *testing.T) {
	srv := redistest.Start(t)
	locker, holder := newLocker(t, srv), newLocker(t, srv)
	for _, kind := range kinds {
		t.Run(kind+"/waits for the holder", func(t *testing.T) {
			start := time.Now()
			if _, err := holder.Acquire(t.Context(), "item:w-"+kind, lockmw.WithLeaseTTL(time.Second), lockmw.WithoutWatchdog()); err != nil {
				t.Fatal(err)
			}
			// The holder's key lives 1 s from when Redis set it, which was
			// after start: a handler that runs sooner did not wait for it.
			// (Asserting the holder's context had ended would test how
			// punctually a loaded machine fires its timers.)
			holderDone := make(chan bool, 1)
			conn := serve(t, locker, func(ctx context.Context, o *order) (*order, error) {
				holderDone <- time.Since(start) >= 990*time.Millisecond
				return o, nil
			}, server{opts: []grpclock.Option{itemMethods, grpclock.WithWait(time.Minute)}})
			if _, err := call(t.Context(), conn, kind, &order{Item: "w-" + kind}); err != nil {
				t.Fatalf("call: %v", err)
			}
			if !waitFor(t, holderDone, time.Second, "handler") {
				t.Error("the handler ran while the holder's lease was still live")
			}
		})
		t.Run(kind+"/wait runs out", func(t *testing.T) {
			lease, err := holder.Acquire(t.Context(), "item:x-"+kind)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = lease.Release(context.Background()) }()
			conn := serve(t, locker, func(ctx context.Context, o *order) (*order, error) {
				t.Error("handler ran while the lock was held")
				return o, nil
			}, server{opts: []grpclock.Option{itemMethods, grpclock.WithWait(300 * time.Millisecond)}})
			_, err = call(t.Context(), conn, kind, &order{Item: "x-" + kind})
			if delay := retryDelay(t, wantCode(t, err, codes.Aborted)); delay <= 0 {
				t.Errorf("RetryInfo delay = %v, want > 0", delay)
			}
		})
	}
}

// A call whose deadline passes or that is cancelled while waiting ends with
// the matching code, at the server, and the handler does not run. The
// interceptors are called directly here, since a client sees its own
// deadline's code whatever the server answers.
func TestWaitEndsWithTheCall(t *testing.T) {
	srv := redistest.Start(t)
	locker, holder := newLocker(t, srv), newLocker(t, srv)
	lease, err := holder.Acquire(t.Context(), "item:busy")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Release(context.Background()) }()
	key := func(context.Context, string, any) (string, error) { return "busy", nil }
	opts := []grpclock.Option{grpclock.WithSelector(func(string) (string, bool) { return "item:{id}", true }), grpclock.WithWait(time.Minute)}
	unary := grpclock.UnaryServerInterceptor(locker, key, opts...)
	stream := grpclock.StreamServerInterceptor(locker, key, opts...)
	run := map[string]func(ctx context.Context) error{
		"unary": func(ctx context.Context) error {
			_, err := unary(ctx, &order{}, &grpc.UnaryServerInfo{FullMethod: methodBuy}, func(context.Context, any) (any, error) {
				t.Error("unary handler ran")
				return nil, nil
			})
			return err
		},
		"stream": func(ctx context.Context) error {
			return stream(nil, &fakeStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: methodOrders}, func(any, grpc.ServerStream) error {
				t.Error("stream handler ran")
				return nil
			})
		},
	}
	for _, kind := range kinds {
		t.Run(kind+"/deadline", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			wantCode(t, run[kind](ctx), codes.DeadlineExceeded)
		})
		t.Run(kind+"/cancel", func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(200*time.Millisecond, cancel)
			wantCode(t, run[kind](ctx), codes.Canceled)
		})
	}
}

// fakeStream is a server stream with no messages, for calling the stream
// interceptor directly.
type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *fakeStream) Context() context.Context { return s.ctx }

// Redis frozen or dead gives Unavailable, and the handler does not run;
// calls work again once Redis is back.
func TestRedisUnavailable(t *testing.T) {
	for _, fault := range []string{"paused", "killed"} {
		for _, kind := range kinds {
			t.Run(fault+"/"+kind, func(t *testing.T) {
				srv := redistest.Start(t)
				locker := newLockerOn(t, srv.Client(t, fastFailing))
				var ran atomic.Int32
				conn := serve(t, locker, func(ctx context.Context, o *order) (*order, error) {
					ran.Add(1)
					return o, nil
				}, server{opts: []grpclock.Option{itemMethods}})
				if fault == "paused" {
					srv.Pause(t)
				} else {
					srv.Kill(t)
				}
				_, err := call(t.Context(), conn, kind, &order{Item: "1"})
				wantCode(t, err, codes.Unavailable)
				if ran.Load() != 0 {
					t.Fatal("handler ran without the lock")
				}
				if fault == "paused" {
					srv.Resume(t)
				} else {
					srv.Restart(t)
				}
				deadline := time.Now().Add(5 * time.Second)
				for {
					if _, err = call(t.Context(), conn, kind, &order{Item: "1"}); err == nil || time.Now().After(deadline) {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				if err != nil || ran.Load() != 1 {
					t.Fatalf("after Redis came back: err = %v, handler ran %d times", err, ran.Load())
				}
			})
		}
	}
}

// Calls without a usable key fail with InvalidArgument (or the KeyFunc's
// own status, or Internal for a misconfigured getter) and send nothing to
// Redis.
func TestInvalidKey(t *testing.T) {
	srv := redistest.Start(t)
	locker := newLocker(t, srv)
	type other struct{ ID string }
	cases := []struct {
		name string
		key  grpclock.KeyFunc
		item string
		md   []string
		want codes.Code
	}{
		{"LockKey empty", grpclock.FromRequest(), "", nil, codes.InvalidArgument},
		{"getter empty", grpclock.Getter((*order).GetItem), "", nil, codes.InvalidArgument},
		{"metadata absent", grpclock.Metadata("X-Item"), "1", nil, codes.InvalidArgument},
		{"metadata empty", grpclock.Metadata("X-Item"), "1", []string{"x-item", ""}, codes.InvalidArgument},
		{"metadata twice", grpclock.Metadata("X-Item"), "1", []string{"x-item", "1", "x-item", "2"}, codes.InvalidArgument},
		{"func error", func(context.Context, string, any) (string, error) { return "", errors.New("no item in request") }, "1", nil, codes.InvalidArgument},
		{"func status", func(context.Context, string, any) (string, error) {
			return "", status.Error(codes.PermissionDenied, "not yours")
		}, "1", nil, codes.PermissionDenied},
		{"key too long", grpclock.FromRequest(), strings.Repeat("x", lockmw.MaxKeyLen+1), nil, codes.InvalidArgument},
		{"control character", grpclock.FromRequest(), "a\x01b", nil, codes.InvalidArgument}, // refused by ginlock too
		{"DEL character", grpclock.Getter((*order).GetItem), "a\x7f", nil, codes.InvalidArgument},
		{"getter of another type", grpclock.Getter(func(o *other) string { return o.ID }), "1", nil, codes.Internal},
	}
	before := lockCommands(t, srv)
	for _, tc := range cases {
		conn := serve(t, locker, func(ctx context.Context, o *order) (*order, error) {
			t.Errorf("%s: handler ran", tc.name)
			return o, nil
		}, server{key: tc.key, opts: []grpclock.Option{itemMethods}})
		for _, kind := range kinds {
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				_, err := call(withMD(t.Context(), tc.md...), conn, kind, &order{Item: tc.item})
				st := wantCode(t, err, tc.want)
				if tc.want == codes.InvalidArgument && !strings.Contains(st.Message(), "grpclock") {
					t.Errorf("message %q does not say where it comes from", st.Message())
				}
			})
		}
	}
	if after := lockCommands(t, srv); after != before {
		t.Errorf("calls without a usable key ran %d Redis commands", after-before)
	}
}

// A stream's key: from metadata without peeking, from its first message
// with WithFirstMessage; a stream ending before its first message, or a
// message getter without WithFirstMessage, is refused.
func TestStreamKeySources(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	locker := newLocker(t, srv)
	handled := make(chan string, 10)
	buy := func(ctx context.Context, o *order) (*order, error) {
		if lockHeld(t, rdb, "item:"+o.Item) {
			handled <- o.Item
		} else {
			handled <- "unlocked " + o.Item
		}
		return o, nil
	}
	noPeek := []grpclock.Option{} // non-nil: no WithFirstMessage

	t.Run("metadata", func(t *testing.T) {
		conn := serve(t, locker, buy, server{key: grpclock.Metadata("x-item"), opts: []grpclock.Option{itemMethods}, streamOps: noPeek})
		if _, err := call(withMD(t.Context(), "x-item", "5"), conn, "stream", &order{Item: "5"}); err != nil {
			t.Fatal(err)
		}
		if got := waitFor(t, handled, time.Second, "handler"); got != "5" {
			t.Errorf("handler saw %q, want 5 handled under lock item:5", got)
		}
	})
	t.Run("getter without WithFirstMessage", func(t *testing.T) {
		var logs lockmwtest.SyncBuffer
		conn := serve(t, locker, buy, server{key: grpclock.Getter((*order).GetItem),
			opts: []grpclock.Option{itemMethods, grpclock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))}, streamOps: noPeek})
		_, err := call(t.Context(), conn, "stream", &order{Item: "5"})
		if st := wantCode(t, err, codes.Internal); strings.Contains(st.Message(), "WithFirstMessage") || !strings.Contains(logs.String(), "WithFirstMessage") {
			t.Errorf("message %q, log %q: want the advice in the log, not sent to the client", st.Message(), logs.String())
		}
	})
	t.Run("no first message", func(t *testing.T) {
		conn := serve(t, locker, buy, server{opts: []grpclock.Option{itemMethods}})
		stream, err := conn.NewStream(t.Context(), ordersDesc, methodOrders)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		wantCode(t, stream.RecvMsg(new(order)), codes.InvalidArgument)
	})
	t.Run("first message of another type", func(t *testing.T) {
		type other struct{ Item string }
		conn := serve(t, locker, buy, server{key: grpclock.Getter(func(o *other) string { return o.Item }), opts: []grpclock.Option{itemMethods},
			streamOps: []grpclock.Option{grpclock.WithFirstMessage(func(string) any { return new(other) })}})
		_, err := call(t.Context(), conn, "stream", &order{Item: "5"})
		wantCode(t, err, codes.Internal)
	})
	select {
	case got := <-handled:
		t.Errorf("a refused stream reached the handler with %q", got)
	default:
	}
}

// Methods the selector leaves out run without the lock and without a
// single Redis command; a selected method on the same server does lock.
func TestUnselectedMethodsPassThrough(t *testing.T) {
	srv := redistest.Start(t)
	locker := newLocker(t, srv)
	onlyBuy := grpclock.WithMethods(map[string]string{methodBuy: "item:{id}"})
	conn := serve(t, locker, func(ctx context.Context, o *order) (*order, error) { return o, nil },
		server{key: grpclock.Metadata("x-item"), opts: []grpclock.Option{onlyBuy}})

	before := lockCommands(t, srv)
	// Ping (unary) and Orders (stream) are not selected: they pass without
	// a key, which a locked call would need.
	if err := conn.Invoke(t.Context(), methodPing, &order{}, new(order)); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if _, err := call(t.Context(), conn, "stream", &order{Item: "3"}); err != nil {
		t.Fatalf("Orders: %v", err)
	}
	if after := lockCommands(t, srv); after != before {
		t.Errorf("unselected calls ran %d Redis commands", after-before)
	}
	if _, err := call(withMD(t.Context(), "x-item", "3"), conn, "unary", &order{}); err != nil {
		t.Fatalf("Buy: %v", err)
	}
	if after := lockCommands(t, srv); after == before {
		t.Error("a locked call ran no Redis command: the check above proves nothing")
	}
}

// Concurrent calls on one item, through two server instances with their
// own Lockers and clients, never overlap in the handler: a non-atomic
// read-check-write sells exactly the stock.
func TestNoOverlapAcrossInstances(t *testing.T) {
	const calls, stock = 50, 30
	srv := redistest.Start(t)
	var (
		mu            sync.Mutex
		left          = stock // the "database": read and written in two steps
		inside, maxIn atomic.Int32
		sold, soldOut atomic.Int32
	)
	buy := func(ctx context.Context, o *order) (*order, error) {
		n := inside.Add(1)
		defer inside.Add(-1)
		for m := maxIn.Load(); n > m && !maxIn.CompareAndSwap(m, n); m = maxIn.Load() {
		}
		mu.Lock()
		have := left
		mu.Unlock()
		if have == 0 {
			soldOut.Add(1)
			return nil, status.Error(codes.FailedPrecondition, "sold out")
		}
		time.Sleep(time.Millisecond) // the work between read and write
		mu.Lock()
		left = have - 1
		mu.Unlock()
		sold.Add(1)
		return o, nil
	}
	opts := server{opts: []grpclock.Option{itemMethods, grpclock.WithWait(time.Minute)}}
	conns := []*grpc.ClientConn{serve(t, newLocker(t, srv), buy, opts), serve(t, newLocker(t, srv), buy, opts)}

	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := range calls {
		wg.Go(func() {
			_, err := call(t.Context(), conns[i%2], kinds[i/2%2], &order{Item: "hot"})
			if status.Code(err) != codes.OK && status.Code(err) != codes.FailedPrecondition {
				errs <- fmt.Errorf("call %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if maxIn.Load() != 1 {
		t.Errorf("up to %d calls were inside the handler at once, want 1", maxIn.Load())
	}
	if sold.Load() != stock || soldOut.Load() != calls-stock || left != 0 {
		t.Errorf("sold %d, sold out %d, stock left %d; want %d, %d, 0", sold.Load(), soldOut.Load(), left, stock, calls-stock)
	}
}

// Calls on different keys hold their locks at the same time.
func TestDifferentKeysRunInParallel(t *testing.T) {
	srv := redistest.Start(t)
	entered := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	conn := serve(t, newLocker(t, srv), func(ctx context.Context, o *order) (*order, error) {
		close(entered[o.Item])
		peer := map[string]string{"a": "b", "b": "a"}[o.Item]
		select {
		case <-entered[peer]:
			return o, nil
		case <-time.After(10 * time.Second):
			return nil, status.Errorf(codes.Internal, "item %s never entered while %s was held", peer, o.Item)
		}
	}, server{opts: []grpclock.Option{itemMethods}})
	errs := make(chan error, 2)
	go func() { _, err := call(t.Context(), conn, "unary", &order{Item: "a"}); errs <- err }()
	go func() { _, err := call(t.Context(), conn, "stream", &order{Item: "b"}); errs <- err }()
	for range 2 {
		if err := waitFor(t, errs, 15*time.Second, "call"); err != nil {
			t.Error(err)
		}
	}
}

// A lost lock cancels the handler's context with cause ErrLost, and the
// handler's context error becomes Aborted.
func TestLostLockCancelsHandler(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	locker := newLocker(t, srv, lockmw.WithTTL(300*time.Millisecond))
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			entered, cause := make(chan struct{}), make(chan error, 1)
			conn := serve(t, locker, func(ctx context.Context, o *order) (*order, error) {
				close(entered)
				select {
				case <-ctx.Done():
					cause <- context.Cause(ctx)
					return nil, ctx.Err()
				case <-time.After(10 * time.Second):
					cause <- nil
					return o, nil
				}
			}, server{opts: []grpclock.Option{itemMethods, grpclock.WithTracerProvider(tp)}})
			errc := make(chan error, 1)
			go func() { _, err := call(t.Context(), conn, kind, &order{Item: "lost"}); errc <- err }()
			waitFor(t, entered, 5*time.Second, "handler")
			if err := rdb.Del(t.Context(), lockmw.DefaultPrefix+"{item:lost}").Err(); err != nil {
				t.Fatal(err)
			}
			if c := waitFor(t, cause, 15*time.Second, "handler context"); !errors.Is(c, lockmw.ErrLost) {
				t.Fatalf("handler context ended with cause %v, want ErrLost", c)
			}
			st := wantCode(t, waitFor(t, errc, 5*time.Second, "call"), codes.Aborted)
			if !strings.Contains(st.Message(), "lost") {
				t.Errorf("message %q does not say the lock was lost", st.Message())
			}
			spans := sr.Ended()
			last := spans[len(spans)-1] // ended before the status was sent
			if outcome := attrMap(last.Attributes())["lock.outcome"].AsString(); last.Name() != grpclock.SpanName ||
				outcome != "lost" || last.Status().Code != otelcodes.Error {
				t.Errorf("last span %s: lock.outcome %q, status %v; want %s, lost, Error", last.Name(), outcome, last.Status(), grpclock.SpanName)
			}
		})
	}
}

// A panicking handler still releases its lock.
func TestPanicReleasesLock(t *testing.T) {
	srv := redistest.Start(t)
	locker, other := newLocker(t, srv), newLocker(t, srv)
	conn := serve(t, locker, func(ctx context.Context, o *order) (*order, error) {
		panic("handler bug")
	}, server{opts: []grpclock.Option{itemMethods}})
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			_, err := call(t.Context(), conn, kind, &order{Item: "p"})
			if st := wantCode(t, err, codes.Internal); !strings.Contains(st.Message(), "handler bug") {
				t.Fatalf("status %v: the panic did not reach the recovery interceptor", st)
			}
			lease, err := other.TryAcquire(t.Context(), "item:p")
			if err != nil {
				t.Fatalf("lock still held after the handler panicked: %v", err)
			}
			_ = lease.Release(t.Context())
		})
	}
}

// Bad name templates are refused: the interceptors panic when the server
// is built with WithMethods, a Selector's template fails the call with
// Internal.
func TestTemplates(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	locker := newLocker(t, srv)
	for _, tmpl := range []string{"order", "order:{id", "order:}id{", "{a}:{b}", "order:{{id}}", "x{}y"} {
		for kind, build := range map[string]func(){
			"unary": func() {
				grpclock.UnaryServerInterceptor(locker, grpclock.FromRequest(), grpclock.WithMethods(map[string]string{methodBuy: tmpl}))
			},
			"stream": func() {
				grpclock.StreamServerInterceptor(locker, grpclock.FromRequest(), grpclock.WithMethods(map[string]string{methodBuy: tmpl}))
			},
		} {
			func() {
				defer func() {
					if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "placeholder") {
						t.Errorf("%s interceptor, WithMethods(%q): panic %v, want one about the placeholder", kind, tmpl, r)
					}
				}()
				build()
			}()
		}
	}
	held := make(chan bool, 1)
	for _, tc := range []struct{ tmpl, key string }{{"", "9"}, {"item:{id}", "item:9"}, {"{x}/stock", "9/stock"}, {"shop:{item}:v1", "shop:9:v1"}} {
		conn := serve(t, locker, func(ctx context.Context, o *order) (*order, error) {
			held <- lockHeld(t, rdb, tc.key)
			return o, nil
		}, server{opts: []grpclock.Option{grpclock.WithSelector(func(string) (string, bool) { return tc.tmpl, true })}})
		if _, err := call(t.Context(), conn, "unary", &order{Item: "9"}); err != nil {
			t.Fatalf("template %q: %v", tc.tmpl, err)
		}
		if !<-held {
			t.Errorf("template %q: lock %q was not held in the handler", tc.tmpl, tc.key)
		}
	}
	conn := serve(t, locker, func(ctx context.Context, o *order) (*order, error) { return o, nil },
		server{opts: []grpclock.Option{grpclock.WithSelector(func(string) (string, bool) { return "no-placeholder", true })}})
	for _, kind := range kinds {
		_, err := call(t.Context(), conn, kind, &order{Item: "9"})
		wantCode(t, err, codes.Internal)
	}
	conn = serve(t, locker, func(ctx context.Context, o *order) (*order, error) { return o, nil },
		server{opts: []grpclock.Option{grpclock.WithSelector(func(string) (string, bool) { return "item:{}", true })}})
	_, err := call(t.Context(), conn, "unary", &order{Item: "9"})
	wantCode(t, err, codes.Internal)
}
