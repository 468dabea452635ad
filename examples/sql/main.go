// Command sql shows cachelock with its Locker on PostgreSQL, in the same
// database as the data: the fence each price change checks in its UPDATE
// is issued by that database (lockmw/postgres draws it from a sequence),
// while the cache itself stays in Redis. Three instances (each with its
// own pool, Locker, Redis client and Cache, as separate processes would
// have) serve readers through Fetch and price changes through Update;
// then a writer stalls past its lock, a newer writer commits, and the
// database refuses the late write by its fence. At the end it checks that
// the cache equals the database. It exits with status 1 if anything
// differs.
//
// It needs a PostgreSQL database, named by DATABASE_URL; it creates
// lockmw's tables there (postgres.CreateTable) and a table
// lockmw_example_products, which it drops and recreates. With REDIS_ADDR
// set it uses that Redis; otherwise an embedded in-process one:
//
//	DATABASE_URL=postgres://user:pass@localhost:5432/db go run ./examples/sql
//
// The example is a module of its own, listed in the repository's go.work,
// so that the lockmw module does not depend on pgx.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/cachelock"
	"github.com/lockmw/lockmw/examples/internal/demo"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/postgres"
)

// setPrice is the fenced UPDATE of price ($1) for product id ($2):
// FencedExec binds the writer's fencing token at {fence}.
const setPrice = `UPDATE lockmw_example_products SET price = $1, fence = {fence} WHERE id = $2 AND fence < {fence}`

const products = 5

func main() {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		fmt.Fprint(os.Stderr, `DATABASE_URL is not set: this example needs a PostgreSQL database.
For example (Debian: apt-get install postgresql):

	DATABASE_URL=postgres://postgres@localhost:5432/postgres?sslmode=disable go run ./examples/sql

It creates lockmw's tables there and a table lockmw_example_products.
`)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	redisAddr, stopRedis := demo.RedisAddr()
	defer stopRedis()
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer admin.Close()
	if err := postgres.CreateTable(ctx, admin); err != nil {
		log.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `DROP TABLE IF EXISTS lockmw_example_products;
		CREATE TABLE lockmw_example_products (id int PRIMARY KEY, price bigint NOT NULL, fence bigint NOT NULL DEFAULT 0);
		INSERT INTO lockmw_example_products (id, price) SELECT g, 100 FROM generate_series(1, 5) g`); err != nil {
		log.Fatalf("preparing the database: %v", err)
	}

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	var svcs []*service
	for i := range 3 {
		svcs = append(svcs, newService(ctx, fmt.Sprintf("instance-%d", i+1), url, redisAddr, logger))
	}
	defer func() {
		for _, s := range svcs {
			s.close()
		}
	}()

	fmt.Println("== Act 1: 8 readers and 4 writers on 5 products through 3 instances for 2s; locks and fences in PostgreSQL")
	var reads, writes atomic.Int64
	var maxFence atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for r := range 8 {
		wg.Go(func() {
			svc := svcs[r%len(svcs)]
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := svc.price(ctx, 1+rand.IntN(products)); err != nil {
					log.Fatalf("%s: read: %v", svc.name, err)
				}
				reads.Add(1)
			}
		})
	}
	var writers sync.WaitGroup
	for w := range 4 {
		writers.Go(func() {
			svc := svcs[w%len(svcs)]
			for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
				fence, err := svc.setPrice(ctx, 1+rand.IntN(products), 100+rand.IntN(900))
				if err != nil {
					log.Fatalf("%s: update: %v", svc.name, err)
				}
				for cur := maxFence.Load(); fence > cur && !maxFence.CompareAndSwap(cur, fence); cur = maxFence.Load() {
				}
				writes.Add(1)
			}
		})
	}
	writers.Wait()
	close(stop)
	wg.Wait()
	fmt.Printf("%d reads, %d price changes; highest fence %d (from the database's sequence)\n", reads.Load(), writes.Load(), maxFence.Load())

	fmt.Println()
	fmt.Println("== Act 2: a writer stalls past its lock; a newer writer commits; the database fences the late write out")
	stalledWriter(ctx, svcs[0], svcs[1], url, redisAddr, logger)

	fmt.Println()
	fmt.Println("== Check: the cache equals the database")
	ok := true
	for id := 1; id <= products; id++ {
		stored, err := loadPrice(ctx, svcs[0].db, id)
		if err != nil {
			log.Fatal(err)
		}
		cached, err := svcs[id%len(svcs)].price(ctx, id)
		if err != nil {
			log.Fatal(err)
		}
		mark := "ok"
		if string(cached) != string(stored) {
			mark, ok = "STALE", false
		}
		fmt.Printf("product %d: cache %-9s database %-9s %s\n", id, cached, stored, mark)
	}
	fmt.Println("cache equals database:", ok)
	if !ok {
		os.Exit(1)
	}
}

