// Command cache runs a product-price service on a real SQL database with
// cachelock in front of it: several instances (each with its own Redis
// client, Locker and Cache, as separate processes would have) serve
// concurrent readers through Fetch and concurrent price changes through
// Update, whose database writes are fenced. Each product is cached under
// two keys, by id and by SKU; an Update fences the row and invalidates
// both. Readers accept stale values for a window (WithStaleReads), and the
// program reports the longest staleness any reader saw against it. A
// writer that stalls past its lock is then fenced out by the database. At
// the end it checks that what the cache serves equals what the database
// holds, for every product and key. It exits with status 1 if the longest
// staleness exceeds the window plus the writers' commit-to-invalidation
// time, or if the cache and the database differ at the end. -h lists the
// flags.
//
// The database is SQLite through modernc.org/sqlite (pure Go) in a
// temporary file unless -driver and -dsn say otherwise; the queries use $N
// placeholders, which SQLite and PostgreSQL both accept (link another driver
// with a blank import). With REDIS_ADDR set it uses that Redis; otherwise it
// starts an embedded in-process Redis:
//
//	go run ./examples/cache
//	REDIS_ADDR=localhost:6379 go run ./examples/cache -readers 16 -duration 10s -stale 1s
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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"

	"github.com/lockmw/lockmw/cachelock"
	"github.com/lockmw/lockmw/examples/internal/demo"
	"github.com/lockmw/lockmw/lockmw"
)

// setPrice is the fenced UPDATE of price ($1) for product id ($2):
// FencedExec binds the writer's fencing token at {fence}.
const setPrice = `UPDATE products SET price = $1, fence = {fence} WHERE id = $2 AND fence < {fence}`

func main() {
	driver := flag.String("driver", "sqlite", "database/sql driver name")
	dsn := flag.String("dsn", "", "data source name (default: a SQLite file in a temporary directory)")
	products := flag.Int("products", 5, "number of products")
	instances := flag.Int("instances", 3, "service instances (Redis client, Locker and Cache each)")
	readers := flag.Int("readers", 8, "concurrent readers")
	writers := flag.Int("writers", 4, "concurrent writers")
	duration := flag.Duration("duration", 3*time.Second, "how long readers and writers run")
	writeEvery := flag.Duration("write-every", 50*time.Millisecond, "pause between one writer's price changes")
	window := flag.Duration("stale", 250*time.Millisecond, "how long readers accept an invalidated value (WithStaleReads)")
	loadDelay := flag.Duration("load-delay", 20*time.Millisecond, "extra time each database load takes")
	flag.Parse()

	addr, stopRedis := demo.RedisAddr()
	defer stopRedis()
	db, cleanup := openDB(*driver, *dsn, *products)
	defer cleanup()

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	var svcs []*service
	for i := range *instances {
		svcs = append(svcs, newService(fmt.Sprintf("instance-%d", i+1), addr, db, logger, *loadDelay,
			cachelock.WithStaleReads(*window)))
	}
	defer func() {
		for _, s := range svcs {
			s.close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	fmt.Printf("== Act 1: %d readers and %d writers on %d products (each under 2 keys) through %d instances for %v\n",
		*readers, *writers, *products, *instances, *duration)
	var reads, updated atomic.Int64
	var stale staleness
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
				id, start := 1+rand.IntN(*products), time.Now()
				v, err := svc.price(ctx, id, rand.IntN(2) == 0)
				if err != nil {
					log.Fatalf("%s: read: %v", svc.name, err)
				}
				stale.read(id, start, v)
				reads.Add(1)
			}
		}()
	}
	for w := range *writers {
		writeWG.Add(1)
		go func() {
			defer writeWG.Done()
			svc := svcs[w%len(svcs)]
			deadline := time.Now().Add(*duration)
			for time.Now().Before(deadline) {
				time.Sleep(*writeEvery)
				if err := svc.setPrice(ctx, 1+rand.IntN(*products), 100+rand.IntN(900), &stale); err != nil {
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
	if !stale.report(*window) {
		os.Exit(1)
	}

	fmt.Println()
	fmt.Println("== Act 2: a writer stalls past its lock; a newer writer commits; the database fences the late write out")
	stalledWriter(ctx, svcs[0], svcs[len(svcs)-1], addr, db, logger)

	fmt.Println()
	fmt.Println("== Check: the cache equals the database, under both keys")
	ok := true
	for id := 1; id <= *products; id++ {
		stored, err := loadPrice(ctx, db, id)
		if err != nil {
			log.Fatal(err)
		}
		for _, bySKU := range []bool{false, true} {
			cached, err := svcs[id%len(svcs)].price(ctx, id, bySKU)
			if err != nil {
				log.Fatal(err)
			}
			mark := "ok"
			if string(cached) != string(stored) {
				mark, ok = "STALE", false
			}
			fmt.Printf("%-19s cache %-9s database %-9s %s\n", key(id, bySKU)+":", cached, stored, mark)
		}
	}
	fmt.Println("cache equals database:", ok)
	if !ok {
		os.Exit(1)
	}
}

// service is one instance of the product-price service.
type service struct {
	name      string
	client    *redis.Client
	locker    *lockmw.Locker
	cache     *cachelock.Cache
	db        *sql.DB
	loadDelay time.Duration
	loads     atomic.Int64
}

func newService(name, addr string, db *sql.DB, logger *slog.Logger, loadDelay time.Duration, opts ...cachelock.Option) *service {
	client := demo.RedisClient(addr) // the client settings a lock needs
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
	return &service{name: name, client: client, locker: locker, cache: cache, db: db, loadDelay: loadDelay}
}

func (s *service) close() {
	_ = s.locker.Close()
	_ = s.client.Close()
}

// key is the cache key of product id, by id or by SKU: one row, two keys.
func key(id int, bySKU bool) string {
	if bySKU {
		return "product-sku:SKU-" + strconv.Itoa(id)
	}
	return "product:" + strconv.Itoa(id)
}

// resource is what Update locks and fences for product id: the row.
func resource(id int) string { return "products/" + strconv.Itoa(id) }

// price reads product id's price and fence ("price@fence") through the
// cache, by id or by SKU.
func (s *service) price(ctx context.Context, id int, bySKU bool) ([]byte, error) {
	return s.cache.Fetch(ctx, key(id, bySKU), time.Minute, func(ctx context.Context) ([]byte, error) {
		s.loads.Add(1)
		v, err := loadPrice(ctx, s.db, id)
		if s.loadDelay > 0 {
			time.Sleep(s.loadDelay) // a slower database: loads overlap writes
		}
		return v, err
	})
}

// setPrice changes product id's price in one transaction, fenced on the
// row, then invalidates both of its cache keys. stale, if not nil, learns
// when the write committed and when its invalidation was done.
func (s *service) setPrice(ctx context.Context, id, price int, stale *staleness) error {
	var committed time.Time
	err := s.cache.Update(ctx, resource(id), func(ctx context.Context, fence uint64) error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := cachelock.FencedExec(ctx, tx, cachelock.DollarNumbers, setPrice, fence, price, id); err != nil {
			return err
		}
		committed = time.Now() // just before: the new value may be visible from here
		if err := tx.Commit(); err != nil {
			return err
		}
		if stale != nil {
			stale.write(id, fence, committed)
		}
		return nil
	}, cachelock.Invalidating(key(id, false), key(id, true)))
	if err == nil && stale != nil {
		stale.invalidated(time.Since(committed))
	}
	return err
}

// stalledWriter shows the fence at work: slow's lock (300ms, no watchdog)
// expires while its write is stalled; fast then changes the price; slow's
// late UPDATE changes no row and its Update reports the lost lock.
func stalledWriter(ctx context.Context, base, fast *service, addr string, db *sql.DB, logger *slog.Logger) {
	slow := newService("stalled-writer", addr, db, logger, 0,
		cachelock.WithLockOptions(lockmw.WithLeaseTTL(300*time.Millisecond), lockmw.WithoutWatchdog()))
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
			// The late UPDATE, already on its way to the database.
			_, err := cachelock.FencedExec(context.WithoutCancel(wctx), db, cachelock.DollarNumbers, setPrice, fence, 1, id)
			return err
		}, cachelock.Invalidating(key(id, false), key(id, true)))
	}()
	slowFence := <-lost
	fmt.Printf("%s: lock lost while stalled (fence %d)\n", slow.name, slowFence)
	if err := fast.setPrice(ctx, id, 777, nil); err != nil {
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
	v, err := base.price(ctx, id, true)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s reads product %d: %s\n", base.name, id, v)
}

