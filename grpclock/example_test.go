package grpclock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/lockmw/lockmw/grpclock"
	"github.com/lockmw/lockmw/lockmw"
)

// redisAddr is the Redis the examples use. TestMain points it at a
// redis-server of its own.
var redisAddr = "localhost:6379"

// Lock the Buy method per item: the item id comes from the request's
// generated getter (here a well-known type stands in for a generated
// message), the lock is "item:<id>" and is reported as "item:{id}".
// Other methods are not locked.
func ExampleUnaryServerInterceptor() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, // settings: see lockmw
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond,
		MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true, PipelinePoolSize: -1})
	defer client.Close()
	locker, err := lockmw.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	locked := grpclock.WithMethods(map[string]string{"/shop.Shop/Buy": "item:{id}"})
	buyLock := grpclock.UnaryServerInterceptor(locker, grpclock.Getter((*wrapperspb.StringValue).GetValue), locked)
	srv := grpc.NewServer(
		grpc.StatsHandler(otelgrpc.NewServerHandler()), // grpclock spans nest under these
		grpc.ChainUnaryInterceptor(buyLock),
	)
	defer srv.Stop()
	// register your services, then srv.Serve(lis)

	// The server passes each call through the interceptor; a call of Buy for
	// item 42 runs its handler holding item:42.
	info := &grpc.UnaryServerInfo{FullMethod: "/shop.Shop/Buy"}
	resp, err := buyLock(context.Background(), wrapperspb.String("42"), info,
		func(ctx context.Context, req any) (any, error) {
			// ctx is cancelled if the lock is lost.
			return wrapperspb.String("bought " + req.(*wrapperspb.StringValue).GetValue()), nil
		})
	fmt.Println(resp.(*wrapperspb.StringValue).GetValue(), err)
	// Output: bought 42 <nil>
}

// Streams take their key from metadata, or with WithFirstMessage from their
// first message, which the handler still receives. (Compiled, not run.)
func ExampleStreamServerInterceptor() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr}) // and the settings of ExampleUnaryServerInterceptor
	defer client.Close()
	locker, err := lockmw.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	byItem := grpclock.WithMethods(map[string]string{
		"/shop.Shop/Restock": "item:{id}", // client stream of quantities for one item
	})
	srv := grpc.NewServer(
		grpc.ChainStreamInterceptor(
			// Either the item id travels in the x-item-id metadata entry...
			grpclock.StreamServerInterceptor(locker, grpclock.Metadata("x-item-id"), byItem),
		),
	)
	_ = srv

	// ...or in the first message:
	_ = grpclock.StreamServerInterceptor(locker,
		grpclock.Getter((*wrapperspb.StringValue).GetValue), byItem,
		grpclock.WithFirstMessage(func(string) any { return new(wrapperspb.StringValue) }),
		grpclock.WithWait(2*time.Second), // wait a little for a busy item instead of failing at once
	)
}

// A KeyFunc can read anything the call carries; returning a status error
// chooses the code the caller gets.
func ExampleKeyFunc() {
	tenantOrder := grpclock.KeyFunc(func(ctx context.Context, fullMethod string, req any) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		tenant := md.Get("x-tenant")
		if len(tenant) != 1 {
			return "", status.Error(codes.Unauthenticated, "x-tenant missing")
		}
		order, ok := req.(interface{ GetValue() string })
		if !ok {
			return "", errors.New("not an order request")
		}
		return tenant[0] + "/" + order.GetValue(), nil
	})
	// grpclock.UnaryServerInterceptor(locker, tenantOrder, ...) calls it with
	// each call's context and request:
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-tenant", "acme"))
	fmt.Println(tenantOrder(ctx, "/shop.Shop/Cancel", wrapperspb.String("7")))
	_, err := tenantOrder(context.Background(), "/shop.Shop/Cancel", wrapperspb.String("7"))
	fmt.Println(status.Code(err))
	// Output:
	// acme/7 <nil>
	// Unauthenticated
}

// A client learns from a busy answer when to try again: the status is
// Aborted, with a RetryInfo detail. (Here the client's call is served
// in-process, by a server registered without generated code.)
func Example_retryInfo() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr}) // and the settings of ExampleUnaryServerInterceptor
	defer client.Close()
	locker, err := lockmw.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	// The server: Buy locked per item.
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(grpclock.UnaryServerInterceptor(locker,
		grpclock.Getter((*wrapperspb.StringValue).GetValue),
		grpclock.WithMethods(map[string]string{"/shop.Shop/Buy": "item:{id}"}))))
	srv.RegisterService(&grpc.ServiceDesc{ServiceName: "shop.Shop", HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Buy", Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			req := new(wrapperspb.StringValue)
			if err := dec(req); err != nil {
				return nil, err
			}
			buy := func(ctx context.Context, req any) (any, error) { return req, nil }
			return icpt(ctx, req, &grpc.UnaryServerInfo{FullMethod: "/shop.Shop/Buy"}, buy)
		}}}}, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	// Another instance is selling item 42 meanwhile.
	held, err := locker.TryAcquire(context.Background(), "item:42")
	if err != nil {
		log.Fatal(err)
	}
	defer held.Release(context.Background())

	// The client.
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	err = conn.Invoke(context.Background(), "/shop.Shop/Buy", wrapperspb.String("42"), new(wrapperspb.StringValue))
	if st, ok := status.FromError(err); ok && st.Code() == codes.Aborted {
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				delay := ri.GetRetryDelay().AsDuration() // at most the holder's TTL
				fmt.Println("item 42 is busy; retry within 10s:", delay <= 10*time.Second)
			}
		}
	}
	// Output: item 42 is busy; retry within 10s: true
}
