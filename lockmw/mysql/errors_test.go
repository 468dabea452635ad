package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/mysql"
)

// Bad conditions give errors that say what is wrong, matched by errors.Is
// with both the store's sentinel and lockmw.ErrUnavailable, and a held
// lease still ends at its deadline.
func TestTypedErrors(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	ctx := bg(t)

	t.Run("MissingTable", func(t *testing.T) {
		_, err := mysql.NewWithTable(srv.DB(t, ""), "no_such_table")
		if !errors.Is(err, mysql.ErrMissingTable) || !errors.Is(err, lockmw.ErrStoreSetup) || !strings.Contains(err.Error(), "CreateTable") {
			t.Fatalf("New on a missing table: %v, want ErrMissingTable saying how to create it", err)
		}
		// Dropped under a running Locker: its acquisitions say so.
		db := srv.DB(t, "")
		if err := mysql.CreateTable(ctx, db, "dropped"); err != nil {
			t.Fatal(err)
		}
		l, err := mysql.NewWithTable(db, "dropped", lockmw.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		srv.Exec(t, "DROP TABLE dropped")
		_, err = l.TryAcquire(ctx, "k")
		if !errors.Is(err, mysql.ErrMissingTable) || !errors.Is(err, lockmw.ErrStoreSetup) || errors.Is(err, lockmw.ErrUnavailable) {
			t.Fatalf("TryAcquire on a dropped table: %v, want ErrMissingTable and lockmw.ErrStoreSetup, not ErrUnavailable", err)
		}
	})

	t.Run("BadTableName", func(t *testing.T) {
		for _, name := range []string{"", "a-b", "x`; DROP TABLE y", strings.Repeat("a", 49)} {
			if name == "" {
				continue // "" is DefaultTable
			}
			if _, err := mysql.Schema(name); !errors.Is(err, lockmw.ErrInvalidOption) {
				t.Errorf("Schema(%q): %v, want ErrInvalidOption", name, err)
			}
		}
	})

	t.Run("ReadOnly", func(t *testing.T) {
		db, err := sql.Open("mysql", srv.User(t, "app"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		l, err := mysql.New(db, lockmw.WithTTL(time.Second), lockmw.WithDriftFactor(0.2))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		lease, err := l.TryAcquire(ctx, "ro")
		if err != nil {
			t.Fatal(err)
		}
		srv.SetReadOnly(t, true)
		defer srv.SetReadOnly(t, false)
		_, err = l.TryAcquire(ctx, "ro2")
		if !errors.Is(err, mysql.ErrReadOnly) || !errors.Is(err, lockmw.ErrUnavailable) {
			t.Fatalf("TryAcquire on a read-only server: %v, want ErrReadOnly and ErrUnavailable", err)
		}
		// The lease's renewals are refused: it ends at its deadline.
		select {
		case <-lease.Context().Done():
		case <-time.After(10 * time.Second):
			t.Fatal("a lease on a read-only server did not end")
		}
		if cause := context.Cause(lease.Context()); !errors.Is(cause, lockmw.ErrLost) {
			t.Fatalf("lease ended with %v, want ErrLost", cause)
		}
	})

	t.Run("PoolExhausted", func(t *testing.T) {
		db := srv.DB(t, "")
		db.SetMaxOpenConns(1)
		l, err := mysql.New(db, lockmw.WithTTL(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		conn, err := db.Conn(ctx) // the pool's only connection
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.TryAcquire(ctx, "pool")
		conn.Close()
		if !errors.Is(err, mysql.ErrPoolExhausted) || !errors.Is(err, lockmw.ErrUnavailable) {
			t.Fatalf("TryAcquire with the pool exhausted: %v, want ErrPoolExhausted and ErrUnavailable", err)
		}
	})

	t.Run("StatementTimeoutAndKilledConnection", func(t *testing.T) {
		// An administrator's transaction holds the lock's row: the
		// acquisition waits for it, until the server ends the
		// statement at its limit, or its connection is killed.
		l := newLocker(t, srv, lockmw.WithTTL(2*time.Second))
		lease, err := l.TryAcquire(ctx, "blocked")
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		admin := srv.DB(t, "")
		tx, err := admin.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, "SELECT * FROM lockmw_locks WHERE name = 'blocked' FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		_, err = l.TryAcquire(ctx, "blocked")
		if !errors.Is(err, mysql.ErrStatementTimeout) || !errors.Is(err, lockmw.ErrUnavailable) {
			t.Fatalf("TryAcquire on a row locked for longer than the TTL: %v, want ErrStatementTimeout and ErrUnavailable", err)
		}
		errs := make(chan error, 1)
		go func() {
			_, err := l.TryAcquire(ctx, "blocked")
			errs <- err
		}()
		// The acquisition statement draws a fence (the admin's does not,
		// nor does the give-back of the attempt that timed out, waiting
		// too), whichever form it takes (the key's row known: prepared,
		// its strings parameters).
		id := waitStatement(t, admin, "NEXTVAL(`lockmw_locks_fence`)")
		srv.KillConnection(t, id)
		if err := <-errs; !errors.Is(err, mysql.ErrConnectionKilled) || !errors.Is(err, lockmw.ErrUnavailable) {
			t.Fatalf("TryAcquire whose connection was killed: %v, want ErrConnectionKilled and ErrUnavailable", err)
		}
	})
}

// waitStatement returns the connection id of the statement under way that
// contains every one of texts.
func waitStatement(t *testing.T, admin *sql.DB, texts ...string) int64 {
	t.Helper()
	var id int64
	q := "SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID()"
	args := make([]any, len(texts))
	for i, text := range texts {
		q += " AND INFO LIKE ?"
		args[i] = "%" + text + "%"
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := admin.QueryRowContext(bg(t), q+" LIMIT 1", args...).Scan(&id)
		if err == nil {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatalf("no statement with %q under way: %v", texts, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
