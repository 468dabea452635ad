package ginlock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/gin-gonic/gin/binding"
	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/ginlock"
	"github.com/lockmw/lockmw/internal/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// 50 concurrent requests on one order, spread over two service instances
// (each with its own Locker and Redis client), all run, one at a time.
func TestOneKeyNeverOverlapsAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	const requests = 50
	var inside, maxInside, completed atomic.Int64
	handler := func(c *gin.Context) {
		n := inside.Add(1)
		for {
			m := maxInside.Load()
			if n <= m || maxInside.CompareAndSwap(m, n) {
				break
			}
		}
		// Stay inside long enough for an overlap to show if the lock
		// did not exclude.
		time.Sleep(2 * time.Millisecond)
		inside.Add(-1)
		completed.Add(1)
		c.String(http.StatusOK, "paid")
	}
	var urls []string
	for range 2 {
		mw := ginlock.New(newLocker(t, srv), ginlock.Param("id"),
			ginlock.WithName("order:{id}"), ginlock.WithWait(time.Minute))
		ts := httptest.NewServer(newEngine(http.MethodPost, "/orders/:id/pay", mw, handler))
		t.Cleanup(ts.Close)
		urls = append(urls, ts.URL+"/orders/42/pay")
	}

	var wg sync.WaitGroup
	statuses := make(chan int, requests)
	for i := range requests {
		wg.Go(func() {
			code, body := post(t, http.DefaultClient, urls[i%2], "")
			if code != http.StatusOK {
				t.Errorf("request %d: status %d: %s", i, code, body)
			}
			statuses <- code
		})
	}
	wg.Wait()
	if got := completed.Load(); got != requests {
		t.Errorf("%d handlers completed, want %d", got, requests)
	}
	if got := maxInside.Load(); got != 1 {
		t.Errorf("up to %d handlers ran at once on one order, want 1", got)
	}
}

// Requests on different orders hold their locks at the same time: every
// handler waits at a barrier that only opens once all of them are inside.
func TestDifferentKeysRunInParallel(t *testing.T) {
	srv := redistest.Start(t)
	const orders = 4
	var arrived atomic.Int64
	allInside := make(chan struct{})
	handler := func(c *gin.Context) {
		if arrived.Add(1) == orders {
			close(allInside)
		}
		select {
		case <-allInside:
			c.String(http.StatusOK, "ok")
		case <-time.After(10 * time.Second):
			c.String(http.StatusInternalServerError, "the other orders never got their locks")
		}
	}
	mw := ginlock.New(newLocker(t, srv), ginlock.Param("id"), ginlock.WithName("order:{id}"))
	ts := httptest.NewServer(newEngine(http.MethodPost, "/orders/:id", mw, handler))
	defer ts.Close()

	var wg sync.WaitGroup
	for i := range orders {
		wg.Go(func() {
			if code, body := post(t, http.DefaultClient, fmt.Sprintf("%s/orders/%d", ts.URL, i), ""); code != http.StatusOK {
				t.Errorf("order %d: status %d: %s", i, code, body)
			}
		})
	}
	wg.Wait()
}

