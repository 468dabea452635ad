package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/mysql"
)

// A Locker on MariaDB: the lease's Context ends if the lock is lost, and
// its Fence rises from one holder to the next.
func ExampleNew() {
	db, err := sql.Open("mysql", "app:secret@tcp(localhost:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	// Once, or run the SQL of mysql.Schema("") in a migration.
	if err := mysql.CreateTable(ctx, db, ""); err != nil {
		log.Fatal(err)
	}

	locker, err := mysql.New(db, lockmw.WithTTL(5*time.Second))
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
	// lock is lost, before another holder can get it.
	<-time.After(time.Second)
	if err := lease.Context().Err(); err != nil {
		log.Print("lost: ", context.Cause(lease.Context()))
	}
}

// The schema, for a migration of one's own.
func ExampleSchema() {
	ddl, err := mysql.Schema("jobs_locks")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ddl[:len("CREATE TABLE IF NOT EXISTS `jobs_locks`")])
	// Output:
	// CREATE TABLE IF NOT EXISTS `jobs_locks`
}
