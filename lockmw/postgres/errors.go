package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockmw/lockmw/lockmw"
)

// The store's errors. Acquire and Release wrap them in
// lockmw.ErrUnavailable, so errors.Is matches both, except ErrNoTable, a
// setup mistake, which matches lockmw.ErrStoreSetup instead; a lease whose
// renewals fail so ends at its deadline (lockmw.ErrLost), as with any store
// outage.
var (
	// ErrNoTable: the lease, queue or claims table, or the fence sequence,
	// does not exist. Create them once with CreateTable, or put SQL() in a
	// migration. New fails with it when the server answers and a table is
	// missing; a request that finds one missing later fails with it too.
	// It matches lockmw.ErrStoreSetup, not lockmw.ErrUnavailable (it did
	// before: a missing table is a setup mistake, which waiting does not
	// mend). A queue table made by a release before hand-overs (without
	// the handover column) fails New with it too, saying to migrate: run
	// CreateTable again, or the new SQL() (ALTER TABLE … ADD COLUMN IF
	// NOT EXISTS); so does a lease table made by a release before Inspect
	// (without the holder columns) for a Locker given
	// lockmw.WithHolderInfo, and Inspect and Locks on it.
	ErrNoTable error = &setupError{"postgres: lockmw's table is missing: create it with postgres.CreateTable(ctx, pool), or run postgres.SQL() in a migration"}
	// ErrReadOnly: the server refuses writes (a replica, a demoted
	// primary, or default_transaction_read_only = on): point the pool at
	// the primary (for example target_session_attrs=read-write in the
	// connection string).
	ErrReadOnly = errors.New("postgres: the server is read-only (a replica, a demoted primary, or default_transaction_read_only): point the pool at the primary, e.g. target_session_attrs=read-write")
	// ErrStatementTimeout: the server cancelled a statement
	// (statement_timeout, lock_timeout or a cancel request).
	ErrStatementTimeout = errors.New("postgres: statement cancelled by the server (statement_timeout or lock_timeout)")
	// ErrBackendTerminated: the server ended the connection's backend
	// (pg_terminate_backend, a shutdown or a crash), or the connection
	// broke; the next request uses another connection.
	ErrBackendTerminated = errors.New("postgres: connection terminated by the server (pg_terminate_backend, shutdown or crash) or broken")
	// ErrPoolExhausted: no connection of the pool came free in time: every
	// one was in use. Raise MaxConns, or hold fewer connections elsewhere.
	ErrPoolExhausted = errors.New("postgres: every connection of the pool is in use (raise pool_max_conns)")
)

// migrateHint says what to do about a queue table made by a release before
// hand-overs (no handover column).
const migrateHint = "lacks the handover column (made by a release before hand-overs): migrate it by running postgres.CreateTable(ctx, pool) again, or the ALTER TABLE of the new SQL()"

// columnHint says what to do about a table without a column this release
// reads or writes (handover, or the holder columns).
const columnHint = "a column of this release is missing (a table made by an older release): migrate it by running postgres.CreateTable(ctx, pool) again, or the ALTER TABLE statements of the new SQL()"

// classify returns err wrapped in the store's error for its kind, if any,
// in one line; nil for nil.
func classify(err error) error {
	err = kindOf(err)
	if err != nil && strings.Contains(err.Error(), "\n") {
		return &oneLineError{err}
	}
	return err
}

// oneLineError says what err says on one line: pgx puts each host's
// connection error on a line of its own.
type oneLineError struct{ err error }

func (e *oneLineError) Error() string {
	return strings.NewReplacer(":\n\t", ": ", "\n\t", "; ", "\n", "; ").Replace(e.err.Error())
}
func (e *oneLineError) Unwrap() error { return e.err }

// kindOf returns err wrapped in the store's error for its kind, if any.
func kindOf(err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01", "42704": // undefined_table, undefined_object (the sequence)
			return fmt.Errorf("%w (%w)", ErrNoTable, err)
		case "42703": // undefined_column: a table of an older release
			return fmt.Errorf("%w: %s (%w)", ErrNoTable, columnHint, err)
		case "25006": // read_only_sql_transaction
			return fmt.Errorf("%w (%w)", ErrReadOnly, err)
		case "57014", "55P03": // query_canceled, lock_not_available
			return fmt.Errorf("%w (%w)", ErrStatementTimeout, err)
		case "57P01", "57P02", "57P03", "08006", "08003": // admin/crash shutdown, cannot connect now, connection failure
			return fmt.Errorf("%w (%w)", ErrBackendTerminated, err)
		}
		return err
	}
	if errors.Is(err, pgconn.ErrReadOnlyConnection) {
		return fmt.Errorf("%w (target_session_attrs=read-write reached no primary: %w)", ErrReadOnly, err)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("%w (%w)", ErrBackendTerminated, err)
	}
	return err
}

// setupError is a store error that is a setup mistake: it matches
// lockmw.ErrStoreSetup.
type setupError struct{ msg string }

func (e *setupError) Error() string        { return e.msg }
func (e *setupError) Is(target error) bool { return target == lockmw.ErrStoreSetup }

// unsentError is the error of an acquisition that took nothing
// (pgStore.LeftNothing): it never reached the server, or the server
// refused it before running it. It says what its cause says.
type unsentError struct{ err error }

func (e *unsentError) Error() string { return e.err.Error() }
func (e *unsentError) Unwrap() error { return e.err }

// notRun reports whether err, the error of an acquisition's batch, is the
// server's refusal of a statement before it ran: the batch is one
// implicit transaction, and an ERROR (not FATAL: the connection may have
// ended after a commit) among those below is raised while a statement is
// planned or before its first write, so the transaction wrote nothing.
func notRun(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Severity != "ERROR" {
		return false
	}
	switch pgErr.Code {
	case "42P01", "42704", "42703", "42501", "3F000", "25006": // undefined table, object or column, insufficient privilege, no such schema, read-only transaction
		return true
	}
	return false
}

// acquireConn takes a connection from pool, saying ErrPoolExhausted when
// ctx ended while every connection was in use.
func acquireConn(ctx context.Context, pool *pgxpool.Pool) (*pgxpool.Conn, error) {
	c, err := pool.Acquire(ctx)
	if err == nil {
		return c, nil
	}
	if ctx.Err() != nil {
		st := pool.Stat()
		if st.AcquiredConns() >= st.MaxConns() {
			return nil, fmt.Errorf("%w: all %d in use (%w)", ErrPoolExhausted, st.MaxConns(), err)
		}
	}
	return nil, classify(err)
}