// A busy lock is answered at once with 409, problem+json and Retry-After
// from the holder's lease, and the handler does not run.
func TestBusyIsConflictWithRetryAfter(t *testing.T) {
	srv := redistest.Start(t)
	holder := newLocker(t, srv)
	lease, err := holder.Acquire(context.Background(), "order:7", lockmw.WithLeaseTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())

	var ran atomic.Bool
	handler := func(c *gin.Context) { ran.Store(true); c.Status(http.StatusOK) }
	l := newLocker(t, srv)
	for _, tc := range []struct {
		name string
		opts []ginlock.Option
	}{
		{"fail fast", nil},
		{"wait runs out", []ginlock.Option{ginlock.WithWait(50 * time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mw := ginlock.New(l, ginlock.Param("id"), append(tc.opts, ginlock.WithName("order:{id}"))...)
			e := newEngine(http.MethodPost, "/orders/:id", mw, handler)
			rec := serve(e, httptest.NewRequest(http.MethodPost, "/orders/7", nil))
			p := problem(t, rec, http.StatusConflict)
			if p.Type != ginlock.ProblemBusy || !strings.Contains(p.Detail, "order:7") {
				t.Errorf("problem = %+v, want type %s naming order:7", p, ginlock.ProblemBusy)
			}
			secs, err := strconv.Atoi(rec.Header().Get("Retry-After"))
			if err != nil || secs < 1 || secs > 3 {
				t.Errorf("Retry-After = %q, want whole seconds in [1, 3] (the holder's 3s lease)", rec.Header().Get("Retry-After"))
			}
			if ran.Load() {
				t.Error("the handler ran although the lock was busy")
			}
		})
	}
}

func TestRetryAfterSecondsRoundsUp(t *testing.T) {
	for _, tc := range []struct {
		left time.Duration
		want int
	}{
		{time.Millisecond, 1},
		{time.Second, 1},
		{1500 * time.Millisecond, 2},
		{2*time.Second + time.Nanosecond, 3},
		{0, 1}, // unknown
	} {
		err := fmt.Errorf("wrapped: %w", &lockmw.NotAcquiredError{Key: "k", RetryAfter: tc.left})
		if got := ginlock.RetryAfterSeconds(err); got != tc.want {
			t.Errorf("RetryAfterSeconds(%v left) = %d, want %d", tc.left, got, tc.want)
		}
	}
}

// With WithWait a request waits for the holder instead of failing; without
// it, the same request fails fast.
func TestWithWaitWaitsForTheHolder(t *testing.T) {
	srv := redistest.Start(t)
	holder := newLocker(t, srv)
	// Held without renewal: the lock frees itself after 300ms.
	if _, err := holder.Acquire(context.Background(), "order:8",
		lockmw.WithLeaseTTL(300*time.Millisecond), lockmw.WithoutWatchdog()); err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, srv)
	ok := func(c *gin.Context) { c.String(http.StatusOK, "done") }
	failFast := newEngine(http.MethodPost, "/orders/:id",
		ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}")), ok)
	waiting := newEngine(http.MethodPost, "/orders/:id",
		ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}"), ginlock.WithWait(time.Minute)), ok)

	problem(t, serve(failFast, httptest.NewRequest(http.MethodPost, "/orders/8", nil)), http.StatusConflict)
	if rec := serve(waiting, httptest.NewRequest(http.MethodPost, "/orders/8", nil)); rec.Code != http.StatusOK {
		t.Fatalf("waiting request: status %d: %s", rec.Code, rec.Body)
	}
}

// The wait ends with the request's context, long before WithWait: 503.
func TestWaitIsBoundedByTheRequestContext(t *testing.T) {
	srv := redistest.Start(t)
	holder := newLocker(t, srv)
	lease, err := holder.Acquire(context.Background(), "order:9")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	var ran atomic.Bool
	e := newEngine(http.MethodPost, "/orders/:id",
		ginlock.New(newLocker(t, srv), ginlock.Param("id"), ginlock.WithName("order:{id}"), ginlock.WithWait(time.Hour)),
		func(c *gin.Context) { ran.Store(true) })

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var rec *httptest.ResponseRecorder
	within(t, 10*time.Second, "a request whose context ends while waiting", func() {
		rec = serve(e, httptest.NewRequest(http.MethodPost, "/orders/9", nil).WithContext(ctx))
	})
	p := problem(t, rec, http.StatusServiceUnavailable)
	if !strings.Contains(p.Detail, "ended while waiting") {
		t.Errorf("detail = %q, want it to say the request ended while waiting", p.Detail)
	}
	if ran.Load() {
		t.Error("the handler ran without the lock")
	}
}

