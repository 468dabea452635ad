package postgres

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// This file makes sure that an acquisition batch whose answer the store
// never got can no longer run once a give-back of its token says it is
// done.
//
// The hole: a batch whose caller gave up before the server answered may
// still run. pgx then sends the server a cancel request, but that request
// can be lost (a paused server: a backend that was idle when the cancel
// arrived ignores it, then reads the batch and runs it; a pool handler
// without cancel requests, such as pgconn.DeadlineContextWatcherHandler;
// a pooler that drops them), and a batch waiting behind a row lock then
// runs once that lock is released. The Locker gives the token's lock back
// (lockmw's cleaner: a release that touches only that token's row), and
// stops once two give-backs are answered, which orders them after the
// batch only where one event loop serves every connection (Redis).
// PostgreSQL runs each connection in a backend process of its own: a
// release that finds no row of the token does not wait for the batch, so
// both give-backs can be answered while the batch still waits, and the
// batch then takes the lock for a token nobody holds, for a whole TTL
// (TestStalledAcquisitionLeavesNoLock).
//
// The fix: when a batch fails without the server's answer and pgx closed
// its connection, the store notes the connection's backend (its process
// id and the client port the server lists for it) against the token; a
// Release (or Leave) of that token first ends those backends: it
// terminates (pg_terminate_backend) each one still listed with that pid
// and port, and waits until pg_stat_activity lists none of them. Only
// then does it delete the row.
//
// Why that is safe and enough: a backend runs its statements one after
// the other, and a backend that exited runs nothing more; the batch is
// one transaction, which committed whole before the backend ended or
// never will (a terminated backend aborts it). So when the release runs,
// the batch has committed, and the release finds and ends its holding,
// or it never will. A backend is matched by pid and client port together,
// so a pid the system reused for another connection is not terminated;
// over a Unix socket (no port) the store only waits. Only backends whose
// connection pgx has closed on the client side, running this Locker's own
// batch for a token no lease holds, are terminated: no lease's holding or
// renewal is stopped, and exclusion rests, as before, on the row alone. A
// server that cannot be asked makes the release fail: the cleaner tries
// again, and warns when it gives up, as for any failed release.

// backend names a connection's server process: pid, and the client port
// the server lists for it (-1 over a Unix socket).
type backend struct {
	pid  uint32
	port int
}

// backendOf names c's backend.
func backendOf(c *pgxpool.Conn) backend {
	pc := c.Conn().PgConn()
	b := backend{pid: pc.PID(), port: -1}
	if a, ok := pc.Conn().LocalAddr().(*net.TCPAddr); ok {
		b.port = a.Port
	}
	return b
}

// stallKeep is how long a note is kept: longer than any lease TTL a
// Locker gives back within.
const stallKeep = 24 * time.Hour

// noteStall records that token's batch on c failed with err; only a batch
// whose answer was never read, on a connection pgx closed, counts.
func (s *pgStore) noteStall(token string, c *pgxpool.Conn, b backend, err error) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Severity == "ERROR" || !c.Conn().PgConn().IsClosed() {
		return // answered, or the connection is in step: the batch is over
	}
	s.stalls.Note(token, b, stallKeep)
}

// endStalled returns once no backend noted against token is left,
// terminating those still listed with their port; an error when the
// server could not be asked, or ctx ended first.
func (s *pgStore) endStalled(ctx context.Context, token string) error {
	bs := s.stalls.Of(token)
	if len(bs) == 0 {
		return nil
	}
	pids, ports := make([]int64, len(bs)), make([]int64, len(bs))
	for i, b := range bs {
		pids[i], ports[i] = int64(b.pid), int64(b.port)
	}
	const q = `SELECT count(*), count(CASE WHEN a.client_port > 0 THEN pg_terminate_backend(a.pid) END)
FROM pg_stat_activity a JOIN unnest($1::int[], $2::int[]) AS b(pid, port)
	ON a.pid = b.pid AND coalesce(a.client_port, -1) = b.port`
	pause := 5 * time.Millisecond
	for {
		var listed, terminated int64
		if err := s.pool.QueryRow(ctx, q, pids, ports).Scan(&listed, &terminated); err != nil {
			return classify(err)
		}
		if listed == 0 {
			break
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
	s.stalls.Forget(token, bs)
	return nil
}
