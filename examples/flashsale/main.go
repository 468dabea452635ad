// Command flashsale is lockmw's headline demo: a flash sale of a limited
// stock of one item, served by three instances of a gin service that share
// one Redis, each with its own lockmw.Locker. Every buyer hits one instance;
// the buy handler reads the stock, "charges the card" for a few
// milliseconds, and writes the stock back: a read-check-write that is not
// atomic on purpose. ginlock holds the lock item:{sku} around it, so the sale
// never sells more than it has. With -nolock the same handler runs without
// the lock, and the sale oversells. Buyers wait for the lock (WithWait(10s))
// rather than get 409; the program prints units sold against units
// available and exits with status 1 if it ever oversold with the lock. Each
// instance's Redis client uses the settings a lock needs (see lockmw's
// package documentation, section "Redis: client settings"). -h lists the
// flags (-buyers, -stock, -instances, -charge, -nolock).
//
// With REDIS_ADDR set it uses that Redis; otherwise it starts an embedded
// in-process Redis, so it runs on a machine with no Redis installed:
//
//	go run ./examples/flashsale
//	go run ./examples/flashsale -nolock
//	REDIS_ADDR=localhost:6379 go run ./examples/flashsale -buyers 500 -stock 100
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/examples/internal/demo"
	"github.com/lockmw/lockmw/ginlock"
	"github.com/lockmw/lockmw/lockmw"
)

const sku = "gopher-plush"

var (
	stockKey  = "flashsale:{" + sku + "}:stock"
	ordersKey = "flashsale:{" + sku + "}:orders"
)

func main() {
	var cfg config
	flag.BoolVar(&cfg.noLock, "nolock", false, "serve the sale without ginlock (it oversells)")
	flag.IntVar(&cfg.buyers, "buyers", 200, "simulated buyers, all arriving at once")
	flag.IntVar(&cfg.stock, "stock", 50, "units for sale")
	flag.IntVar(&cfg.instances, "instances", 3, "server instances sharing the Redis")
	flag.DurationVar(&cfg.charge, "charge", 2*time.Millisecond, "time the handler spends between reading and writing the stock")
	flag.Parse()
	if cfg.buyers < 1 || cfg.stock < 0 || cfg.instances < 1 || cfg.charge < 0 {
		log.Fatal("flashsale: -buyers and -instances must be positive, -stock and -charge not negative")
	}

	addr, stop := demo.RedisAddr()
	defer stop()
	gin.SetMode(gin.ReleaseMode)

	mode := "with ginlock: item:{sku} is held from reading the stock to writing it"
	if cfg.noLock {
		mode = "WITHOUT the lock (-nolock): reads and writes of the stock interleave"
	}
	fmt.Printf("flash sale: %d units of %s, %d buyers, %d server instances sharing one Redis\n",
		cfg.stock, sku, cfg.buyers, cfg.instances)
	fmt.Println(mode)

	res, err := sale(context.Background(), addr, cfg)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println()
	for _, in := range res.instances {
		fmt.Printf("  %-11s sold %d\n", in.name, in.sold)
	}
	fmt.Printf("  buyers answered: %d sold, %d sold out (410), %d busy (409), %d failed, in %v\n",
		res.answers.sold, res.answers.soldOut, res.answers.busy, res.answers.failed, res.elapsed.Round(time.Millisecond))
	fmt.Printf("  stock available: %d\n", cfg.stock)
	fmt.Printf("  units sold:      %d (orders recorded in Redis); stock counter now %d\n", res.sold, res.left)
	over := res.sold - cfg.stock
	switch {
	case over > 0:
		fmt.Printf("  OVERSOLD by %d units: %d buyers paid for a plush that does not exist\n", over, over)
		if !cfg.noLock {
			stop()
			os.Exit(1) // the lock failed: say so through the exit status
		}
	case cfg.noLock:
		fmt.Println("  not oversold this time; raise -buyers or -charge to widen the race")
	default:
		fmt.Println("  never oversold: every read-check-write of the stock ran alone")
		fmt.Println("run it again with -nolock to see the same sale without the lock")
	}
	if res.answers.failed > 0 {
		stop()
		os.Exit(1)
	}
}

// config describes one sale.
type config struct {
	noLock                   bool
	buyers, stock, instances int
	charge                   time.Duration
	// timeout bounds each Redis call of the instances' clients, and ttl is
	// their locks' TTL; zero means the demo's 300 ms and 2 s. The test
	// scales both up alike for a loaded machine.
	timeout, ttl time.Duration
}

// Demo defaults of config.timeout and config.ttl: calls bounded well below
// a third of the TTL.
const (
	defaultTimeout = 300 * time.Millisecond
	defaultTTL     = 2 * time.Second
)

// result is what a sale did.
type result struct {
	answers   tally // what the buyers were told
	sold      int   // orders recorded in Redis
	left      int   // the stock counter afterwards
	instances []instanceSold
	elapsed   time.Duration
}

type instanceSold struct {
	name string
	sold int64
}

