package mysql_test

import (
	"testing"

	"github.com/lockmw/lockmw/internal/testkit/conformance"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/mysql"
)

// The conformance suite (internal/testkit/conformance) against one MariaDB
// server.
func TestConformanceMariaDB(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	admin := srv.DB(t, "")
	conformance.Run(t, conformance.Store{
		Name: "mariadb",
		NewLocker: func(t testing.TB, opts ...lockmw.Option) (*lockmw.Locker, error) {
			return mysql.New(srv.DB(t, ""), opts...)
		},
		NewCuttableLocker: func(t testing.TB, opts ...lockmw.Option) (*lockmw.Locker, func(testing.TB), func(testing.TB), error) {
			p := srv.StartProxy(t)
			l, err := mysql.New(srv.DB(t, p.Addr()), opts...)
			return l, p.Cut, p.Heal, err
		},
		Pause:   srv.Pause,
		Resume:  srv.Resume,
		Kill:    srv.Kill,
		Restart: srv.Restart,
		Leftovers: func(t testing.TB, key string) []string {
			// A row whose holding ended stays for mysql.Retention (the
			// fence argument needs it), holding nothing: only a live
			// holding is left over.
			var out []string
			if r, ok := readRow(t, admin, key); ok && r.live {
				out = append(out, "row "+key+" held by "+r.token)
			}
			for _, tok := range queueTokens(t, admin, key, false) {
				out = append(out, "queue entry of "+tok)
			}
			return out
		},
		// Fair waiters queue; default waiters poll (store.FairOnly).
		Fair:   true,
		Queued: func(t testing.TB, key string) int { return len(queueTokens(t, admin, key, true)) },
		MinTTL: mysql.MinTTL,
		// See the package documentation, "Inspecting": the row keeps the
		// holder's fence and expiry, and, for a Locker with a
		// description, the description and the holding's start; only
		// Fair waiters queue.
		Inspects: &conformance.Inspects{
			TTL:           lockmw.Exact,
			Fence:         lockmw.Exact,
			Holder:        lockmw.Exact,
			Since:         lockmw.Unknown,
			SinceWithInfo: lockmw.Exact,
			Waiters:       lockmw.AtLeast,
			FairWaiters:   lockmw.Exact,
		},
	})
}
