// Command cache runs a product-price service on a real SQL database with
// cachelock in front of it: several instances (each with its own Redis
// client, Locker and Cache, as separate processes would have) serve
// concurrent readers through Fetch and concurrent price changes through
// Update, whose database writes are fenced. A writer that stalls past its
// lock is then fenced out by the database. At the end it checks that what
// the cache serves equals what the database holds, for every product.
//
// The database is SQLite through modernc.org/sqlite (pure Go) in a
// temporary file unless -driver and -dsn say otherwise; the queries use $N
// placeholders, which SQLite and PostgreSQL both accept (link another driver
// with a blank import). With REDIS_ADDR set it uses that Redis; otherwise it
// starts an embedded in-process Redis:
//
//	go run ./examples/cache
//	REDIS_ADDR=localhost:6379 go run ./examples/cache -readers 16 -updates 50
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"

	"github.com/lockmw/lockmw/cachelock"
	"github.com/lockmw/lockmw/lockmw"
)

// setPrice is the fenced UPDATE: $1 is the writer's fencing token.
const setPrice = `UPDATE products SET price = $2, fence = $1 WHERE id = $3 AND fence < $1`

func main() {
	driver := flag.String("driver", "sqlite", "database/sql driver name")
	dsn := flag.String("dsn", "", "data source name (default: a SQLite file in a temporary directory)")
	products := flag.Int("products", 5, "number of products")
	instances := flag.Int("instances", 3, "service instances (Redis client, Locker and Cache each)")
	readers := flag.Int("readers", 8, "concurrent readers")
	writers := flag.Int("writers", 4, "concurrent writers")
	updates := flag.Int("updates", 25, "price changes per writer")
	flag.Parse()

	addr, stopRedis := redisAddr()
	defer stopRedis()
	db, cleanup := openDB(*driver, *dsn, *products)
	defer cleanup()

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	var svcs []*service
	for i := range *instances {
		svcs = append(svcs, newService(fmt.Sprintf("instance-%d", i+1), addr, db, logger))
	}
	defer func() {
		for _, s := range svcs {
			s.close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	fmt.Printf("== Act 1: %d readers and %d writers on %d products through %d instances\n",
		*readers, *writers, *products, *instances)
	var reads, updated atomic.Int64
	stop := make(chan struct{})
	var readWG, writeWG sync.WaitGroup
	for r := range *readers {
		readWG.Add(1)
		go func() {
			defer readWG.Done()
			svc := svcs[r%len(svcs)]
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := svc.price(ctx, 1+rand.IntN(*products)); err != nil {
					log.Fatalf("%s: read: %v", svc.name, err)
				}
				reads.Add(1)
			}
		}()
	}
	for w := range *writers {
		writeWG.Add(1)
		go func() {
			defer writeWG.Done()
			svc := svcs[w%len(svcs)]
			for range *updates {
				if err := svc.setPrice(ctx, 1+rand.IntN(*products), 100+rand.IntN(900)); err != nil {
					log.Fatalf("%s: update: %v", svc.name, err)
				}
				updated.Add(1)
			}
		}()
	}
	writeWG.Wait()
	close(stop)
	readWG.Wait()
	var loads int64
	for _, s := range svcs {
		loads += s.loads.Load()
	}
	fmt.Printf("%d reads, %d loads from the database, %d price changes\n", reads.Load(), loads, updated.Load())

	fmt.Println()
	fmt.Println("== Act 2: a writer stalls past its lock; a newer writer commits; the database fences the late write out")
	stalledWriter(ctx, svcs[0], svcs[len(svcs)-1], addr, db, logger)

	fmt.Println()
	fmt.Println("== Check: the cache equals the database")
	ok := true
	for id := 1; id <= *products; id++ {
		cached, err := svcs[id%len(svcs)].price(ctx, id)
		if err != nil {
			log.Fatal(err)
		}
		stored, err := loadPrice(ctx, db, id)
		if err != nil {
			log.Fatal(err)
		}
		mark := "ok"
		if string(cached) != string(stored) {
			mark, ok = "STALE", false
		}
		fmt.Printf("product %d: cache %s, database %s  %s\n", id, cached, stored, mark)
	}
	fmt.Println("cache equals database:", ok)
	if !ok {
		os.Exit(1)
	}
}

// service is one instance of the product-price service.
type service struct {
	name   string
	client *redis.Client
	locker *lockmw.Locker
	cache  *cachelock.Cache
	db     *sql.DB
	loads  atomic.Int64
}

func newService(name, addr string, db *sql.DB, logger *slog.Logger, opts ...cachelock.Option) *service {
	client := redis.NewClient(&redis.Options{Addr: addr})
	locker, err := lockmw.New(client, lockmw.WithTTL(2*time.Second), lockmw.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	cache, err := cachelock.New(client, locker, append([]cachelock.Option{
		cachelock.WithPrefix("price:"),
		cachelock.WithTTLJitter(0.1),
		cachelock.WithNegativeCaching(10 * time.Second),
		cachelock.WithLogger(logger),
	}, opts...)...)
	if err != nil {
		log.Fatal(err)
	}
	return &service{name: name, client: client, locker: locker, cache: cache, db: db}
}

func (s *service) close() {
	_ = s.locker.Close()
	_ = s.client.Close()
}

func key(id int) string { return "product:" + strconv.Itoa(id) }

// price reads product id's price through the cache.
func (s *service) price(ctx context.Context, id int) ([]byte, error) {
	return s.cache.Fetch(ctx, key(id), time.Minute, func(ctx context.Context) ([]byte, error) {
		s.loads.Add(1)
		return loadPrice(ctx, s.db, id)
	})
}

// setPrice changes product id's price in one transaction, fenced, then
// invalidates the cache.
func (s *service) setPrice(ctx context.Context, id, price int) error {
	return s.cache.Update(ctx, key(id), func(ctx context.Context, fence uint64) error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := cachelock.FencedExec(ctx, tx, setPrice, fence, price, id); err != nil {
			return err
		}
		return tx.Commit()
	})
}

// stalledWriter shows the fence at work: slow's lock (300ms, no watchdog)
// expires while its write is stalled; fast then changes the price; slow's
// late UPDATE changes no row and its Update reports the lost lock.
func stalledWriter(ctx context.Context, base, fast *service, addr string, db *sql.DB, logger *slog.Logger) {
	slow := newService("stalled-writer", addr, db, logger,
		cachelock.WithLockOptions(lockmw.WithLeaseTTL(300*time.Millisecond), lockmw.WithoutWatchdog()))
	defer slow.close()
	const id = 1
	lost := make(chan uint64)
	fastDone := make(chan struct{})
	slowDone := make(chan error)
	go func() {
		slowDone <- slow.cache.Update(ctx, key(id), func(wctx context.Context, fence uint64) error {
			<-wctx.Done() // stalled: the lock expires
			lost <- fence
			<-fastDone
			// The late UPDATE, already on its way to the database.
			_, err := cachelock.FencedExec(context.WithoutCancel(wctx), db, setPrice, fence, 1, id)
			return err
		})
	}()
	slowFence := <-lost
	fmt.Printf("%s: lock lost while stalled (fence %d)\n", slow.name, slowFence)
	if err := fast.setPrice(ctx, id, 777); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: set product %d to 777 with a newer fence\n", fast.name, id)
	close(fastDone)
	err := <-slowDone
	fmt.Printf("%s: Update returned: lost=%v fenced=%v\n", slow.name,
		errors.Is(err, lockmw.ErrLost), errors.Is(err, cachelock.ErrFenced))
	if !errors.Is(err, cachelock.ErrFenced) {
		log.Fatalf("the late write was not fenced out: %v", err)
	}
	v, err := base.price(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s reads product %d: %s\n", base.name, id, v)
}

// loadPrice reads product id's price; a missing product is
// cachelock.ErrNotFound, which the cache remembers for a while.
func loadPrice(ctx context.Context, db *sql.DB, id int) ([]byte, error) {
	var price int64
	err := db.QueryRowContext(ctx, `SELECT price FROM products WHERE id = $1`, id).Scan(&price)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, cachelock.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return []byte(strconv.FormatInt(price, 10)), nil
}

// openDB opens the database and (re)creates the products table. cleanup
// closes it and removes a temporary SQLite file.
func openDB(driver, dsn string, products int) (db *sql.DB, cleanup func()) {
	dir := ""
	if dsn == "" && driver == "sqlite" {
		var err error
		if dir, err = os.MkdirTemp("", "lockmw-cache-example-"); err != nil {
			log.Fatal(err)
		}
		dsn = "file:" + filepath.Join(dir, "shop.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
		fmt.Println("database: SQLite in a temporary file")
	} else {
		fmt.Println("database:", driver)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		log.Fatal(err)
	}
	for _, q := range []string{
		`DROP TABLE IF EXISTS products`,
		`CREATE TABLE products (id INTEGER PRIMARY KEY, price BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)`,
	} {
		if _, err := db.Exec(q); err != nil {
			log.Fatalf("preparing the database: %v", err)
		}
	}
	for id := 1; id <= products; id++ {
		if _, err := db.Exec(`INSERT INTO products (id, price) VALUES ($1, $2)`, id, 100); err != nil {
			log.Fatalf("preparing the database: %v", err)
		}
	}
	return db, func() {
		_ = db.Close()
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
	}
}

// redisAddr returns REDIS_ADDR, or starts an embedded in-process Redis whose
// TTLs run on the real clock.
func redisAddr() (string, func()) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		fmt.Println("using Redis at", addr)
		return addr, func() {}
	}
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	m.ClockTTL(true)
	fmt.Println("REDIS_ADDR not set: using an embedded in-process Redis")
	return m.Addr(), m.Close
}
