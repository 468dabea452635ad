package grpclock_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/lockmw/lockmw/grpclock"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

// With the default proto codec, a stream's first message is peeked into a
// proto message, keyed through its generated getter, and re-delivered
// whole to the handler, followed by the rest of the stream.
func TestStreamFirstMessageProto(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	locker := newLocker(t, srv)
	const method = "/test.Echo/Collect"
	icpt := grpclock.StreamServerInterceptor(locker, grpclock.Getter((*wrapperspb.StringValue).GetValue),
		grpclock.WithMethods(map[string]string{method: "echo:{id}"}),
		grpclock.WithFirstMessage(func(string) any { return new(wrapperspb.StringValue) }))
	gs := grpc.NewServer(grpc.StreamInterceptor(icpt))
	gs.RegisterService(&grpc.ServiceDesc{
		ServiceName: "test.Echo",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "Collect", ClientStreams: true, Handler: func(_ any, stream grpc.ServerStream) error {
			// Concatenate every message received, noting whether the lock
			// on the first one was held throughout.
			var all string
			for {
				m := new(wrapperspb.StringValue)
				if err := stream.RecvMsg(m); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					return err
				}
				all += m.GetValue() + ";"
			}
			if lockHeld(t, rdb, "echo:a") {
				all += "locked"
			}
			return stream.SendMsg(wrapperspb.String(all))
		}}},
	}, nil)
	lis := bufconn.Listen(1 << 20)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })

	stream, err := conn.NewStream(t.Context(), &grpc.StreamDesc{ClientStreams: true}, method)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"a", "b", "c"} {
		if err := stream.SendMsg(wrapperspb.String(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	reply := new(wrapperspb.StringValue)
	if err := stream.RecvMsg(reply); err != nil {
		t.Fatal(err)
	}
	if got, want := reply.GetValue(), "a;b;c;locked"; got != want {
		t.Errorf("handler received %q, want %q (all messages, in order, under lock echo:a)", got, want)
	}
}
