package mysql_test

import (
	"context"
	"database/sql"
	"io"
	"log"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/mysql"
	"github.com/lockmw/lockmw/lockmw/mysql/internal/mariatest"
)

// The driver logs every connection that breaks, which the fault tests do
// on purpose.
func init() { _ = driver.SetLogger(log.New(io.Discard, "", 0)) }

// testTTL is the lease TTL of most tests.
const testTTL = time.Second

// startServer starts MariaDB with the store's tables (DefaultTable).
func startServer(t testing.TB) *mariatest.Server {
	t.Helper()
	srv := mariatest.Start(t)
	if err := mysql.CreateTable(bg(t), srv.DB(t, ""), ""); err != nil {
		t.Fatal(err)
	}
	return srv
}

// newLocker returns a Locker on its own pool to srv, closed at cleanup.
func newLocker(t testing.TB, srv *mariatest.Server, opts ...lockmw.Option) *lockmw.Locker {
	t.Helper()
	l, err := mysql.New(srv.DB(t, ""), append([]lockmw.Option{lockmw.WithTTL(testTTL)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// row is a lock's row as the table holds it.
type row struct {
	token string
	fence uint64
	live  bool
}

// readRow reads the row of key (default prefix); ok is false without one.
func readRow(t testing.TB, db *sql.DB, key string) (r row, ok bool) {
	t.Helper()
	err := db.QueryRowContext(bg(t), "SELECT token, fence, expires_at > UTC_TIMESTAMP(6) FROM lockmw_locks WHERE prefix = ? AND name = ?",
		lockmw.DefaultPrefix, key).Scan(&r.token, &r.fence, &r.live)
	if err == sql.ErrNoRows {
		return row{}, false
	}
	if err != nil {
		t.Fatalf("reading the row of %q: %v", key, err)
	}
	return r, true
}

// bg is a context for test calls that must not hang.
func bg(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// queueTokens lists the tokens of key's queue entries (default prefix), in
// queue order; live only the unexpired ones.
func queueTokens(t testing.TB, db *sql.DB, key string, live bool) []string {
	t.Helper()
	q := "SELECT token FROM lockmw_locks_queue WHERE prefix = ? AND name = ?"
	if live {
		q += " AND expires_at > UTC_TIMESTAMP(6)"
	}
	rows, err := db.QueryContext(bg(t), q+" ORDER BY seq", lockmw.DefaultPrefix, key)
	if err != nil {
		t.Fatalf("reading the queue of %q: %v", key, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var tok string
		if err := rows.Scan(&tok); err != nil {
			t.Fatal(err)
		}
		out = append(out, tok)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