// Requests without a usable key get 400 (413 for an oversized JSON body) as
// problem+json, and the handler does not run; requests with one pass.
func TestMissingOrInvalidKey(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv)
	var ran atomic.Int64
	handler := func(c *gin.Context) { ran.Add(1); c.String(http.StatusOK, "ok") }
	failing := func(*gin.Context) (string, error) { return "", errors.New("no tenant in the token") }
	e := newGin()
	named := ginlock.WithName("order:{id}")
	e.GET("/p/:id", ginlock.New(l, ginlock.Param("id"), named), handler)
	e.GET("/q", ginlock.New(l, ginlock.Query("id"), named), handler)
	e.GET("/h", ginlock.New(l, ginlock.Header("X-Order-ID"), named), handler)
	e.POST("/j", ginlock.New(l, ginlock.JSONFieldLimit("order.id", 128), named), handler)
	e.POST("/a", ginlock.New(l, ginlock.JSONField("items.1.sku"), named), handler)
	e.GET("/f", ginlock.New(l, failing, named), handler)
	e.GET("/e", ginlock.New(l, func(*gin.Context) (string, error) { return "", nil }, named), handler)

	long := strings.Repeat("a", lockmw.MaxKeyLen)
	for _, tc := range []struct {
		name, method, target, body string
		header                     []string
		want                       int
		detail                     string
	}{
		{"param ok", "GET", "/p/42", "", nil, 200, ""},
		{"param control character", "GET", "/p/a%01b", "", nil, 400, "control characters"},
		{"param invalid UTF-8", "GET", "/p/%ff", "", nil, 400, "UTF-8"},
		{"param makes the key too long", "GET", "/p/" + long, "", nil, 400, "bytes"},
		{"query ok", "GET", "/q?id=42", "", nil, 200, ""},
		{"query missing", "GET", "/q", "", nil, 400, `query parameter "id" is missing`},
		{"query empty", "GET", "/q?id=", "", nil, 400, "empty"},
		{"query twice", "GET", "/q?id=1&id=2", "", nil, 400, "2 times"},
		{"header ok", "GET", "/h", "", []string{"42"}, 200, ""},
		{"header missing", "GET", "/h", "", nil, 400, `header "X-Order-Id" is missing`},
		{"header twice", "GET", "/h", "", []string{"1", "2"}, 400, "2 times"},
		{"json string ok", "POST", "/j", `{"order":{"id":"42"}}`, nil, 200, ""},
		{"json number ok", "POST", "/j", `{"order":{"id":42}}`, nil, 200, ""},
		{"json no body", "POST", "/j", "", nil, 400, "no body"},
		{"json malformed", "POST", "/j", `{"order":`, nil, 400, "not valid JSON"},
		{"json trailing data", "POST", "/j", `{"order":{"id":"1"}} {}`, nil, 400, "not valid JSON"},
		{"json field missing", "POST", "/j", `{"order":{}}`, nil, 400, `"order.id" is missing`},
		{"json parent not an object", "POST", "/j", `{"order":"x"}`, nil, 400, "not an object"},
		{"json null", "POST", "/j", `{"order":{"id":null}}`, nil, 400, "null"},
		{"json bool", "POST", "/j", `{"order":{"id":true}}`, nil, 400, "boolean"},
		{"json object", "POST", "/j", `{"order":{"id":{}}}`, nil, 400, "object"},
		{"json empty string", "POST", "/j", `{"order":{"id":""}}`, nil, 400, "empty"},
		{"json escaped control character", "POST", "/j", `{"order":{"id":"a\u0000"}}`, nil, 400, "control"},
		{"json too large", "POST", "/j", `{"order":{"id":"1"},"pad":"` + strings.Repeat("x", 200) + `"}`, nil, 413, "128 bytes"},
		{"json array index ok", "POST", "/a", `{"items":[{"sku":"a"},{"sku":"b"}]}`, nil, 200, ""},
		{"json array index out of range", "POST", "/a", `{"items":[{"sku":"a"}]}`, nil, 400, "not an index"},
		{"custom func error", "GET", "/f", "", nil, 400, "no tenant in the token"},
		{"custom func empty key", "GET", "/e", "", nil, 400, "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := ran.Load()
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			req := httptest.NewRequest(tc.method, tc.target, body)
			for _, v := range tc.header {
				req.Header.Add("X-Order-ID", v)
			}
			rec := serve(e, req)
			if tc.want == http.StatusOK {
				if rec.Code != http.StatusOK || ran.Load() != before+1 {
					t.Fatalf("status %d (%s), want the handler to run", rec.Code, rec.Body)
				}
				return
			}
			p := problem(t, rec, tc.want)
			if !strings.Contains(p.Detail, tc.detail) {
				t.Errorf("detail %q does not say %q", p.Detail, tc.detail)
			}
			if ran.Load() != before {
				t.Error("the handler ran without a key")
			}
		})
	}
}

// Redis down or stalled is 503 problem+json, and the handler does not run.
func TestRedisUnavailable(t *testing.T) {
	for _, fault := range []string{"paused", "killed"} {
		t.Run(fault, func(t *testing.T) {
			srv := redistest.Start(t)
			l := newLockerOn(t, srv.Client(t, func(o *redis.Options) {
				o.ReadTimeout = 200 * time.Millisecond
				o.MaxRetries = -1
			}))
			var ran atomic.Bool
			e := newEngine(http.MethodPost, "/orders/:id",
				ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}")),
				func(c *gin.Context) { ran.Store(true) })
			if fault == "paused" {
				srv.Pause(t)
				defer srv.Resume(t)
			} else {
				srv.Kill(t)
			}
			var rec *httptest.ResponseRecorder
			within(t, 20*time.Second, "a request while Redis is "+fault, func() {
				rec = serve(e, httptest.NewRequest(http.MethodPost, "/orders/1", nil))
			})
			p := problem(t, rec, http.StatusServiceUnavailable)
			if p.Type != ginlock.ProblemUnavailable {
				t.Errorf("type = %q, want %q", p.Type, ginlock.ProblemUnavailable)
			}
			if ran.Load() {
				t.Error("the handler ran without the lock")
			}
		})
	}
}

