package grpclock_test

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/lockmw/lockmw/grpclock"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// The tests in this file follow calls as clients meet them.

// Clients get stable messages that reveal nothing of the server: no Redis
// address, no lockmw error text, no configuration advice. The cause is in
// the span and the log.
func TestClientMessagesAreSafe(t *testing.T) {
	srv := redistest.Start(t)
	var logs lockmwtest.SyncBuffer
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	locker := newLockerOn(t, srv.Client(t, fastFailing))
	opts := []grpclock.Option{itemMethods, grpclock.WithTracerProvider(tp), grpclock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))}
	conn := serve(t, locker, func(ctx context.Context, o *order) (*order, error) { return o, nil }, server{opts: opts})
	leaks := []string{"127.0.0.1", "tcp", "lockmw", "hash long keys", "timeout", "refused"}
	check := func(t *testing.T, err error, want codes.Code, causeInLog string) {
		t.Helper()
		st := wantCode(t, err, want)
		for _, leak := range leaks {
			if strings.Contains(st.Message(), leak) {
				t.Errorf("message %q reveals %q", st.Message(), leak)
			}
		}
		if !strings.Contains(logs.String(), causeInLog) {
			t.Errorf("the log does not keep the cause %q: %s", causeInLog, logs.String())
		}
		spans := sr.Ended()
		if last := spans[len(spans)-1]; len(last.Events()) == 0 {
			t.Errorf("span %s records no error event", last.Name())
		}
	}
	for _, kind := range kinds {
		t.Run("invalid/"+kind, func(t *testing.T) {
			_, err := call(t.Context(), conn, kind, &order{Item: strings.Repeat("k", lockmw.MaxKeyLen)})
			check(t, err, codes.InvalidArgument, "hash long keys")
		})
	}
	srv.Kill(t)
	for _, kind := range kinds {
		t.Run("unavailable/"+kind, func(t *testing.T) {
			_, err := call(t.Context(), conn, kind, &order{Item: "1"})
			check(t, err, codes.Unavailable, "127.0.0.1")
		})
	}
}

// RetryInfo and the grpc-retry-pushback-ms trailer carry the expected wait,
// estimated from how long the lock's holds take, not the holder's TTL:
// after quick calls, a call that finds the lock with about 30 s of lease
// left is told to retry sooner than the longest of those calls. The TTL is
// long so that quick calls slowed down by a loaded machine still tell the
// estimate from the lease.
func TestRetryDelayEstimatesTheWait(t *testing.T) {
	const ttl = 30 * time.Second
	srv := redistest.Start(t)
	locker := newLocker(t, srv, lockmw.WithTTL(ttl))
	entered, release := make(chan struct{}, 1), make(chan struct{})
	conn := serve(t, locker, func(ctx context.Context, o *order) (*order, error) {
		if o.Note == "slow" {
			entered <- struct{}{}
			<-release
		}
		return o, nil
	}, server{opts: []grpclock.Option{itemMethods}})
	var longest time.Duration // bounds every hold the interceptor observed
	for range 5 {
		start := time.Now()
		if _, err := call(t.Context(), conn, "unary", &order{Item: "r"}); err != nil {
			t.Fatal(err)
		}
		longest = max(longest, time.Since(start))
	}
	if longest >= ttl*2/3 {
		t.Fatalf("the quick calls took up to %v: stuck (and too slow to tell the estimate from the %v TTL)", longest, ttl)
	}
	slow := make(chan error, 1)
	go func() {
		_, err := call(context.Background(), conn, "unary", &order{Item: "r", Note: "slow"})
		slow <- err
	}()
	<-entered
	defer func() { close(release); <-slow }()

	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			var trailer metadata.MD
			var err error
			if kind == "unary" {
				err = conn.Invoke(t.Context(), methodBuy, &order{Item: "r"}, new(order), grpc.Trailer(&trailer))
			} else {
				var stream grpc.ClientStream
				if stream, err = conn.NewStream(t.Context(), ordersDesc, methodOrders); err != nil {
					t.Fatal(err)
				}
				_ = stream.SendMsg(&order{Item: "r"})
				_ = stream.CloseSend()
				err = stream.RecvMsg(new(order))
				trailer = stream.Trailer()
			}
			delay := retryDelay(t, wantCode(t, err, codes.Aborted))
			if delay <= 0 || delay > longest {
				t.Errorf("RetryInfo delay %v, want in (0, %v], the longest hold, not the %v lease", delay, longest, ttl)
			}
			ms, perr := strconv.Atoi(strings.Join(trailer.Get("grpc-retry-pushback-ms"), ","))
			if perr != nil || time.Duration(ms)*time.Millisecond > max(delay, time.Millisecond) || ms < 1 {
				t.Errorf("grpc-retry-pushback-ms = %q, want the RetryInfo delay %v in whole milliseconds", trailer.Get("grpc-retry-pushback-ms"), delay)
			}
		})
	}
}

// A stream that ends before the first message that carries its key: on a
// bidirectional (or client-streaming) method the client gets
// InvalidArgument; on a server-streaming method grpc-go has already sent
// Internal "cardinality violation" from inside RecvMsg, before the
// interceptor can answer, as documented. The handler never runs.
func TestServerStreamWithoutItsMessage(t *testing.T) {
	srv := redistest.Start(t)
	ran := make(chan string, 4)
	conn := serve(t, newLocker(t, srv), func(ctx context.Context, o *order) (*order, error) {
		ran <- o.Item
		return o, nil
	}, server{opts: []grpclock.Option{grpclock.WithMethods(map[string]string{methodWatch: "item:{id}", methodOrders: "item:{id}"})}})
	stream, err := conn.NewStream(t.Context(), watchDesc, methodWatch)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if st := wantCode(t, stream.RecvMsg(new(order)), codes.Internal); !strings.Contains(st.Message(), "cardinality violation") {
		t.Errorf("server-streaming: %v, want grpc-go's cardinality violation", st)
	}

	bidi, err := conn.NewStream(t.Context(), ordersDesc, methodOrders)
	if err != nil {
		t.Fatal(err)
	}
	if err := bidi.CloseSend(); err != nil {
		t.Fatal(err)
	}
	wantCode(t, bidi.RecvMsg(new(order)), codes.InvalidArgument)

	// With its message, the call runs.
	if stream, err = conn.NewStream(t.Context(), watchDesc, methodWatch); err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg(&order{Item: "w"}); err != nil {
		t.Fatal(err)
	}
	_ = stream.CloseSend()
	if err := stream.RecvMsg(new(order)); err != nil {
		t.Fatal(err)
	}
	close(ran)
	if got := strings.Join(slices.Collect(chanValues(ran)), ","); got != "w" {
		t.Errorf("handler ran for %q, want only the stream with its message (w)", got)
	}
}

func chanValues[T any](ch <-chan T) func(func(T) bool) {
	return func(yield func(T) bool) {
		for v := range ch {
			if !yield(v) {
				return
			}
		}
	}
}
