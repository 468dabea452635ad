package postgres_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockmw/lockmw/internal/testkit/chaos"
	"github.com/lockmw/lockmw/internal/testkit/pgtest"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/postgres"
)

// TestChaos runs lockmw's seeded randomized safety checker
// (internal/testkit/chaos) against one PostgreSQL server. See
// internal/testkit/chaos for what it checks and how to replay a failure:
//
//	go test -race -run '^TestChaos$' .                       # short: 20s
//	go test -race -run '^TestChaos$' . -args -chaos.seed=42 -chaos.duration=15m
//	make chaos CHAOS_DURATION=15m                             # every store
func TestChaos(t *testing.T) {
	// Even slots' Lockers draw in the upsert whenever they may: a refusal
	// sends them back to it at once, not after a minute.
	t.Cleanup(postgres.SetLaterAfterRefusal(0))
	chaos.RunStores(t, pgChaosStore)
}

// pgChaosStore is the "postgres" store: one server, postgres.New on a pool
// of each Locker slot's own (application_name lockmw-slot-N); odd slots'
// Lockers draw their fences after the upsert (NewDrawingLater), as
// Lockers of earlier releases do beside new ones.
var pgChaosStore = chaos.Store{
	Name: "postgres", Fair: true, Start: startPgChaos,
	FaultNames: []string{"latency", "cut", "reset", "pause", "restart", "backend"},
	Timing: chaos.Timing{
		ShortDuration: 20 * time.Second,
	},
	Dir: "lockmw/postgres", Package: ".",
}

// startPgChaos starts the deployment. Faults: chaos.ServerFaults (latency,
// cut and reset on a proxied slot's link, its pool and its LISTEN
// connection; pause: SIGSTOP the postmaster and every backend; restart,
// after which crash recovery keeps every committed row and the sequence:
// fences keep rising across it), and backend: pg_terminate_backend every
// connection of one slot (its pool's and its LISTEN connection), as an
// administrator or a connection pooler's failover would.
func startPgChaos(t *testing.T, slots int) *chaos.Deployment {
	srv := startServer(t)
	admin := newPool(t, srv.URL())
	pools := make([]*pgxpool.Pool, slots)
	var proxies []*redistest.Proxy
	proxyOf := make(map[*redistest.Proxy]int)
	for s := range slots {
		url := srv.URL()
		if chaos.Proxied(s) {
			p := pgtest.StartProxy(t, srv)
			proxies = append(proxies, p)
			proxyOf[p] = s
			url = pgtest.URLFor(p.Addr())
		}
		pools[s] = newPool(t, url, "lockmw-slot-"+strconv.Itoa(s))
	}
	pickLinks := func(env *chaos.FaultEnv) []*redistest.Proxy {
		p := proxies[env.Rand.IntN(len(proxies))]
		env.Note("link of slot %d", proxyOf[p])
		return []*redistest.Proxy{p}
	}
	d := &chaos.Deployment{
		NewLocker: func(slot int, opts ...lockmw.Option) (*lockmw.Locker, error) {
			if slot%2 == 1 {
				// A mixed fleet: these Lockers draw the fence after the
				// upsert, as releases before "Fences drawn in the upsert"
				// do.
				return postgres.NewDrawingLater(pools[slot], opts...)
			}
			return postgres.New(pools[slot], opts...)
		},
		Describe: chaos.DescribeSlot,
		Residue:  func(ctx context.Context) ([]chaos.Residue, error) { return pgResidue(ctx, admin) },
	}
	d.Faults = append(chaos.ServerFaults("postgres", srv, pickLinks), chaos.Fault{Name: "backend", Run: func(env *chaos.FaultEnv) {
		// It may overlap a pause: then psql cannot connect, and the
		// fault does nothing.
		slot := env.Rand.IntN(slots)
		n, err := srv.TryTerminateBackends("lockmw-slot-" + strconv.Itoa(slot))
		if err != nil {
			env.Note("slot %d: server not answering (%v)", slot, err)
			return
		}
		env.Note("pg_terminate_backend of slot %d's %d connections", slot, n)
	}})
	return d
}

// pgResidue lists the unexpired lease rows and queue entries. Expired rows
// hold nothing (an acquisition reuses them, the Lockers' sweep deletes
// them: see the package documentation). One instant, the statement's,
// both selects the rows and measures what is left of them: with
// clock_timestamp(), read anew at each call, a row about to expire could
// pass the filter and then be measured as expired.
func pgResidue(ctx context.Context, admin *pgxpool.Pool) ([]chaos.Residue, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	q, err := admin.Query(ctx, `SELECT 'lease row ' || name || ' of ' || token, false,
		(extract(epoch FROM expires_at - statement_timestamp()) * 1e6)::bigint FROM lockmw_locks WHERE expires_at > statement_timestamp()
		UNION ALL SELECT 'queue entry ' || name || ' of ' || token, true, 0 FROM lockmw_locks_queue WHERE expires_at > statement_timestamp()`)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	var out []chaos.Residue
	for q.Next() {
		var what string
		var queue bool
		var us int64
		if err := q.Scan(&what, &queue, &us); err != nil {
			return nil, err
		}
		if queue {
			out = append(out, chaos.Residue{What: what, Queue: true})
		} else {
			out = append(out, chaos.Residue{What: what, Lock: true, TTL: time.Duration(us) * time.Microsecond})
		}
	}
	return out, q.Err()
}
