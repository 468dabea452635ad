package grpclock_test

import (
	"context"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockmw/lockmw/grpclock"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// A busy call's status names the holder (its Locker's WithHolderInfo) in an
// ErrorInfo only when the interceptor was given WithHolderInBusy.
func TestBusyNamesHolderOnlyWhenAskedTo(t *testing.T) {
	srv := redistest.Start(t)
	const desc = "orders-7d9f host-a pid 42"
	holder := newLocker(t, srv, lockmw.WithHolderInfo(desc))
	lease, err := holder.Acquire(context.Background(), "item:7")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Release(context.Background()) }()
	locker := newLocker(t, srv)
	buy := func(ctx context.Context, o *order) (*order, error) { return o, nil }
	for _, tc := range []struct {
		opts []grpclock.Option
		want string
	}{
		{[]grpclock.Option{itemMethods}, ""},
		{[]grpclock.Option{itemMethods, grpclock.WithHolderInBusy()}, desc},
	} {
		conn := serve(t, locker, buy, server{opts: tc.opts})
		for _, kind := range kinds {
			_, err := call(t.Context(), conn, kind, &order{Item: "7"})
			st := wantCode(t, err, codes.Aborted)
			if got := holderOf(st); got != tc.want {
				t.Errorf("%s call, %d options: holder %q, want %q (details %v)", kind, len(tc.opts), got, tc.want, st.Details())
			}
		}
	}
}

func holderOf(st *status.Status) string {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetReason() == "LOCK_HELD" && ei.GetDomain() == "lockmw" {
			return ei.GetMetadata()["holder"]
		}
	}
	return ""
}
