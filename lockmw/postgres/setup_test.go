package postgres_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/pgtest"
	"github.com/lockmw/lockmw/internal/testkit/servertest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/postgres"
)

// An acquisition that failed without running (no connection, a refused
// login, a missing table, a read-only server) took nothing: the Locker
// neither gives it back nor warns that it could not, and its error is one
// line that says what is wrong.
func TestFailureThatRanNothingIsNotGivenBack(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	addr := srv.Addr()
	ctx := bg(t)
	cases := []struct {
		name, url string
		schema    postgres.Schema
		drop      bool  // drop the schema's tables once the Locker is made
		want      error // besides lockmw.ErrUnavailable, when not nil
	}{
		{name: "ConnectionRefused", url: pgtest.URLFor(servertest.ClosedAddr(t))},
		{name: "TwoHostsRefused", url: "postgres://postgres@" + servertest.ClosedAddr(t) + "," + servertest.ClosedAddr(t) + "/postgres?sslmode=disable"},
		{name: "UnknownDatabase", url: "postgres://postgres@" + addr + "/no_such_db?sslmode=disable"},
		{name: "UnknownRole", url: "postgres://no_such_role@" + addr + "/postgres?sslmode=disable"},
		{name: "MissingTable", url: srv.URL(), schema: postgres.Schema{Table: "dropped"}, drop: true, want: postgres.ErrNoTable},
		{name: "ReadOnly", url: srv.URL() + "&default_transaction_read_only=on", want: postgres.ErrReadOnly},
		{name: "ReadWriteAttrsOnStandby", url: srv.URL() + "&default_transaction_read_only=on&target_session_attrs=read-write", want: postgres.ErrReadOnly},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.drop {
				if err := c.schema.CreateTable(ctx, newPool(t, srv.URL())); err != nil {
					t.Fatal(err)
				}
			}
			logs := &lockmwtest.Logs{}
			l, err := c.schema.New(newPool(t, c.url), lockmw.WithTTL(testTTL), lockmw.WithLogger(slog.New(logs)))
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			var lease *lockmw.Lease
			if c.drop {
				lease, err = l.TryAcquire(ctx, "held")
				if err != nil {
					t.Fatal(err)
				}
				srv.Exec(t, "DROP TABLE dropped, dropped_queue, dropped_claims; DROP SEQUENCE dropped_fence")
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
				if strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), ":;") {
					t.Errorf("the error is more than one line: %q", err)
				}
			}
			if c.drop {
				// A release that fails says so in one line too.
				if err := lease.Release(ctx); err == nil || strings.Contains(err.Error(), "\n") {
					t.Errorf("Release on dropped tables: %q, want an error of one line", err)
				}
			}
			_ = l.Close()
			for _, r := range logs.Find(slog.LevelDebug, "") {
				if strings.Contains(lockmwtest.Text(r), "\n") {
					t.Errorf("a log of more than one line: %q", lockmwtest.Text(r))
				}
			}
			if got := logs.Find(slog.LevelDebug, "could not give back"); len(got) > 0 {
				t.Errorf("%d give-back logs after failures that took nothing: %q", len(got), lockmwtest.Texts(got))
			}
		})
	}
}

// New looks at the server once: a reachable server without the tables
// fails New, saying how to create them; an unreachable one is warned about
// once, with its address and the cause, and the Locker is made all the
// same. Tables dropped later are a setup error, not an outage.
func TestStartupChecks(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	ctx := bg(t)

	t.Run("MissingTables", func(t *testing.T) {
		_, err := postgres.Schema{Table: "absent"}.New(newPool(t, srv.URL()), lockmw.WithTTL(testTTL))
		if !errors.Is(err, postgres.ErrNoTable) || !errors.Is(err, lockmw.ErrStoreSetup) || errors.Is(err, lockmw.ErrUnavailable) ||
			!strings.Contains(err.Error(), "CreateTable") || !strings.Contains(err.Error(), `"absent_queue"`) {
			t.Fatalf("New without the tables: %v, want ErrNoTable and lockmw.ErrStoreSetup (not ErrUnavailable), naming the tables and CreateTable", err)
		}
	})

	t.Run("Unreachable", func(t *testing.T) {
		addr := servertest.ClosedAddr(t)
		logs := &lockmwtest.Logs{}
		l, err := postgres.New(newPool(t, pgtest.URLFor(addr)), lockmw.WithTTL(testTTL), lockmw.WithLogger(slog.New(logs)))
		if err != nil {
			t.Fatalf("New on an unreachable server: %v, want a Locker", err)
		}
		defer l.Close()
		warns := logs.Find(slog.LevelWarn, "")
		if len(warns) != 1 || !strings.Contains(lockmwtest.Text(warns[0]), addr) || !strings.Contains(lockmwtest.Text(warns[0]), "connection refused") {
			t.Fatalf("warnings of New on an unreachable server: %q, want one naming %s and the cause", lockmwtest.Texts(warns), addr)
		}
		if _, err := l.TryAcquire(ctx, "k"); !errors.Is(err, lockmw.ErrUnavailable) {
			t.Fatalf("TryAcquire on an unreachable server: %v, want ErrUnavailable", err)
		}
	})

	t.Run("Reachable", func(t *testing.T) {
		logs := &lockmwtest.Logs{}
		l, err := postgres.New(newPool(t, srv.URL()), lockmw.WithTTL(testTTL), lockmw.WithLogger(slog.New(logs)))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if warns := logs.Find(slog.LevelWarn, ""); len(warns) > 0 {
			t.Fatalf("New on a reachable server warned: %q", lockmwtest.Texts(warns))
		}
	})

	t.Run("DroppedLater", func(t *testing.T) {
		sc := postgres.Schema{Table: "later"}
		if err := sc.CreateTable(ctx, newPool(t, srv.URL())); err != nil {
			t.Fatal(err)
		}
		l, err := sc.New(newPool(t, srv.URL()), lockmw.WithTTL(testTTL))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		srv.Exec(t, "DROP TABLE later, later_queue, later_claims; DROP SEQUENCE later_fence")
		_, err = l.TryAcquire(ctx, "k")
		if !errors.Is(err, postgres.ErrNoTable) || !errors.Is(err, lockmw.ErrStoreSetup) || errors.Is(err, lockmw.ErrUnavailable) {
			t.Fatalf("TryAcquire on dropped tables: %v, want ErrNoTable and lockmw.ErrStoreSetup, not ErrUnavailable", err)
		}
	})
}
