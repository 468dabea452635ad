// Command flashsale is lockmw's headline demo: a flash sale of a limited
// stock of one item, served by three instances of a gin service that share
// one Redis, each with its own lockmw.Locker. Every buyer hits one instance;
// the buy handler reads the stock, "charges the card" for a few
// milliseconds, and writes the stock back: a read-check-write that is not
// atomic on purpose. ginlock holds the lock item:{sku} around it, so the sale
// never sells more than it has. With -nolock the same handler runs without
// the lock, and the sale oversells.
//
// With REDIS_ADDR set it uses that Redis; otherwise it starts an embedded
// in-process Redis, so it runs on a machine with no Redis installed:
//
//	go run ./examples/flashsale
//	go run ./examples/flashsale -nolock
//	REDIS_ADDR=localhost:6379 go run ./examples/flashsale -buyers 500 -stock 100
package main

import (
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

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/ginlock"
	"github.com/lockmw/lockmw/lockmw"
)

const sku = "gopher-plush"

var (
	stockKey  = "flashsale:{" + sku + "}:stock"
	ordersKey = "flashsale:{" + sku + "}:orders"
)

func main() {
	noLock := flag.Bool("nolock", false, "serve the sale without ginlock (it oversells)")
	buyers := flag.Int("buyers", 200, "simulated buyers, all arriving at once")
	stock := flag.Int("stock", 50, "units for sale")
	instances := flag.Int("instances", 3, "server instances sharing the Redis")
	charge := flag.Duration("charge", 2*time.Millisecond, "time the handler spends between reading and writing the stock")
	flag.Parse()
	if *buyers < 1 || *stock < 0 || *instances < 1 || *charge < 0 {
		log.Fatal("flashsale: -buyers and -instances must be positive, -stock and -charge not negative")
	}

	addr, stop := redisAddr()
	defer stop()
	gin.SetMode(gin.ReleaseMode)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	ctx := context.Background()
	if err := admin.Set(ctx, stockKey, *stock, 0).Err(); err != nil {
		log.Fatalf("flashsale: cannot reach Redis at %s: %v", addr, err)
	}
	if err := admin.Del(ctx, ordersKey).Err(); err != nil {
		log.Fatal(err)
	}

	servers := make([]*server, *instances)
	for i := range servers {
		servers[i] = newServer(fmt.Sprintf("instance-%c", 'a'+i), addr, !*noLock, *charge, logger)
		defer servers[i].close()
	}

	mode := "with ginlock: item:{sku} is held from reading the stock to writing it"
	if *noLock {
		mode = "WITHOUT the lock (-nolock): reads and writes of the stock interleave"
	}
	fmt.Printf("flash sale: %d units of %s, %d buyers, %d server instances sharing one Redis\n",
		*stock, sku, *buyers, *instances)
	fmt.Println(mode)

	start := time.Now()
	tally := runSale(servers, *buyers)
	elapsed := time.Since(start)

	sold, err := admin.LLen(ctx, ordersKey).Result()
	if err != nil {
		log.Fatal(err)
	}
	left, err := admin.Get(ctx, stockKey).Int()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println()
	for _, s := range servers {
		fmt.Printf("  %-11s sold %d\n", s.name, s.sold.Load())
	}
	fmt.Printf("  buyers answered: %d sold, %d sold out (410), %d busy (409), %d failed, in %v\n",
		tally.sold, tally.soldOut, tally.busy, tally.failed, elapsed.Round(time.Millisecond))
	fmt.Printf("  stock available: %d\n", *stock)
	fmt.Printf("  units sold:      %d (orders recorded in Redis); stock counter now %d\n", sold, left)
	switch {
	case sold > int64(*stock):
		fmt.Printf("  OVERSOLD by %d units: %d buyers paid for a plush that does not exist\n", sold-int64(*stock), sold-int64(*stock))
		if !*noLock {
			os.Exit(1) // the lock failed: say so through the exit status
		}
	case *noLock:
		fmt.Println("  not oversold this time; raise -buyers or -charge to widen the race")
	default:
		fmt.Println("  never oversold: every read-check-write of the stock ran alone")
		fmt.Println("run it again with -nolock to see the same sale without the lock")
	}
	if tally.failed > 0 {
		os.Exit(1)
	}
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

func newServer(name, addr string, lock bool, charge time.Duration, logger *slog.Logger) *server {
	s := &server{name: name, client: redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})}
	var err error
	s.locker, err = lockmw.New(s.client, lockmw.WithTTL(2*time.Second), lockmw.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	handlers := []gin.HandlerFunc{gin.Recovery()}
	if lock {
		// Buyers queue for the item for up to 10s instead of being
		// turned away with 409.
		handlers = append(handlers, ginlock.New(s.locker, ginlock.Param("sku"),
			ginlock.WithName("item:{sku}"), ginlock.WithWait(10*time.Second)))
	}
	handlers = append(handlers, s.buy(charge))
	r := gin.New()
	r.POST("/items/:sku/buy", handlers...)
	s.http = httptest.NewServer(r)
	return s
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
