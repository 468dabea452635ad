package ginlock_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/ginlock"
	"github.com/lockmw/lockmw/lockmw"
)

// redisAddr is the Redis the examples use. TestMain points it at a
// redis-server of its own.
var redisAddr = "localhost:6379"

// Lock the order named in the path while it is paid: two requests on one
// order never run their handlers at the same time, on any instance sharing
// the Redis. Of two requests at once, one is answered 200 and the other 409
// with Retry-After.
func Example() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, // settings: see lockmw
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond,
		MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true, PipelinePoolSize: -1})
	defer client.Close()
	locker, err := lockmw.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	r := gin.New()
	r.ContextWithFallback = true // required: c carries the lease context
	lockOrder := ginlock.New(locker, ginlock.Param("id"), ginlock.WithName("order:{id}"))
	work := make(chan struct{}) // the payment lasts until the other request is answered
	r.POST("/orders/:id/pay", lockOrder, func(c *gin.Context) {
		fence := ginlock.LeaseFrom(c).Fence() // c is cancelled if the lock is lost
		<-work                                // the work; a second request meanwhile gets 409
		c.JSON(http.StatusOK, gin.H{"paid": c.Param("id"), "fence": fence})
	})

	// Two requests on order 42 at once.
	answers := make(chan string, 2)
	for range 2 {
		go func() {
			w := httptest.NewRecorder()
			r.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/orders/42/pay", nil))
			answers <- fmt.Sprint(w.Code, " Retry-After set: ", w.Header().Get("Retry-After") != "")
		}()
	}
	first := <-answers // the request that found the order locked
	close(work)
	got := []string{first, <-answers}
	slices.Sort(got)
	fmt.Println(strings.Join(got, "\n"))
	// Output:
	// 200 Retry-After set: false
	// 409 Retry-After set: true
}

// Take the key from a JSON body and queue for up to two seconds instead of
// answering 409 at once. The handler still reads the whole body.
func ExampleJSONField() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr}) // and the settings of the package example
	defer client.Close()
	locker, err := lockmw.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	r := gin.New()
	r.ContextWithFallback = true // c carries the lease context: ginlock requires it
	r.POST("/transfers", ginlock.New(locker, ginlock.JSONField("from.account"),
		ginlock.WithName("account:{id}"), ginlock.WithWait(2*time.Second)),
		func(c *gin.Context) {
			var transfer struct {
				From   struct{ Account string }
				Amount int64
			}
			if err := c.ShouldBindJSON(&transfer); err != nil {
				c.AbortWithStatus(http.StatusBadRequest)
				return
			}
			fmt.Println("moving", transfer.Amount, "from", transfer.From.Account)
			c.Status(http.StatusAccepted)
		})

	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/transfers",
		strings.NewReader(`{"from": {"account": "A-17"}, "amount": 250}`)))
	fmt.Println(w.Code)
	// Output:
	// moving 250 from A-17
	// 202
}

// A custom KeyFunc and a busy response in the service's own format.
func ExampleWithBusyHandler() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr}) // and the settings of the package example
	defer client.Close()
	locker, err := lockmw.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	tenant := ginlock.Header("X-Tenant")
	tenantCart := func(c *gin.Context) (string, error) {
		t, err := tenant(c)
		if err != nil {
			return "", err
		}
		return t + "/" + c.Param("cart"), nil
	}
	r := gin.New()
	r.ContextWithFallback = true // c carries the lease context: ginlock requires it
	r.PUT("/carts/:cart", ginlock.New(locker, tenantCart, ginlock.WithName("cart:{tenant/cart}"),
		ginlock.WithBusyHandler(func(c *gin.Context, err error) {
			c.Header("Retry-After", fmt.Sprint(ginlock.RetryAfterSeconds(err)))
			c.JSON(http.StatusTooManyRequests, gin.H{"error": "cart is being updated"})
		})),
		func(c *gin.Context) { c.Status(http.StatusOK) })

	// Someone holds cart 7 of tenant acme meanwhile.
	held, err := locker.TryAcquire(context.Background(), "cart:acme/7")
	if err != nil {
		log.Fatal(err)
	}
	defer held.Release(context.Background())

	req := httptest.NewRequest(http.MethodPut, "/carts/7", nil)
	req.Header.Set("X-Tenant", "acme")
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	fmt.Println(w.Code, w.Body)
	// Output: 429 {"error":"cart is being updated"}
}

// Stream a report while holding the lock, and skip the lock for dry runs.
func ExampleWithStreaming() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr}) // and the settings of the package example
	defer client.Close()
	locker, err := lockmw.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	r := gin.New()
	r.ContextWithFallback = true
	r.GET("/accounts/:id/export", ginlock.New(locker, ginlock.Param("id"), ginlock.WithName("account:{id}"),
		ginlock.WithStreaming(), // rows leave as they are written, not after the release
		ginlock.WithSkip(func(c *gin.Context) bool { return c.Query("dry_run") == "1" })),
		func(c *gin.Context) {
			for i := range 3 {
				fmt.Fprintf(c.Writer, "row %d\n", i)
				c.Writer.Flush()
			}
		})

	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/accounts/17/export", nil))
	fmt.Print(w.Body)
	// Output:
	// row 0
	// row 1
	// row 2
}

// For an error that does not come from the middleware, Retry-After is the
// holder's remaining lease in whole seconds, rounded up. (The middleware's
// own busy errors carry its estimate of the wait.)
func ExampleRetryAfterSeconds() {
	busy := &lockmw.NotAcquiredError{Key: "order:42", RetryAfter: 1500 * time.Millisecond}
	fmt.Println(ginlock.RetryAfterSeconds(busy))
	// Output: 2
}
