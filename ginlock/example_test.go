package ginlock_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockmw/lockmw/ginlock"
	"github.com/lockmw/lockmw/internal/lockmwtest"
	"github.com/lockmw/lockmw/lockmw"
)

// Lock the order named in the path while it is paid or cancelled: both routes
// use the template "order:{id}", so they exclude each other, on every
// instance sharing the Redis.
func Example() {
	// lockmw.New on a client of the Redis every instance shares (the
	// example Redis: localhost:6379, short timeouts; see lockmw).
	locker, _, stop := lockmwtest.DemoLocker()
	defer stop()

	lockOrder := ginlock.New(locker, ginlock.Param("id"), ginlock.WithName("order:{id}"))
	r := gin.New()
	r.ContextWithFallback = true // c carries the lease context: ginlock requires it
	r.Use(gin.Recovery())
	r.POST("/orders/:id/pay", lockOrder, func(c *gin.Context) {
		// c.Request.Context() is cancelled if the lock is lost: stop then.
		// The fence lets the store reject a writer that lost the lock.
		fence := ginlock.LeaseFrom(c).Fence()
		c.JSON(http.StatusOK, gin.H{"paid": c.Param("id"), "fence": fence})
	})
	r.POST("/orders/:id/cancel", lockOrder, func(c *gin.Context) {
		c.Status(http.StatusNoContent)
	})
	_ = r.Run(":8080")
}

// Take the key from a JSON body and queue for up to two seconds instead of
// answering 409 at once. The handler still reads the whole body.
func ExampleJSONField() {
	// lockmw.New on a client of the Redis every instance shares (the
	// example Redis: localhost:6379, short timeouts; see lockmw).
	locker, _, stop := lockmwtest.DemoLocker()
	defer stop()

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
			c.Status(http.StatusAccepted)
		})
}

// A custom KeyFunc and a busy response in the service's own format.
func ExampleWithBusyHandler() {
	// lockmw.New on a client of the Redis every instance shares (the
	// example Redis: localhost:6379, short timeouts; see lockmw).
	locker, _, stop := lockmwtest.DemoLocker()
	defer stop()

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
}

// Stream a report while holding the lock, and skip the lock for dry runs.
func ExampleWithStreaming() {
	// lockmw.New on a client of the Redis every instance shares (the
	// example Redis: localhost:6379, short timeouts; see lockmw).
	locker, _, stop := lockmwtest.DemoLocker()
	defer stop()

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
}

// For an error that does not come from the middleware, Retry-After is the
// holder's remaining lease in whole seconds, rounded up. (The middleware's
// own busy errors carry its estimate of the wait.)
func ExampleRetryAfterSeconds() {
	busy := &lockmw.NotAcquiredError{Key: "order:42", RetryAfter: 1500 * time.Millisecond}
	fmt.Println(ginlock.RetryAfterSeconds(busy))
	// Output: 2
}