// sale stocks the item in the Redis at addr, starts cfg.instances servers and
// lets cfg.buyers buyers loose on them at once.
func sale(ctx context.Context, addr string, cfg config) (result, error) {
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	if err := admin.Set(ctx, stockKey, cfg.stock, 0).Err(); err != nil {
		return result{}, fmt.Errorf("flashsale: cannot reach Redis at %s: %w", addr, err)
	}
	if err := admin.Del(ctx, ordersKey).Err(); err != nil {
		return result{}, err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	servers := make([]*server, cfg.instances)
	for i := range servers {
		s, err := newServer(fmt.Sprintf("instance-%c", 'a'+i), addr, cfg, logger)
		if err != nil {
			return result{}, err
		}
		defer s.close()
		servers[i] = s
	}

	start := time.Now()
	res := result{answers: runSale(servers, cfg.buyers)}
	res.elapsed = time.Since(start)
	sold, err := admin.LLen(ctx, ordersKey).Result()
	if err != nil {
		return result{}, err
	}
	res.sold = int(sold)
	if res.left, err = admin.Get(ctx, stockKey).Int(); err != nil {
		return result{}, err
	}
	for _, s := range servers {
		res.instances = append(res.instances, instanceSold{s.name, s.sold.Load()})
	}
	return res, nil
}

// server is one instance of the shop: its own Redis client, Locker and gin
// engine behind a loopback HTTP server.
type server struct {
	name   string
	client *redis.Client
	locker *lockmw.Locker
	http   *httptest.Server
	sold   atomic.Int64
}

func newServer(name, addr string, cfg config, logger *slog.Logger) (*server, error) {
	timeout, ttl := cmp.Or(cfg.timeout, defaultTimeout), cmp.Or(cfg.ttl, defaultTTL)
	// The client settings a lock needs: Redis calls bounded by short
	// timeouts, and no retries inside go-redis, so that a Redis outage is
	// answered (503) after one timeout, not after MaxRetries of them.
	s := &server{name: name, client: redis.NewClient(&redis.Options{
		Addr:                  addr,
		PoolSize:              64,
		DialTimeout:           timeout,
		ReadTimeout:           timeout,
		WriteTimeout:          timeout,
		MaxRetries:            -1,
		DialerRetries:         1,
		PipelinePoolSize:      -1,
		ContextTimeoutEnabled: true,
	})}
	var err error
	s.locker, err = lockmw.New(s.client, lockmw.WithTTL(ttl), lockmw.WithLogger(logger))
	if err != nil {
		_ = s.client.Close()
		return nil, err
	}
	handlers := []gin.HandlerFunc{gin.Recovery()}
	if !cfg.noLock {
		// Buyers queue for the item for up to 10s instead of being
		// turned away with 409.
		handlers = append(handlers, ginlock.New(s.locker, ginlock.Param("sku"),
			ginlock.WithName("item:{sku}"), ginlock.WithWait(10*time.Second), ginlock.WithLogger(logger)))
	}
	handlers = append(handlers, s.buy(cfg.charge))
	r := gin.New()
	r.ContextWithFallback = true // the *gin.Context carries the lease context too
	r.POST("/items/:sku/buy", handlers...)
	s.http = httptest.NewServer(r)
	return s, nil
}

// buy sells one unit: read the stock, check it, charge the card, write the
// stock back and record the order. Nothing here is atomic: only the lock
// keeps two buyers from selling the same unit.
func (s *server) buy(charge time.Duration) gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx := c.Request.Context() // cancelled if the lock is lost
		stock, err := s.client.Get(ctx, stockKey).Int()
		if err != nil {
			c.String(http.StatusInternalServerError, "reading stock: %v", err)
			return
		}
		if stock <= 0 {
			c.String(http.StatusGone, "sold out")
			return
		}
		time.Sleep(charge) // the payment provider: the race window
		if err := s.client.Set(ctx, stockKey, stock-1, 0).Err(); err != nil {
			c.String(http.StatusInternalServerError, "writing stock: %v", err)
			return
		}
		buyer := c.GetHeader("X-Buyer")
		if err := s.client.RPush(ctx, ordersKey, buyer+"@"+s.name).Err(); err != nil {
			c.String(http.StatusInternalServerError, "recording order: %v", err)
			return
		}
		s.sold.Add(1)
		c.String(http.StatusCreated, "sold unit %d of the stock to %s", stock, buyer)
	}
}

func (s *server) close() {
	s.http.Close()
	_ = s.locker.Close()
	_ = s.client.Close()
}

type tally struct{ sold, soldOut, busy, failed int }

// runSale releases all buyers at once, each on one instance in turn, and
// counts the answers.
func runSale(servers []*server, buyers int) tally {
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: buyers}}
	var (
		mu    sync.Mutex
		t     tally
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := range buyers {
		wg.Go(func() {
			<-start
			code, err := buyOne(client, servers[i%len(servers)].http.URL, fmt.Sprintf("buyer-%03d", i))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.failed++
				fmt.Fprintln(os.Stderr, "buyer", i, err)
			case code == http.StatusCreated:
				t.sold++
			case code == http.StatusGone:
				t.soldOut++
			case code == http.StatusConflict:
				t.busy++
			default:
				t.failed++
			}
		})
	}
	close(start)
	wg.Wait()
	return t
}

func buyOne(client *http.Client, base, buyer string) (int, error) {
	req, err := http.NewRequest(http.MethodPost, base+"/items/"+sku+"/buy", strings.NewReader(""))
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-Buyer", buyer)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case http.StatusCreated, http.StatusGone, http.StatusConflict:
		return resp.StatusCode, nil
	}
	return resp.StatusCode, errors.New(resp.Status + ": " + strings.TrimSpace(string(body)))
}