// JSONField leaves the body intact for the handler, both for reading it and
// for ShouldBindBodyWith, and locks the key named in it.
func TestJSONBodyIsIntactForTheHandler(t *testing.T) {
	srv := redistest.Start(t)
	l, other := newLocker(t, srv), newLocker(t, srv)
	const body = `{"order": {"id": "17", "items": ["a", "b"]}, "note": "ünïcode"}`
	e := newEngine(http.MethodPost, "/pay",
		ginlock.New(l, ginlock.JSONField("order.id"), ginlock.WithName("order:{id}")),
		func(c *gin.Context) {
			mustBusy(t, other, "order:17")
			var bound struct {
				Order struct{ ID string }
				Note  string
			}
			if err := c.ShouldBindBodyWith(&bound, binding.JSON); err != nil || bound.Order.ID != "17" || bound.Note != "ünïcode" {
				t.Errorf("ShouldBindBodyWith = %+v, %v", bound, err)
			}
			raw, err := io.ReadAll(c.Request.Body)
			if err != nil || string(raw) != body {
				t.Errorf("handler read body %q (%v), want %q", raw, err, body)
			}
			c.Status(http.StatusNoContent)
		})
	if rec := serve(e, httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(body))); rec.Code != http.StatusNoContent {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	mustFree(t, other, "order:17")
}

// When the lock is lost while the handler runs (its key deleted behind its
// back, or Redis stalled past the lease TTL), the handler's request context is
// cancelled with cause ErrLost.
func TestLostLockCancelsTheHandler(t *testing.T) {
	for _, fault := range []string{"key deleted", "redis paused"} {
		t.Run(fault, func(t *testing.T) {
			srv := redistest.Start(t)
			l := newLockerOn(t, srv.Client(t, func(o *redis.Options) {
				o.ReadTimeout = 100 * time.Millisecond
				o.MaxRetries = -1
			}), lockmw.WithTTL(300*time.Millisecond))
			started := make(chan struct{})
			causes := make(chan error, 1)
			e := newEngine(http.MethodPost, "/orders/:id",
				ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}")),
				func(c *gin.Context) {
					close(started)
					select {
					case <-c.Request.Context().Done():
						causes <- context.Cause(c.Request.Context())
					case <-time.After(10 * time.Second):
						causes <- errors.New("the handler's context was never cancelled")
					}
					c.Status(http.StatusOK)
				})
			done := make(chan struct{})
			go func() { defer close(done); serve(e, httptest.NewRequest(http.MethodPost, "/orders/5", nil)) }()
			<-started
			if fault == "key deleted" {
				// The key disappears behind the holder's back (an operator, a flush).
				if n, err := srv.Client(t).Del(context.Background(), lockKey("order:5")).Result(); err != nil || n != 1 {
					t.Fatalf("DEL %s = %d, %v; want the held lock deleted", lockKey("order:5"), n, err)
				}
			} else {
				srv.Pause(t)
				defer srv.Resume(t)
			}
			if cause := <-causes; !errors.Is(cause, lockmw.ErrLost) {
				t.Fatalf("handler context cause = %v, want ErrLost", cause)
			}
			if fault == "redis paused" {
				srv.Resume(t) // let the release through (or time out)
			}
			<-done
		})
	}
}

// A panicking handler still releases the lock, and the panic reaches
// gin.Recovery.
func TestPanicReleasesTheLock(t *testing.T) {
	srv := redistest.Start(t)
	l, other := newLocker(t, srv), newLocker(t, srv)
	e := newGin()
	e.Use(gin.Recovery())
	e.POST("/orders/:id", ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}")),
		func(c *gin.Context) { panic("payment provider exploded") })
	for i := range 2 { // the second would be 409 if the first kept the lock
		if rec := serve(e, httptest.NewRequest(http.MethodPost, "/orders/3", nil)); rec.Code != http.StatusInternalServerError {
			t.Fatalf("request %d: status %d, want 500 from gin.Recovery", i, rec.Code)
		}
	}
	mustFree(t, other, "order:3")
}

