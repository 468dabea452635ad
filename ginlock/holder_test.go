package ginlock_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/lockmw/lockmw/ginlock"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// A busy answer names the holder (its Locker's WithHolderInfo) only when
// the middleware was given WithHolderInBusy.
func TestBusyNamesHolderOnlyWhenAskedTo(t *testing.T) {
	srv := redistest.Start(t)
	const desc = "orders-7d9f host-a pid 42"
	holder := newLocker(t, srv, lockmw.WithHolderInfo(desc))
	lease, err := holder.Acquire(context.Background(), "order:42")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	l := newLocker(t, srv)
	ok := func(c *gin.Context) { c.Status(http.StatusOK) }
	for _, tc := range []struct {
		opts []ginlock.Option
		want string
	}{
		{nil, ""},
		{[]ginlock.Option{ginlock.WithHolderInBusy()}, desc},
	} {
		e := newEngine(http.MethodPost, "/orders/:id", ginlock.New(l, ginlock.Param("id"), append(tc.opts, ginlock.WithName("order:{id}"))...), ok)
		rec := serve(e, httptest.NewRequest(http.MethodPost, "/orders/42", nil))
		if p := problem(t, rec, http.StatusConflict); p.Holder != tc.want {
			t.Errorf("with %d options: holder %q, want %q; body %s", len(tc.opts), p.Holder, tc.want, rec.Body)
		}
	}
}