// service is one instance: its own pool (the Locker's and the data's),
// Locker, Redis client and Cache.
type service struct {
	name   string
	pool   *pgxpool.Pool
	db     *sql.DB
	client *redis.Client
	locker *lockmw.Locker
	cache  *cachelock.Cache
}

func newService(ctx context.Context, name, url, redisAddr string, logger *slog.Logger, lockOpts ...lockmw.AcquireOption) *service {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	locker, err := postgres.New(pool, lockmw.WithTTL(2*time.Second), lockmw.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: redisAddr, DialTimeout: time.Second,
		ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1, ContextTimeoutEnabled: true})
	opts := []cachelock.Option{cachelock.WithPrefix("price:"), cachelock.WithLogger(logger)}
	if len(lockOpts) > 0 {
		opts = append(opts, cachelock.WithLockOptions(lockOpts...))
	}
	cache, err := cachelock.New(client, locker, opts...)
	if err != nil {
		log.Fatal(err)
	}
	return &service{name: name, pool: pool, db: stdlib.OpenDBFromPool(pool), client: client, locker: locker, cache: cache}
}

func (s *service) close() {
	_ = s.locker.Close()
	_ = s.client.Close()
	_ = s.db.Close()
	s.pool.Close()
}

func key(id int) string      { return "product:" + strconv.Itoa(id) }
func resource(id int) string { return "products/" + strconv.Itoa(id) }

// price reads product id's "price@fence" through the cache.
func (s *service) price(ctx context.Context, id int) ([]byte, error) {
	return s.cache.Fetch(ctx, key(id), time.Minute, func(ctx context.Context) ([]byte, error) {
		return loadPrice(ctx, s.db, id)
	})
}

// setPrice changes product id's price, fenced on the row with the fence
// PostgreSQL issued to this writer's lock, and invalidates its cache key.
func (s *service) setPrice(ctx context.Context, id, price int) (uint64, error) {
	var used uint64
	err := s.cache.Update(ctx, resource(id), func(ctx context.Context, fence uint64) error {
		used = fence
		_, err := cachelock.FencedExec(ctx, s.db, cachelock.DollarNumbers, setPrice, fence, price, id)
		return err
	}, cachelock.Invalidating(key(id)))
	return used, err
}

// stalledWriter: slow's lock (300ms, no watchdog) expires while its write
// is stalled; fast then changes the price; slow's late UPDATE changes no
// row, and its Update reports the lost lock as cachelock.ErrFenced.
func stalledWriter(ctx context.Context, base, fast *service, url, redisAddr string, logger *slog.Logger) {
	slow := newService(ctx, "stalled-writer", url, redisAddr, logger, lockmw.WithLeaseTTL(300*time.Millisecond), lockmw.WithoutWatchdog())
	defer slow.close()
	const id = 1
	lost := make(chan uint64)
	fastDone := make(chan struct{})
	slowDone := make(chan error)
	go func() {
		slowDone <- slow.cache.Update(ctx, resource(id), func(wctx context.Context, fence uint64) error {
			<-wctx.Done() // stalled: the lock expires
			lost <- fence
			<-fastDone
			_, err := cachelock.FencedExec(context.WithoutCancel(wctx), slow.db, cachelock.DollarNumbers, setPrice, fence, 1, id)
			return err
		}, cachelock.Invalidating(key(id)))
	}()
	slowFence := <-lost
	fmt.Printf("%s: lock lost while stalled (fence %d)\n", slow.name, slowFence)
	fence, err := fast.setPrice(ctx, id, 777)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: set product %d to 777 with fence %d\n", fast.name, id, fence)
	close(fastDone)
	err = <-slowDone
	fmt.Printf("%s: Update returned: lost=%v fenced=%v\n", slow.name, errors.Is(err, lockmw.ErrLost), errors.Is(err, cachelock.ErrFenced))
	if !errors.Is(err, cachelock.ErrFenced) {
		log.Fatalf("the late write was not fenced out: %v", err)
	}
	v, err := base.price(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s reads product %d: %s\n", base.name, id, v)
}

// loadPrice reads product id's price and the fence of its last write.
func loadPrice(ctx context.Context, db *sql.DB, id int) ([]byte, error) {
	var price, fence int64
	err := db.QueryRowContext(ctx, `SELECT price, fence FROM lockmw_example_products WHERE id = $1`, id).Scan(&price, &fence)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, cachelock.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, "%d@%d", price, fence), nil
}
