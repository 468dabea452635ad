package mysql_test

import (
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/servertest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/mysql"
	"github.com/lockmw/lockmw/lockmw/mysql/internal/mariatest"
)

// dsn is a DSN for user (root when "") with password pass on database db
// at addr.
func dsn(addr, user, pass, db string) string {
	cfg := driver.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = user, pass, "tcp", addr, db
	if user == "" {
		cfg.User = "root"
	}
	cfg.Timeout = 5 * time.Second
	return cfg.FormatDSN()
}

func openDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// An acquisition that failed without running (no connection, a refused
// login, no database, a missing table, a read-only server) took nothing:
// the Locker neither gives it back nor warns that it could not.
func TestFailureThatRanNothingIsNotGivenBack(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	ctx := bg(t)
	addr := srv.Addr()
	cases := []struct {
		name, dsn string
		table     string
		drop      bool // drop the table once the Locker is made
		readOnly  bool
		want      error // besides lockmw.ErrUnavailable, when not nil
	}{
		{name: "ConnectionRefused", dsn: dsn(servertest.ClosedAddr(t), "", "", mariatest.Database)},
		{name: "UnknownDatabase", dsn: dsn(addr, "", "", "no_such_db")},
		{name: "AccessDenied", dsn: dsn(addr, "", "wrong", mariatest.Database)},
		{name: "NoDatabase", dsn: dsn(addr, "", "", "")},
		{name: "MissingTable", dsn: srv.DSN(""), table: "dropped", drop: true, want: mysql.ErrMissingTable},
		{name: "ReadOnly", dsn: srv.User(t, "app"), readOnly: true, want: mysql.ErrReadOnly},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.drop {
				if err := mysql.CreateTable(ctx, srv.DB(t, ""), c.table); err != nil {
					t.Fatal(err)
				}
			}
			logs := &lockmwtest.Logs{}
			table := c.table
			if table == "" {
				table = mysql.DefaultTable
			}
			l, err := mysql.NewWithTable(openDB(t, c.dsn), table, lockmw.WithTTL(testTTL), lockmw.WithLogger(slog.New(logs)))
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if c.drop {
				srv.Exec(t, "DROP TABLE "+c.table+", "+c.table+"_queue, "+c.table+"_claims, "+c.table+"_fence")
			}
			if c.readOnly {
				srv.SetReadOnly(t, true)
				defer srv.SetReadOnly(t, false)
			}
			for _, fair := range []bool{false, true} {
				var err error
				if fair {
					_, err = l.Acquire(ctx, "k", lockmw.Fair())
				} else {
					_, err = l.TryAcquire(ctx, "k")
				}
				if err == nil {
					t.Fatal("the acquisition succeeded")
				}
				if c.want != nil && !errors.Is(err, c.want) {
					t.Errorf("error %v, want one matching %v", err, c.want)
				}
			}
			_ = l.Close()
			if got := logs.Find(slog.LevelDebug, "could not give back"); len(got) > 0 {
				t.Errorf("%d give-back logs after failures that took nothing: %q", len(got), lockmwtest.Texts(got))
			}
			for _, r := range logs.Find(slog.LevelDebug, "") {
				if strings.Contains(lockmwtest.Text(r), "\n") {
					t.Errorf("a log of more than one line: %q", lockmwtest.Text(r))
				}
			}
		})
	}
}

// New looks at the server once: a server it cannot reach, or that refuses
// the login, is warned about once, with the cause (and the address, when
// the driver's error names it), and the Locker is made all the same; a
// reachable server gives no warning.
func TestStartupChecks(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	closed := servertest.ClosedAddr(t)
	cases := []struct {
		name, dsn string
		warn      []string // what the one warning says; none when nil
	}{
		{name: "Unreachable", dsn: dsn(closed, "", "", mariatest.Database), warn: []string{"address=" + closed, "connection refused"}},
		{name: "LoginRefused", dsn: dsn(srv.Addr(), "", "wrong", mariatest.Database), warn: []string{"Access denied"}},
		{name: "Reachable", dsn: srv.DSN("")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			logs := &lockmwtest.Logs{}
			l, err := mysql.New(openDB(t, c.dsn), lockmw.WithTTL(testTTL), lockmw.WithLogger(slog.New(logs)))
			if err != nil {
				t.Fatalf("New: %v, want a Locker", err)
			}
			defer l.Close()
			warns := lockmwtest.Texts(logs.Find(slog.LevelWarn, ""))
			if c.warn == nil {
				if len(warns) > 0 {
					t.Fatalf("New warned: %q", warns)
				}
				return
			}
			if len(warns) != 1 {
				t.Fatalf("New's warnings: %q, want one", warns)
			}
			for _, w := range c.warn {
				if !strings.Contains(warns[0], w) {
					t.Errorf("New's warning %q does not say %q", warns[0], w)
				}
			}
			if _, err := l.TryAcquire(bg(t), "k"); !errors.Is(err, lockmw.ErrUnavailable) {
				t.Errorf("TryAcquire: %v, want ErrUnavailable", err)
			}
		})
	}
}

// Tables made by an earlier version lack a column (the queue's handover,
// made before hand-overs; the lock table's queue_seen, made before plain
// attempts skipped the queue of rows no Fair waiter queued for): New
// refuses them with a setup error that says how to migrate, and
// CreateTable (idempotent) migrates them, after which New works. Lockers
// of the earlier version keep working on the migrated tables (their
// statements name the columns they know; handover_internal_test.go runs
// them beside new ones).
func TestNewRefusesUnmigratedTables(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ table, column string }{
		{"lockmw_locks_queue", "handover"},
		{"lockmw_locks", "queue_seen"},
	} {
		t.Run(c.column, func(t *testing.T) {
			t.Parallel()
			srv := startServer(t)
			admin := srv.DB(t, "")
			if _, err := admin.ExecContext(bg(t), "ALTER TABLE "+c.table+" DROP COLUMN "+c.column); err != nil {
				t.Fatal(err)
			}
			_, err := mysql.New(srv.DB(t, ""), lockmw.WithTTL(testTTL))
			if !errors.Is(err, mysql.ErrOldSchema) || !errors.Is(err, lockmw.ErrStoreSetup) {
				t.Fatalf("New on a table without %s: %v, want ErrOldSchema (an ErrStoreSetup)", c.column, err)
			}
			for _, want := range []string{c.column, "mysql.CreateTable", "ALTER TABLE"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("New's error %q does not say %q", err, want)
				}
			}
			schema, err := mysql.Schema("")
			if err != nil || !strings.Contains(schema, "ADD COLUMN IF NOT EXISTS "+c.column) {
				t.Fatalf("Schema has no migration adding %s: %v\n%s", c.column, err, schema)
			}
			if err := mysql.CreateTable(bg(t), admin, ""); err != nil {
				t.Fatal(err)
			}
			l := newLocker(t, srv)
			lease, err := l.Acquire(bg(t), "migrated")
			if err != nil {
				t.Fatalf("Acquire after CreateTable migrated the table: %v", err)
			}
			if err := lease.Release(bg(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
}
