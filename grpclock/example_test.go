package grpclock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/lockmw/lockmw/grpclock"
	"github.com/lockmw/lockmw/internal/lockmwtest"
)

// Lock the Buy method per item: the item id comes from the request's
// generated getter (here a well-known type stands in for a generated
// message), the lock is "item:<id>" and is reported as "item:{id}".
// Other methods are not locked.
func ExampleUnaryServerInterceptor() {
	// lockmw.New on a client of the Redis every instance shares (the
	// example Redis: localhost:6379, short timeouts; see lockmw).
	locker, _, stop := lockmwtest.DemoLocker()
	defer stop()

	srv := grpc.NewServer(
		grpc.StatsHandler(otelgrpc.NewServerHandler()), // grpclock spans nest under these
		grpc.ChainUnaryInterceptor(grpclock.UnaryServerInterceptor(locker,
			grpclock.Getter((*wrapperspb.StringValue).GetValue),
			grpclock.WithMethods(map[string]string{"/shop.Shop/Buy": "item:{id}"}),
		)),
	)
	_ = srv // register services, then srv.Serve(listener)
}

// Streams take their key from metadata, or with WithFirstMessage from their
// first message, which the handler still receives.
func ExampleStreamServerInterceptor() {
	// lockmw.New on a client of the Redis every instance shares (the
	// example Redis: localhost:6379, short timeouts; see lockmw).
	locker, _, stop := lockmwtest.DemoLocker()
	defer stop()

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
		order, ok := req.(interface{ GetOrderId() string })
		if !ok {
			return "", errors.New("not an order request")
		}
		return tenant[0] + "/" + order.GetOrderId(), nil
	})
	_ = tenantOrder // grpclock.UnaryServerInterceptor(locker, tenantOrder, ...)
}

// A client learns from a busy answer when to try again.
func Example_retryInfo() {
	conn, err := grpc.NewClient("localhost:50051", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	err = conn.Invoke(context.Background(), "/shop.Shop/Buy", wrapperspb.String("42"), new(wrapperspb.StringValue))
	if st, ok := status.FromError(err); ok && st.Code() == codes.Aborted {
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Println("item 42 is busy; retry in", ri.GetRetryDelay().AsDuration())
			}
		}
	}
}
