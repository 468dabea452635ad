package mysql

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/go-sql-driver/mysql"

	"github.com/lockmw/lockmw/lockmw"
)

// The store's errors. A Locker wraps them in lockmw.ErrUnavailable, so
// errors.Is matches both: errors.Is(err, lockmw.ErrUnavailable) for "the
// store did not do it", and one of these for why; except ErrMissingTable
// and ErrNotMariaDB, setup mistakes, which match lockmw.ErrStoreSetup
// instead.
var (
	// ErrMissingTable means the lock table, its fence sequence or its
	// claims table does not exist: create them with CreateTable, or run
	// the SQL of Schema in a migration. It matches lockmw.ErrStoreSetup,
	// not lockmw.ErrUnavailable: waiting does not mend it.
	ErrMissingTable error = &setupError{"lockmw/mysql: the store's table is missing"}
	// ErrOldSchema means the store's tables were made by an earlier
	// version and lack what this one needs (the queue's column
	// handover, the lock table's column queue_seen; the lock table's
	// holder and held_since, for lockmw.WithHolderInfo, Inspect and
	// Locks): migrate them with
	// CreateTable, which is idempotent, or the ALTER TABLE statements of
	// Schema. It matches lockmw.ErrStoreSetup.
	ErrOldSchema error = &setupError{"lockmw/mysql: the store's tables need a migration"}
	// ErrReadOnly means the server refused a write: it runs with
	// read_only (a replica, or a primary demoted by a failover), or the
	// session is in a read-only transaction. Point the pool at the
	// primary.
	ErrReadOnly = errors.New("lockmw/mysql: the server is read-only")
	// ErrStatementTimeout means the server ended a statement at its
	// max_statement_time (the store bounds its statements by the lease
	// TTL: an answer later than that is worthless), or a lock wait timed
	// out.
	ErrStatementTimeout = errors.New("lockmw/mysql: statement timed out")
	// ErrConnectionKilled means the server ended the statement's
	// connection (KILL CONNECTION, a restart, a proxy failing over). The
	// pool dials anew for the next statement.
	ErrConnectionKilled = errors.New("lockmw/mysql: connection killed")
	// ErrPoolExhausted means no connection of the *sql.DB became free in
	// time: every one of its SetMaxOpenConns connections was in use.
	ErrPoolExhausted = errors.New("lockmw/mysql: connection pool exhausted")
	// ErrNotMariaDB means the server is not MariaDB 10.3 or later: the
	// store needs SEQUENCE objects, which MySQL lacks. It matches
	// lockmw.ErrStoreSetup.
	ErrNotMariaDB error = &setupError{"lockmw/mysql: the server is not MariaDB 10.3 or later"}
)

// MariaDB's (and MySQL's) error numbers the store tells apart.
const (
	erBadTable              = 1051
	erNoSuchTable           = 1146
	erBadField              = 1054 // unknown column
	erNotSequence           = 4089
	erNotSequence2          = 4090
	erOptionPreventsStmt    = 1290 // --read-only
	erReadOnlyTransaction   = 1792
	erCantExecuteInReadOnly = 1836 // MySQL's super_read_only
	erInnodbReadOnly        = 1874
	erStatementTimeout      = 1969 // max_statement_time
	erMySQLQueryTimeout     = 3024 // MySQL's max_execution_time
	erLockWaitTimeout       = 1205
	erLockDeadlock          = 1213 // InnoDB rolled the statement back: retried
	erConnectionKilled      = 1927
	erQueryInterrupted      = 1317
	erServerShutdown        = 1053
	erAbortingConnection    = 1152
	erNewAbortingConnection = 1184
	erServerGone            = 2006
	erServerLostConnection  = 2013
	erSequenceRunOut        = 4084
	erAccessDenied          = 1045 // at connect: user or password
	erDBAccessDenied        = 1044 // at connect: the DSN's database
	erBadDB                 = 1049 // at connect: unknown database
	erNoDB                  = 1046 // no database in the DSN
	erTableAccessDenied     = 1142 // no INSERT (or SELECT) privilege
	erTooManyConnections    = 1040
	erHostNotPrivileged     = 1130
)

// classify returns err with the store's sentinel for what it means, or err
// as it is.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case erNoSuchTable, erBadTable, erNotSequence, erNotSequence2:
			return fmt.Errorf("%w (create it with lockmw/mysql's CreateTable, or the SQL of its Schema): %w", ErrMissingTable, err)
		case erBadField:
			return fmt.Errorf("%w (migrate with lockmw/mysql's CreateTable, or the ALTER TABLE of its Schema): %w", ErrOldSchema, err)
		case erOptionPreventsStmt, erReadOnlyTransaction, erCantExecuteInReadOnly, erInnodbReadOnly:
			return fmt.Errorf("%w (read_only: a replica, or a demoted primary; point the pool at the primary): %w", ErrReadOnly, err)
		case erStatementTimeout, erMySQLQueryTimeout, erLockWaitTimeout:
			return fmt.Errorf("%w: %w", ErrStatementTimeout, err)
		case erConnectionKilled, erQueryInterrupted, erServerShutdown, erNewAbortingConnection, erAbortingConnection, erServerGone, erServerLostConnection:
			return fmt.Errorf("%w: %w", ErrConnectionKilled, err)
		case erSequenceRunOut:
			return fmt.Errorf("lockmw/mysql: the fence sequence ran out (it counts to 2^63-2): %w", err)
		}
		return err
	}
	if errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w (the connection broke during the statement): %w", ErrConnectionKilled, err)
	}
	return err
}

// setupError is a store error that is a setup mistake: it matches
// lockmw.ErrStoreSetup.
type setupError struct{ msg string }

func (e *setupError) Error() string        { return e.msg }
func (e *setupError) Is(target error) bool { return target == lockmw.ErrStoreSetup }

// unsentError is the error of an acquisition that took nothing
// (sqlStore.LeftNothing). It says what its cause says.
type unsentError struct{ err error }

func (e *unsentError) Error() string { return e.err.Error() }
func (e *unsentError) Unwrap() error { return e.err }

// notRun reports whether err, the error of one autocommitted statement,
// proves that the statement wrote nothing: no connection could be made (a
// refused or failed dial, or a login the server refused: user, password,
// database, too many connections), or the server refused the statement
// before running it (a missing table, no database selected, no privilege,
// read_only), or InnoDB rolled it back whole (a deadlock's victim).
func notRun(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Number {
	case erAccessDenied, erDBAccessDenied, erBadDB, erTooManyConnections, erHostNotPrivileged,
		erNoDB, erTableAccessDenied, erNoSuchTable, erBadTable, erBadField, erNotSequence, erNotSequence2,
		erOptionPreventsStmt, erReadOnlyTransaction, erCantExecuteInReadOnly, erInnodbReadOnly, erLockDeadlock:
		return true
	}
	return false
}