// loadPrice reads product id's price and the fence of its last write, as
// "price@fence"; a missing product is cachelock.ErrNotFound, which the
// cache remembers for a while.
func loadPrice(ctx context.Context, db *sql.DB, id int) ([]byte, error) {
	var price, fence int64
	err := db.QueryRowContext(ctx, `SELECT price, fence FROM products WHERE id = $1`, id).Scan(&price, &fence)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, cachelock.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, "%d@%d", price, fence), nil
}

// staleness measures how old the values readers get are: a value is stale
// from the moment a newer write of its row committed.
type staleness struct {
	mu      sync.Mutex
	commits map[int][]commit // per product, in fence order
	oldest  time.Duration    // the longest a reader was served a superseded value
	stale   int              // reads served a superseded value
	lag     time.Duration    // the longest from a commit to its invalidation's end
}

type commit struct {
	fence uint64
	at    time.Time
}

func (s *staleness) write(id int, fence uint64, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.commits == nil {
		s.commits = make(map[int][]commit)
	}
	s.commits[id] = append(s.commits[id], commit{fence, at})
}

func (s *staleness) invalidated(lag time.Duration) {
	s.mu.Lock()
	s.lag = max(s.lag, lag)
	s.mu.Unlock()
}

// read records that a read of product id started at start got v.
func (s *staleness) read(id int, start time.Time, v []byte) {
	_, f, _ := strings.Cut(string(v), "@")
	fence, err := strconv.ParseUint(f, 10, 64)
	if err != nil {
		log.Fatalf("product %d: unexpected cached value %q", id, v)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The first write after the value's that committed before the read.
	for _, c := range s.commits[id] {
		if c.fence > fence && c.at.Before(start) {
			s.stale++
			s.oldest = max(s.oldest, start.Sub(c.at))
			return
		}
	}
}

// report prints the longest staleness against the window and its bound,
// and says whether it was within the bound.
func (s *staleness) report(window time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A value is served stale until the window, counted from the
	// invalidation that followed the commit superseding it, has passed.
	bound := window + s.lag + 2*time.Millisecond // Redis keeps time in ms
	ok := s.oldest <= bound
	fmt.Printf("staleness: %d reads got a superseded value; the oldest was %v old (stale window %v; bound: window + longest commit-to-invalidation %v = %v) %s\n",
		s.stale, s.oldest.Round(time.Millisecond), window, s.lag.Round(time.Millisecond), bound.Round(time.Millisecond), map[bool]string{true: "ok", false: "EXCEEDED"}[ok])
	return ok
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
