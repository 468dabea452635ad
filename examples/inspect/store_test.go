package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

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

// -store postgres prints the locks another process holds on PostgreSQL,
// with its description; an unknown store is refused, naming the known ones.
func TestPostgresStore(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Start(t)
	pool, err := pgxpool.New(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.CreateTable(ctx, pool); err != nil {
		t.Fatal(err)
	}
	holder, err := postgres.New(pool, lockmw.WithHolderInfo("billing-1 host-d"))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	lease, err := holder.Acquire(ctx, "invoice:9")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)

	l, err := open(ctx, "postgres", []string{srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var out bytes.Buffer
	if err := printLocks(ctx, &out, l, 10); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "invoice:9") || !strings.Contains(out.String(), "billing-1 host-d") {
		t.Fatalf("the table does not show invoice:9 held by billing-1 host-d:\n%s", out.String())
	}
	if _, err := open(ctx, "mongo", []string{"x"}); err == nil || !strings.Contains(err.Error(), "postgres") {
		t.Fatalf("open(mongo): %v, want an error naming the stores", err)
	}
}