// The handler can lock the same resource again through its request context,
// and gets the middleware's lease from LeaseFrom.
func TestHandlerReentersThroughItsContext(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv)
	e := newEngine(http.MethodPost, "/orders/:id",
		ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}")),
		func(c *gin.Context) {
			outer := ginlock.LeaseFrom(c)
			if outer == nil || outer.Key() != "order:4" {
				t.Errorf("LeaseFrom = %v, want the lease on order:4", outer)
				return
			}
			inner, err := l.TryAcquire(c.Request.Context(), "order:4")
			if err != nil {
				t.Errorf("nested TryAcquire: %v", err)
				return
			}
			if inner.Fence() != outer.Fence() {
				t.Errorf("nested fence %d, want the outer lease's %d", inner.Fence(), outer.Fence())
			}
			_ = inner.Release(c.Request.Context())
			c.Status(http.StatusOK)
		})
	if rec := serve(e, httptest.NewRequest(http.MethodPost, "/orders/4", nil)); rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
}

// Custom handlers replace the default responses; one that writes nothing
// gets the default.
func TestCustomHandlers(t *testing.T) {
	srv := redistest.Start(t)
	holder := newLocker(t, srv)
	lease, err := holder.Acquire(context.Background(), "order:6")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	l := newLocker(t, srv)
	var gotErr error
	e := newGin()
	e.POST("/custom/:id", ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}"),
		ginlock.WithBusyHandler(func(c *gin.Context, err error) {
			left, _ := lockmw.RetryAfter(err)
			c.JSON(http.StatusTooManyRequests, gin.H{"busy": true, "known": left > 0})
		}),
		ginlock.WithErrorHandler(func(c *gin.Context, err error) {
			gotErr = err
			c.String(http.StatusUnprocessableEntity, "bad order")
		})), func(c *gin.Context) { c.Status(http.StatusOK) })
	e.POST("/silent/:id", ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}"),
		ginlock.WithBusyHandler(func(*gin.Context, error) {})), func(c *gin.Context) { c.Status(http.StatusOK) })
	e.POST("/q", ginlock.New(l, ginlock.Query("id"), ginlock.WithErrorHandler(func(c *gin.Context, err error) {
		gotErr = err
		c.String(http.StatusUnprocessableEntity, "bad order")
	})), func(c *gin.Context) { c.Status(http.StatusOK) })

	if rec := serve(e, httptest.NewRequest(http.MethodPost, "/custom/6", nil)); rec.Code != http.StatusTooManyRequests || rec.Body.String() != `{"busy":true,"known":true}` {
		t.Errorf("custom busy: %d %s", rec.Code, rec.Body)
	}
	problem(t, serve(e, httptest.NewRequest(http.MethodPost, "/silent/6", nil)), http.StatusConflict)
	if rec := serve(e, httptest.NewRequest(http.MethodPost, "/q", nil)); rec.Code != http.StatusUnprocessableEntity || !errors.Is(gotErr, ginlock.ErrNoKey) {
		t.Errorf("custom error: %d, err %v; want 422 and an error matching ErrNoKey", rec.Code, gotErr)
	}
}

// New rejects programming errors when the routes are set up.
func TestNewPanicsOnBadConfiguration(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv)
	for name, build := range map[string]func(){
		"nil locker":          func() { ginlock.New(nil, ginlock.Param("id")) },
		"nil key":             func() { ginlock.New(l, nil) },
		"no placeholder":      func() { ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order")) },
		"empty placeholder":   func() { ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{}")) },
		"two placeholders":    func() { ginlock.New(l, ginlock.Param("id"), ginlock.WithName("{a}:{b}")) },
		"negative wait":       func() { ginlock.New(l, ginlock.Param("id"), ginlock.WithWait(-time.Second)) },
		"empty JSON path":     func() { ginlock.JSONField("") },
		"empty JSON segment":  func() { ginlock.JSONField("order..id") },
		"zero JSON body size": func() { ginlock.JSONFieldLimit("id", 0) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			build()
		})
	}
}

// WithAcquireOptions reaches the core: the lease gets the TTL given there, not
// the Locker's default.
func TestWithAcquireOptionsSetsTheLeaseTTL(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	l := newLocker(t, srv) // default TTL 10s
	var pttl time.Duration
	e := newEngine(http.MethodPost, "/orders/:id",
		ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}"),
			ginlock.WithAcquireOptions(lockmw.WithLeaseTTL(2*time.Second))),
		func(c *gin.Context) {
			pttl = rdb.PTTL(c, lockKey("order:12")).Val()
			c.Status(http.StatusOK)
		})
	if rec := serve(e, httptest.NewRequest(http.MethodPost, "/orders/12", nil)); rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	if pttl <= 0 || pttl > 2*time.Second {
		t.Errorf("PTTL of the held lock = %v, want at most the 2s lease TTL", pttl)
	}
}
