// Command inspect prints a table of the locks a lockmw prefix holds on a
// store: each lock's key, whether it is held, the TTL left, its waiters,
// its fence and its holder's description (lockmw.WithHolderInfo), with the
// exactness the store reports ("≤" an upper bound, "?" unknown).
//
// Choose the store with -store (or LOCKMW_STORE) and its address with
// -addr (or LOCKMW_ADDR; several, comma-separated, where the store takes
// several):
//
//	go run ./examples/inspect -store redis -addr localhost:6379 -prefix lockmw:
//	go run ./examples/inspect -store cluster -addr 10.0.0.1:7000,10.0.0.2:7000
//	go run ./examples/inspect -store redlock -addr r1:6379,r2:6379,r3:6379
//	go run ./examples/inspect -store etcd -addr localhost:2379
//	go run ./examples/inspect -store zookeeper -addr localhost:2181
//	go run ./examples/inspect -store postgres -addr postgres://localhost/app
//	go run ./examples/inspect -store mysql -addr 'user:pw@tcp(localhost:3306)/app'
//
// Without a store it runs a demo on an embedded in-process Redis: a held
// lock whose holder describes itself, a lock with queued waiters, and one
// whose unrenewed lease expires between two tables.
//
// It only reads (Locker.Inspect and Locker.Locks). There is no
// force-release: a stuck holder's lock ends with its TTL, and fences make
// a stale holder's writes refusable without one.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lockmw/lockmw/examples/internal/demo"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd"
	"github.com/lockmw/lockmw/lockmw/mysql"
	"github.com/lockmw/lockmw/lockmw/postgres"
	"github.com/lockmw/lockmw/lockmw/zookeeper"
)

func main() {
	storeName := flag.String("store", os.Getenv("LOCKMW_STORE"), "redis, cluster, redlock, etcd, zookeeper, postgres or mysql (default: the demo on an embedded Redis)")
	addr := flag.String("addr", os.Getenv("LOCKMW_ADDR"), "the store's address(es), comma-separated")
	prefix := flag.String("prefix", lockmw.DefaultPrefix, "the Lockers' key prefix")
	limit := flag.Int("limit", 100, "locks per page")
	flag.Parse()
	ctx := context.Background()
	if *storeName == "" {
		if err := runDemo(ctx, os.Stdout); err != nil {
			log.Fatal(err)
		}
		return
	}
	l, err := open(ctx, *storeName, strings.Split(*addr, ","), lockmw.WithPrefix(*prefix), lockmw.WithLogger(demo.Logger()))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	if err := printLocks(ctx, os.Stdout, l, *limit); err != nil {
		log.Fatal(err)
	}
}

// open returns a Locker on the named store at addrs.
func open(ctx context.Context, name string, addrs []string, opts ...lockmw.Option) (*lockmw.Locker, error) {
	switch name {
	case "redis":
		return lockmw.New(demo.RedisClient(addrs[0]), opts...)
	case "cluster":
		return lockmw.New(redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs}), opts...)
	case "redlock":
		var clients []redis.UniversalClient
		for _, a := range addrs {
			clients = append(clients, demo.RedisClient(a))
		}
		return lockmw.NewRedlock(clients, opts...)
	case "etcd":
		cli, err := clientv3.New(clientv3.Config{Endpoints: addrs, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, err
		}
		return etcd.New(cli, opts...)
	case "zookeeper":
		return zookeeper.New(zookeeper.Config{Servers: addrs}, opts...)
	case "postgres":
		pool, err := pgxpool.New(ctx, addrs[0])
		if err != nil {
			return nil, err
		}
		return postgres.New(pool, opts...)
	case "mysql":
		db, err := sql.Open("mysql", addrs[0])
		if err != nil {
			return nil, err
		}
		return mysql.New(db, opts...)
	}
	return nil, fmt.Errorf("unknown store %q: give redis, cluster, redlock, etcd, zookeeper, postgres or mysql", name)
}

// printLocks prints every lock l's prefix holds, a page at a time.
func printLocks(ctx context.Context, w io.Writer, l *lockmw.Locker, limit int) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tHELD\tTTL LEFT\tWAITERS\tFENCE\tHOLDER\tSINCE")
	n := 0
	for cursor := ""; ; {
		page, next, err := l.Locks(ctx, cursor, limit)
		if err != nil {
			return err
		}
		for _, info := range page {
			fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\t%s\t%s\n", info.Key, info.Held,
				show(info.TTL, func(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }),
				show(info.Waiters, func(n int) string { return fmt.Sprint(n) }),
				show(info.Fence, func(f uint64) string { return fmt.Sprint(f) }),
				show(info.Holder, func(s string) string { return s }),
				show(info.Since, func(t time.Time) string { return t.UTC().Format("15:04:05.000") }))
			n++
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if n == 0 {
		fmt.Fprintln(tw, "(no lock held)")
	}
	return tw.Flush()
}

// show formats a reading: "?" when unknown, "≤"/"≥" before a bound.
func show[T any](r lockmw.Reading[T], f func(T) string) string {
	switch r.Is {
	case lockmw.Unknown:
		return "?"
	case lockmw.AtMost:
		return "≤" + f(r.Value)
	case lockmw.AtLeast:
		return "≥" + f(r.Value)
	}
	return f(r.Value)
}
