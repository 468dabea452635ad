package postgres_test

import (
	"testing"

	"github.com/lockmw/lockmw/internal/testkit/conformance"
	"github.com/lockmw/lockmw/internal/testkit/pgtest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/postgres"
)

// The conformance suite (internal/testkit/conformance) against one PostgreSQL
// server. The package's tests run one after another (no t.Parallel): each
// starts a server, and several at once on a small machine make
// connections slower than the tests' short TTLs.
func TestConformancePostgres(t *testing.T) {
	srv := startServer(t)
	conformance.Run(t, conformance.Store{
		Name: "postgres",
		NewLocker: func(t testing.TB, opts ...lockmw.Option) (*lockmw.Locker, error) {
			return postgres.New(newPool(t, srv.URL()), opts...)
		},
		NewCuttableLocker: func(t testing.TB, opts ...lockmw.Option) (*lockmw.Locker, func(testing.TB), func(testing.TB), error) {
			p := pgtest.StartProxy(t, srv)
			l, err := postgres.New(newPool(t, pgtest.URLFor(p.Addr())), opts...)
			return l, p.Cut, p.Heal, err
		},
		Pause:                srv.Pause,
		Resume:               srv.Resume,
		Kill:                 srv.Kill,
		Restart:              srv.Restart,
		Leftovers:            func(t testing.TB, key string) []string { return rows(t, srv, key) },
		Fair:                 true,
		QueuesDefaultWaiters: true,
		Queued:               func(t testing.TB, key string) int { return queued(t, srv, key) },
		Notifies:             true,
		// The row keeps the holder's expiry, fence, and (from a Locker
		// given WithHolderInfo) its description and acquisition time; the
		// queue keeps entries, which do not say their waiter's mode.
		Inspects: &conformance.Inspects{
			TTL:           lockmw.Exact,
			Fence:         lockmw.Exact,
			Holder:        lockmw.Exact,
			Since:         lockmw.Unknown,
			SinceWithInfo: lockmw.Exact,
			Waiters:       lockmw.Exact,
			FairWaiters:   lockmw.Unknown,
		},
	})
}
