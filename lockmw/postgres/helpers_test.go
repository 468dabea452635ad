package postgres_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockmw/lockmw/internal/testkit/pgtest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/postgres"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Cleanup()
	os.Exit(code)
}

// testTTL is the lease TTL of most tests.
const testTTL = 2 * time.Second

// startServer starts a PostgreSQL server with lockmw's tables.
func startServer(t testing.TB) *pgtest.Server {
	t.Helper()
	srv := pgtest.Start(t)
	if err := postgres.CreateTable(bg(t), newPool(t, srv.URL())); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	return srv
}

// newPool returns a pool on url, closed at cleanup; app names its
// connections (application_name) when given.
func newPool(t testing.TB, url string, app ...string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	cfg.ConnConfig.ConnectTimeout = 3 * time.Second
	if len(app) > 0 {
		cfg.ConnConfig.RuntimeParams["application_name"] = app[0]
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newLocker returns a Locker on its own pool to url, closed at cleanup.
func newLocker(t testing.TB, url string, opts ...lockmw.Option) *lockmw.Locker {
	t.Helper()
	l, err := postgres.New(newPool(t, url), append([]lockmw.Option{lockmw.WithTTL(testTTL)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// rows returns what the tables keep for lock key (default prefix): the
// lease row as "lock:TOKEN" and queue entries as "queue:TOKEN".
func rows(t testing.TB, srv *pgtest.Server, key string) []string {
	t.Helper()
	name := quote(postgres.RowName(lockmw.DefaultPrefix, key))
	out := srv.Exec(t, "SELECT 'lock:' || token FROM lockmw_locks WHERE name = "+name+
		" UNION ALL SELECT 'queue:' || token FROM lockmw_locks_queue WHERE name = "+name)
	if out == "" {
		return nil
	}
	return splitLines(out)
}

// queued returns how many unexpired queue entries lock key has.
func queued(t testing.TB, srv *pgtest.Server, key string) int {
	t.Helper()
	n, err := strconv.Atoi(srv.Exec(t, "SELECT count(*) FROM lockmw_locks_queue WHERE expires_at > clock_timestamp() AND name = "+quote(postgres.RowName(lockmw.DefaultPrefix, key))))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func quote(s string) string {
	out := "'"
	for _, r := range s {
		if r == '\'' {
			out += "'"
		}
		out += string(r)
	}
	return out + "'"
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := range len(s) {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// bg is a context for test calls that must not hang.
func bg(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
