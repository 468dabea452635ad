package postgres_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/postgres"
)

// A Locker on PostgreSQL: the lease's Context ends if the lock is lost,
// and its Fence, drawn from the database's sequence, rises from one holder
// to the next.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	// Once, at deployment (or put postgres.SQL() in a migration).
	if err := postgres.CreateTable(ctx, pool); err != nil {
		log.Fatal(err)
	}

	locker, err := postgres.New(pool, lockmw.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	lease, err := locker.Acquire(ctx, "report:daily", lockmw.WithWait(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	fmt.Println("holding report:daily with fence", lease.Fence())
	// Work under lease.Context(): it ends (cause lockmw.ErrLost) if the
	// lock is lost, before another holder can get it. A write to the same
	// database can check the fence in its own statement, e.g.
	//   UPDATE reports SET ..., fence = $1 WHERE id = $2 AND fence < $1
}

// Tables of another name, for example in the application's own schema.
func ExampleSchema() {
	sc := postgres.Schema{Table: "app.locks"}
	sql, err := sc.SQL()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.Contains(sql, `CREATE TABLE IF NOT EXISTS "app"."locks_queue"`))
	// Output: true
}
