package mysql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/chaos"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/mysql"
	"github.com/lockmw/lockmw/lockmw/mysql/internal/mariatest"
)

// TestChaos runs lockmw's seeded randomized safety checker
// (internal/testkit/chaos) against one MariaDB server. See
// internal/testkit/chaos for what it checks and how to replay a failure:
//
//	go test -race -run '^TestChaos$' .                       # short: 10s
//	go test -race -run '^TestChaos$' . -args -chaos.seed=42 -chaos.duration=15m
//	make chaos CHAOS_DURATION=15m                             # every store
func TestChaos(t *testing.T) {
	chaos.RunStores(t, mariaChaosStore)
}

// mariaChaosStore is the "mariadb" store: one server, mysql.New on a pool
// of each Locker slot's own, every other slot through a proxy.
var mariaChaosStore = chaos.Store{
	Name: "mariadb", Fair: true, Start: startMariaChaos,
	FaultNames: []string{"latency", "cut", "reset", "pause", "restart", "killconn"},
	Timing: chaos.Timing{
		MinTTL:      mysql.MinTTL * 2,
		ShortMinTTL: 600 * time.Millisecond,
		MaxTTL:      2 * time.Second,
		LockerTTL:   time.Second,
	},
	Dir: "lockmw/mysql", Package: ".",
}

// startMariaChaos starts the MariaDB deployment. Faults: chaos.ServerFaults
// (latency, cut and reset on a proxied slot's link; pause; restart, after
// which InnoDB's crash recovery keeps every committed row and the fence
// sequence), and killconn: KILL CONNECTION every client connection, as a
// failover proxy or an administrator would.
func startMariaChaos(t *testing.T, slots int) *chaos.Deployment {
	srv := startServer(t)
	admin := srv.DB(t, "")
	dbs := make([]*sql.DB, slots)
	proxies := make([]*mariatest.Proxy, slots)
	for s := range slots {
		if chaos.Proxied(s) {
			proxies[s] = srv.StartProxy(t)
			dbs[s] = srv.DB(t, proxies[s].Addr())
		} else {
			dbs[s] = srv.DB(t, "")
		}
	}
	pick := func(env *chaos.FaultEnv) []*mariatest.Proxy {
		var ps []int
		for s, p := range proxies {
			if p != nil {
				ps = append(ps, s)
			}
		}
		s := ps[env.Rand.IntN(len(ps))]
		env.Note("link of slot %d", s)
		return []*mariatest.Proxy{proxies[s]}
	}
	d := &chaos.Deployment{
		NewLocker: func(slot int, opts ...lockmw.Option) (*lockmw.Locker, error) {
			return mysql.New(dbs[slot], opts...)
		},
		Describe: chaos.DescribeSlot,
		Residue:  func(ctx context.Context) ([]chaos.Residue, error) { return mariaResidue(ctx, admin) },
	}
	d.Faults = append(chaos.ServerFaults("mariadbd", srv, pick), chaos.Fault{Name: "killconn", Run: func(env *chaos.FaultEnv) {
		env.Note("KILL CONNECTION: %d connections", srv.KillConnections(env.T))
	}})
	return d
}

// mariaResidue lists the live rows of the lock table (a row whose holding
// ended holds nothing and goes after mysql.Retention) and of the queue.
func mariaResidue(ctx context.Context, admin *sql.DB) ([]chaos.Residue, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := admin.QueryContext(ctx, "SELECT prefix, name, token, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), FALSE FROM lockmw_locks WHERE expires_at > UTC_TIMESTAMP(6)"+
		" UNION ALL SELECT prefix, name, token, 0, TRUE FROM lockmw_locks_queue WHERE expires_at > UTC_TIMESTAMP(6)")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []chaos.Residue
	for rows.Next() {
		var prefix, name, token string
		var us int64
		var queue bool
		if err := rows.Scan(&prefix, &name, &token, &us, &queue); err != nil {
			return nil, err
		}
		if queue {
			out = append(out, chaos.Residue{What: "queue entry " + prefix + name + " of " + token, Queue: true})
			continue
		}
		out = append(out, chaos.Residue{What: "lock row " + prefix + name + " held by " + token, Lock: true, TTL: time.Duration(us) * time.Microsecond})
	}
	return out, rows.Err()
}
