package mysql

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"

	driver "github.com/go-sql-driver/mysql"
)

// This file makes sure that a statement whose answer the store never got
// can no longer run once a give-back of its token says it is done.
//
// The hole: an acquisition's statement (take's, or Enqueue's queue
// insert) whose caller gave up before the server answered (the caller's
// context, the TTL bound, a broken link) may still run: a paused server
// executes it when it resumes, and a statement waiting behind a lock in
// the server runs when that lock is released. The driver closes its
// connection, but MariaDB reads what was sent before it notices. The
// Locker then gives the token's lock back (lockmw's cleaner: a release
// that touches only that token's row), and stops once two give-backs are
// answered, which orders them after the statement only where one event
// loop serves every connection (Redis). MariaDB runs each connection in a
// thread of its own: both give-backs can be answered while the statement
// still waits, and the statement then takes the lock for a token nobody
// holds, for a whole TTL (TestStalledBeforeRowLockLeavesNoLock: a
// statement waiting for a metadata lock, before it locks the row, fails
// it without this file's fix; one waiting behind the row's lock holds
// the give-back back until it ran, TestStalledAcquisitionLeavesNoLock).
//
// The fix: every such statement is sent on a connection whose server id
// (CONNECTION_ID(), asked once per connection) the store knows. When the
// statement fails without the server's answer, the store notes the id
// against the token; a Release (or Leave) of that token first ends those
// connections: it kills (KILL CONNECTION) each one still running a
// statement of the token (a text statement's text holds the token; a
// prepared statement's holds its connection's mark, a random name the
// store gave that connection, prepared.go: so an id reused after a server
// restart is never killed), and waits until the server lists none of
// them. Only then does it release the row.
//
// Why that is safe and enough: a connection's thread runs its statements
// one after the other, and a thread that is gone runs nothing more; an
// autocommitted statement of a thread that ended has committed whole (it
// ran before the kill) or not at all (InnoDB rolls a killed statement
// back). So when the release runs, the token's statement has committed,
// and the release finds and ends its holding, or it never will, and the
// row stays as the release leaves it. The kill touches only connections
// that the driver has already closed on the client side, running this
// Locker's own statement for a token no lease holds: no lease's holding
// or renewal is ever stopped, and exclusion rests, as before, on the row
// alone (a killed statement fails, it never writes). A server that cannot
// be asked makes the release fail: the cleaner tries again, and warns
// when it gives up, as it does for a release that fails.

// execer runs a statement: a *sql.DB or a *sql.Conn.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// stalled is a connection noted against a token: its server id, and its
// mark, which names it in the text of its prepared statements
// (prepared.go).
type stalled struct {
	id   int64
	mark string
}

// send runs q, a statement of token that may take a lock or queue an
// entry, bounded by d, on a connection whose id the store knows; when it
// fails without the server's answer, the connection is noted against
// token (see the file's comment).
func (s *sqlStore) send(ctx context.Context, d time.Duration, token string, q query) (sql.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	c, err := s.db.Conn(ctx)
	if err != nil {
		return nil, s.classify(ctx, err)
	}
	defer c.Close()
	st, err := s.connState(ctx, c)
	if err != nil {
		return nil, err
	}
	res, err := s.run(ctx, c, q)
	if err != nil && !answered(err) {
		s.stalls.Note(token, stalled{st.id, st.mark}, Retention)
	}
	return res, err
}

// answered reports whether err is the server's answer to a statement
// (which ran, or not, but is over), or a failure before anything was sent.
func answered(err error) bool {
	var me *driver.MySQLError
	return errors.As(err, &me) || notRun(err)
}

// connState returns c's state, with its server id, asked once per
// connection.
func (s *sqlStore) connState(ctx context.Context, c *sql.Conn) (*connState, error) {
	var st *connState
	_ = c.Raw(func(dc any) error { st = s.conns.state(dc); return nil })
	if st.id != 0 {
		return st, nil
	}
	if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&st.id); err != nil {
		st.id = 0
		return nil, s.classify(ctx, err)
	}
	return st, nil
}

// endStalled returns once no connection noted against token is left in
// the server, killing those that run a statement of token; an error when
// the server could not be asked, or ctx ended first.
func (s *sqlStore) endStalled(ctx context.Context, token string) error {
	noted := s.stalls.Of(token)
	if len(noted) == 0 {
		return nil
	}
	// A statement of token: its text holds the token (a text statement),
	// or its connection's mark (a prepared one: prepared.go).
	list := make([]string, len(noted))
	runs := "INFO LIKE '%" + hex.EncodeToString([]byte(token)) + "%'"
	for i, n := range noted {
		id := strconv.FormatInt(n.id, 10)
		list[i] = id
		runs += " OR ID = " + id + " AND INFO LIKE '%" + n.mark + "%'"
	}
	q := "SELECT ID, COALESCE(" + runs + ", FALSE) FROM information_schema.PROCESSLIST WHERE ID IN (" + strings.Join(list, ", ") + ")"
	pause := 5 * time.Millisecond
	for {
		listed, kill, err := s.stalledLeft(ctx, q)
		if err != nil {
			return err
		}
		if listed == 0 {
			s.stalls.Forget(token, noted)
			return nil
		}
		for _, id := range kill {
			// An unknown thread (it ended meanwhile) is fine.
			_, _ = s.db.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(id, 10))
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
}

// stalledLeft runs q (endStalled's): how many of the connections are
// still listed, and the ids of those running a statement of the token.
func (s *sqlStore) stalledLeft(ctx context.Context, q string) (int, []int64, error) {
	qctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rows, err := s.db.QueryContext(qctx, q)
	if err != nil {
		return 0, nil, s.classify(qctx, err)
	}
	defer rows.Close()
	var kill []int64
	listed := 0
	for rows.Next() {
		var id int64
		var runs bool
		if err := rows.Scan(&id, &runs); err != nil {
			return 0, nil, err
		}
		listed++
		if runs {
			kill = append(kill, id)
		}
	}
	if err := rows.Err(); err != nil {
		return 0, nil, classify(err)
	}
	return listed, kill, nil
}
