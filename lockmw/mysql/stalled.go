package mysql

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"sync"
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
// statement that names the token (its text holds the token, so an id
// reused after a server restart is never killed), and waits until the
// server lists none of them. Only then does it release the row.
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

// maxConnIDs bounds the cache of connection ids; past it the cache is
// emptied (ids are asked again, once per connection).
const maxConnIDs = 4096

// connIDs caches the server id of each driver connection, by the driver's
// connection (database/sql's Conn.Raw).
type connIDs struct {
	mu  sync.Mutex
	ids map[any]int64
}

// execer runs a statement: a *sql.DB or a *sql.Conn.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// send runs q, a statement of token that may take a lock or queue an
// entry, bounded by d, on a connection whose id the store knows; when it
// fails without the server's answer, the connection is noted against
// token (see the file's comment).
func (s *sqlStore) send(ctx context.Context, d time.Duration, token, q string) (sql.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	c, err := s.db.Conn(ctx)
	if err != nil {
		return nil, s.classify(ctx, err)
	}
	defer c.Close()
	id, err := s.connID(ctx, c)
	if err != nil {
		return nil, err
	}
	res, err := s.execOn(ctx, c, q)
	if err != nil && !answered(err) {
		s.stalls.Note(token, id, Retention)
	}
	return res, err
}

// answered reports whether err is the server's answer to a statement
// (which ran, or not, but is over), or a failure before anything was sent.
func answered(err error) bool {
	var me *driver.MySQLError
	return errors.As(err, &me) || notRun(err)
}

// connID returns c's server id, asking the server once per connection.
func (s *sqlStore) connID(ctx context.Context, c *sql.Conn) (int64, error) {
	var dc any
	_ = c.Raw(func(d any) error { dc = d; return nil })
	s.ids.mu.Lock()
	id, ok := s.ids.ids[dc]
	s.ids.mu.Unlock()
	if ok {
		return id, nil
	}
	if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		return 0, s.classify(ctx, err)
	}
	s.ids.mu.Lock()
	if s.ids.ids == nil || len(s.ids.ids) >= maxConnIDs {
		s.ids.ids = make(map[any]int64)
	}
	s.ids.ids[dc] = id
	s.ids.mu.Unlock()
	return id, nil
}

// endStalled returns once no connection noted against token is left in
// the server, killing those that run a statement of token; an error when
// the server could not be asked, or ctx ended first.
func (s *sqlStore) endStalled(ctx context.Context, token string) error {
	ids := s.stalls.Of(token)
	if len(ids) == 0 {
		return nil
	}
	list := make([]string, len(ids))
	for i, id := range ids {
		list[i] = strconv.FormatInt(id, 10)
	}
	q := "SELECT ID, COALESCE(INFO LIKE '%" + hex.EncodeToString([]byte(token)) + "%', FALSE) FROM information_schema.PROCESSLIST WHERE ID IN (" + strings.Join(list, ", ") + ")"
	pause := 5 * time.Millisecond
	for {
		listed, kill, err := s.stalledLeft(ctx, q)
		if err != nil {
			return err
		}
		if listed == 0 {
			s.stalls.Forget(token, ids)
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
