package grpclock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/lockmw/lockmw/grpclock"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// The test service speaks JSON (no generated code): Buy is unary, Orders is
// a bidirectional stream answering each order message, Ping is never locked.
const (
	methodBuy    = "/test.Shop/Buy"
	methodOrders = "/test.Shop/Orders"
	methodPing   = "/test.Shop/Ping"
	methodWatch  = "/test.Shop/Watch" // server-streaming: one order in, replies out
)

type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
func (jsonCodec) Name() string                       { return "json" }

func init() { encoding.RegisterCodec(jsonCodec{}) }

// order is the request and reply message. Its LockKey makes it a
// grpclock.Keyer; GetItem is its field getter.
type order struct {
	Item string `json:"item"`
	Note string `json:"note,omitempty"`
}

func (o *order) LockKey() string { return o.Item }
func (o *order) GetItem() string { return o.Item }

// buyFunc is the business logic behind both Buy and Orders.
type buyFunc func(ctx context.Context, o *order) (*order, error)

func shopDesc(buy buyFunc) *grpc.ServiceDesc {
	unary := func(name string, fn buyFunc) grpc.MethodDesc {
		return grpc.MethodDesc{MethodName: name, Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			req := new(order)
			if err := dec(req); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) { return fn(ctx, req.(*order)) }
			if ic == nil {
				return h(ctx, req)
			}
			return ic(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/test.Shop/" + name}, h)
		}}
	}
	return &grpc.ServiceDesc{
		ServiceName: "test.Shop",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			unary("Buy", buy),
			unary("Ping", func(ctx context.Context, o *order) (*order, error) { return o, nil }),
		},
		Streams: []grpc.StreamDesc{{
			StreamName:    "Watch",
			ServerStreams: true,
			Handler: func(_ any, stream grpc.ServerStream) error {
				o := new(order)
				if err := stream.RecvMsg(o); err != nil {
					return err
				}
				reply, err := buy(stream.Context(), o)
				if err != nil {
					return err
				}
				return stream.SendMsg(reply)
			},
		}, {
			StreamName:    "Orders",
			ServerStreams: true,
			ClientStreams: true,
			Handler: func(_ any, stream grpc.ServerStream) error {
				for {
					o := new(order)
					if err := stream.RecvMsg(o); errors.Is(err, io.EOF) {
						return nil
					} else if err != nil {
						return err
					}
					reply, err := buy(stream.Context(), o)
					if err != nil {
						return err
					}
					if err := stream.SendMsg(reply); err != nil {
						return err
					}
				}
			},
		}},
	}
}

var (
	ordersDesc = &grpc.StreamDesc{StreamName: "Orders", ServerStreams: true, ClientStreams: true}
	watchDesc  = &grpc.StreamDesc{StreamName: "Watch", ServerStreams: true}
)

// server is what serve builds: one service instance.
type server struct {
	key       grpclock.KeyFunc // default grpclock.FromRequest()
	opts      []grpclock.Option
	streamOps []grpclock.Option // extra options for the stream interceptor; default WithFirstMessage(new order)
	stats     stats.Handler
}

// serve starts the test service on a bufconn listener with both grpclock
// interceptors (behind a panic recovery interceptor, as production servers
// have) and returns a client connection to it.
func serve(t *testing.T, locker *lockmw.Locker, buy buyFunc, s server) *grpc.ClientConn {
	t.Helper()
	if s.key == nil {
		s.key = grpclock.FromRequest()
	}
	if s.streamOps == nil {
		s.streamOps = []grpclock.Option{grpclock.WithFirstMessage(func(string) any { return new(order) })}
	}
	streamOpts := append(append([]grpclock.Option{}, s.opts...), s.streamOps...)
	sopts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(recoverUnary, grpclock.UnaryServerInterceptor(locker, s.key, s.opts...)),
		grpc.ChainStreamInterceptor(recoverStream, grpclock.StreamServerInterceptor(locker, s.key, streamOpts...)),
	}
	if s.stats != nil {
		sopts = append(sopts, grpc.StatsHandler(s.stats))
	}
	srv := grpc.NewServer(sopts...)
	srv.RegisterService(shopDesc(buy), nil)
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype("json")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(); srv.Stop() })
	return conn
}

func recoverUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (_ any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = status.Errorf(codes.Internal, "panic: %v", r)
		}
	}()
	return h(ctx, req)
}

func recoverStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = status.Errorf(codes.Internal, "panic: %v", r)
		}
	}()
	return h(srv, ss)
}

// kinds are the two ways every test calls the shop: unary Buy, and an
// Orders stream carrying one order.
var kinds = []string{"unary", "stream"}

// call sends o by kind and returns the reply.
func call(ctx context.Context, conn *grpc.ClientConn, kind string, o *order) (*order, error) {
	reply := new(order)
	if kind == "unary" {
		return reply, conn.Invoke(ctx, methodBuy, o, reply)
	}
	stream, err := conn.NewStream(ctx, ordersDesc, methodOrders)
	if err != nil {
		return nil, err
	}
	if err := stream.SendMsg(o); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if err := stream.CloseSend(); err != nil {
		return nil, err
	}
	if err := stream.RecvMsg(reply); err != nil {
		return nil, err
	}
	if err := stream.RecvMsg(new(order)); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("stream did not end after one reply: %v", err)
	}
	return reply, nil
}

// newLocker and newLockerOn return a Locker closed at cleanup.
var (
	newLocker   = lockmwtest.NewLocker
	newLockerOn = lockmwtest.NewLockerOn
)

// fastFailing makes a client give up quickly on a dead or frozen server.
func fastFailing(o *redis.Options) {
	o.DialTimeout = 200 * time.Millisecond
	o.ReadTimeout = 200 * time.Millisecond
	o.WriteTimeout = 200 * time.Millisecond
	o.MaxRetries = -1
}

// wantCode fails the test unless err is a gRPC status with code want.
func wantCode(t testing.TB, err error, want codes.Code) *status.Status {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != want {
		t.Fatalf("error = %v, want code %v", err, want)
	}
	return st
}

// lockHeld reports whether Redis holds the lock key (default prefix).
func lockHeld(t testing.TB, rdb *redis.Client, key string) bool {
	t.Helper()
	n, err := rdb.Exists(context.Background(), lockmw.DefaultPrefix+"{"+key+"}").Result()
	if err != nil {
		t.Fatalf("EXISTS: %v", err)
	}
	return n == 1
}

// lockCommands counts the commands srv has run, leaving out the ones any
// client (and Info itself) sends and CONFIG (the Locker's one background
// maxmemory-policy check, which starts a second after New and can land in
// the middle of a test on a loaded machine): what is left is lock traffic.
func lockCommands(t testing.TB, srv *redistest.Server) int {
	t.Helper()
	total := 0
	for name, val := range srv.Info(t, "commandstats") {
		// Redis 7 counts subcommands apart: cmdstat_config|get.
		cmd, _, _ := strings.Cut(name, "|")
		switch cmd {
		case "cmdstat_info", "cmdstat_hello", "cmdstat_client", "cmdstat_ping", "cmdstat_config":
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(val, "calls="), ",")
		n, err := strconv.Atoi(calls)
		if err != nil {
			t.Fatalf("%s: cannot parse %q", name, val)
		}
		total += n
	}
	return total
}

// withMD adds one metadata pair to ctx.
func withMD(ctx context.Context, kv ...string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// waitFor receives from ch, failing the test after limit.
func waitFor[T any](t testing.TB, ch <-chan T, limit time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(limit):
		t.Fatalf("%s: nothing after %v", what, limit)
		var zero T
		return zero
	}
}
