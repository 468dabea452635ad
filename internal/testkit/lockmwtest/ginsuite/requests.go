package ginsuite

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

	"github.com/lockmw/lockmw/ginlock"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/lockmw"
)

// 50 concurrent requests on one order, spread over two service instances
// (each with its own Locker and client), all run, one at a time.
func (r *runner) oneKeyNeverOverlaps(t *testing.T) {
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
		mw := ginlock.New(r.locker(t), ginlock.Param("id"),
			ginlock.WithName("order:{id}"), ginlock.WithWait(time.Minute))
		ts := httptest.NewServer(NewEngine(http.MethodPost, "/orders/:id/pay", mw, handler))
		t.Cleanup(ts.Close)
		urls = append(urls, ts.URL+"/orders/42/pay")
	}

	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			if code, body := post(t, http.DefaultClient, urls[i%2], ""); code != http.StatusOK {
				t.Errorf("request %d: status %d: %s", i, code, body)
			}
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
func (r *runner) differentKeysInParallel(t *testing.T) {
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
	mw := ginlock.New(r.locker(t), ginlock.Param("id"), ginlock.WithName("order:{id}"))
	ts := httptest.NewServer(NewEngine(http.MethodPost, "/orders/:id", mw, handler))
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
// (from the holder's lease when the store tells it, else 1), and the
// handler does not run.
func (r *runner) busyIsConflict(t *testing.T) {
	holder := r.locker(t)
	lease, err := holder.Acquire(context.Background(), "order:7", lockmw.WithLeaseTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())

	var ran atomic.Bool
	handler := func(c *gin.Context) { ran.Store(true); c.Status(http.StatusOK) }
	l := r.locker(t)
	for _, tc := range []struct {
		name string
		opts []ginlock.Option
	}{
		{"fail fast", nil},
		{"wait runs out", []ginlock.Option{ginlock.WithWait(50 * time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mw := ginlock.New(l, ginlock.Param("id"), append(tc.opts, ginlock.WithName("order:{id}"))...)
			e := NewEngine(http.MethodPost, "/orders/:id", mw, handler)
			rec := Serve(e, httptest.NewRequest(http.MethodPost, "/orders/7", nil))
			p := DecodeProblem(t, rec, http.StatusConflict)
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

// With WithWait a request waits for the holder instead of failing; without
// it, the same request fails fast.
func (r *runner) withWaitWaits(t *testing.T) {
	holder := r.locker(t)
	// Held without renewal: the lock frees itself after ShortTTL.
	if _, err := holder.Acquire(context.Background(), "order:8",
		lockmw.WithLeaseTTL(r.env.ShortTTL), lockmw.WithoutWatchdog()); err != nil {
		t.Fatal(err)
	}
	l := r.locker(t)
	ok := func(c *gin.Context) { c.String(http.StatusOK, "done") }
	failFast := NewEngine(http.MethodPost, "/orders/:id",
		ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}")), ok)
	waiting := NewEngine(http.MethodPost, "/orders/:id",
		ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}"), ginlock.WithWait(time.Minute)), ok)

	DecodeProblem(t, Serve(failFast, httptest.NewRequest(http.MethodPost, "/orders/8", nil)), http.StatusConflict)
	if rec := Serve(waiting, httptest.NewRequest(http.MethodPost, "/orders/8", nil)); rec.Code != http.StatusOK {
		t.Fatalf("waiting request: status %d: %s", rec.Code, rec.Body)
	}
}

// The wait ends with the request's context, long before WithWait: 503.
func (r *runner) waitBoundedByRequest(t *testing.T) {
	holder := r.locker(t)
	lease, err := holder.Acquire(context.Background(), "order:9")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	var ran atomic.Bool
	e := NewEngine(http.MethodPost, "/orders/:id",
		ginlock.New(r.locker(t), ginlock.Param("id"), ginlock.WithName("order:{id}"), ginlock.WithWait(time.Hour)),
		func(c *gin.Context) { ran.Store(true) })

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var rec *httptest.ResponseRecorder
	lockmwtest.Within(t, 10*time.Second, "a request whose context ends while waiting", func() {
		rec = Serve(e, httptest.NewRequest(http.MethodPost, "/orders/9", nil).WithContext(ctx))
	})
	p := DecodeProblem(t, rec, http.StatusServiceUnavailable)
	if !strings.Contains(p.Detail, "ended while waiting") {
		t.Errorf("detail = %q, want it to say the request ended while waiting", p.Detail)
	}
	if ran.Load() {
		t.Error("the handler ran without the lock")
	}
}

// Requests without a usable key get 400 (413 for an oversized JSON body) as
// problem+json, and the handler does not run; requests with one pass.
func (r *runner) missingOrInvalidKey(t *testing.T) {
	l := r.locker(t)
	var ran atomic.Int64
	handler := func(c *gin.Context) { ran.Add(1); c.String(http.StatusOK, "ok") }
	failing := func(*gin.Context) (string, error) { return "", errors.New("no tenant in the token") }
	e := NewGin()
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
			rec := Serve(e, req)
			if tc.want == http.StatusOK {
				if rec.Code != http.StatusOK || ran.Load() != before+1 {
					t.Fatalf("status %d (%s), want the handler to run", rec.Code, rec.Body)
				}
				return
			}
			p := DecodeProblem(t, rec, tc.want)
			if !strings.Contains(p.Detail, tc.detail) {
				t.Errorf("detail %q does not say %q", p.Detail, tc.detail)
			}
			if ran.Load() != before {
				t.Error("the handler ran without a key")
			}
		})
	}
}

// JSONField leaves the body intact for the handler, both for reading it and
// for ShouldBindBodyWith, and locks the key named in it.
func (r *runner) jsonBodyIntact(t *testing.T) {
	l, other := r.locker(t), r.locker(t)
	const body = `{"order": {"id": "17", "items": ["a", "b"]}, "note": "ünïcode"}`
	e := NewEngine(http.MethodPost, "/pay",
		ginlock.New(l, ginlock.JSONField("order.id"), ginlock.WithName("order:{id}")),
		func(c *gin.Context) {
			lockmwtest.MustBusy(t, other, "order:17")
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
	if rec := Serve(e, httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(body))); rec.Code != http.StatusNoContent {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	mustFree(t, other, "order:17")
}

// When the lock is lost while the handler runs (deleted behind its back),
// the handler's request context is cancelled with cause ErrLost.
func (r *runner) lostLockCancels(t *testing.T) {
	r.needLose(t)
	l := r.locker(t, lockmw.WithTTL(r.env.ShortTTL))
	CheckLossCancelsHandler(t, l, func() { r.lose(t, "order:5") }, nil)
}

// CheckLossCancelsHandler serves a request locking order:5 through l and
// calls lose while the handler runs: the handler's request context must be
// cancelled with cause ErrLost. restore, if not nil, is called then, before
// the request is waited for (to let its release through).
func CheckLossCancelsHandler(t *testing.T, l *lockmw.Locker, lose, restore func()) {
	t.Helper()
	started := make(chan struct{})
	causes := make(chan error, 1)
	e := NewEngine(http.MethodPost, "/orders/:id",
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
	go func() { defer close(done); Serve(e, httptest.NewRequest(http.MethodPost, "/orders/5", nil)) }()
	<-started
	lose()
	if cause := <-causes; !errors.Is(cause, lockmw.ErrLost) {
		t.Fatalf("handler context cause = %v, want ErrLost", cause)
	}
	if restore != nil {
		restore()
	}
	<-done
}

// A panicking handler still releases the lock, and the panic reaches
// gin.Recovery.
func (r *runner) panicReleases(t *testing.T) {
	l, other := r.locker(t), r.locker(t)
	e := NewGin()
	e.Use(gin.Recovery())
	e.POST("/orders/:id", ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}")),
		func(c *gin.Context) { panic("payment provider exploded") })
	for i := range 2 { // the second would be 409 if the first kept the lock
		if rec := Serve(e, httptest.NewRequest(http.MethodPost, "/orders/3", nil)); rec.Code != http.StatusInternalServerError {
			t.Fatalf("request %d: status %d, want 500 from gin.Recovery", i, rec.Code)
		}
	}
	mustFree(t, other, "order:3")
}

// The handler can lock the same resource again through its request context,
// and gets the middleware's lease, with its fence, from LeaseFrom.
func (r *runner) handlerReenters(t *testing.T) {
	l := r.locker(t)
	e := NewEngine(http.MethodPost, "/orders/:id",
		ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}")),
		func(c *gin.Context) {
			outer := ginlock.LeaseFrom(c)
			if outer == nil || outer.Key() != "order:4" {
				t.Errorf("LeaseFrom = %v, want the lease on order:4", outer)
				return
			}
			if outer.Fence() < 1 {
				t.Errorf("the handler's lease has fence %d, want a positive one", outer.Fence())
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
	if rec := Serve(e, httptest.NewRequest(http.MethodPost, "/orders/4", nil)); rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
}

// Custom handlers replace the default responses; one that writes nothing
// gets the default.
func (r *runner) customHandlers(t *testing.T) {
	holder := r.locker(t)
	lease, err := holder.Acquire(context.Background(), "order:6")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	l := r.locker(t)
	var gotErr error
	e := NewGin()
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

	want := fmt.Sprintf(`{"busy":true,"known":%t}`, r.env.KnowsHolderTTL)
	if rec := Serve(e, httptest.NewRequest(http.MethodPost, "/custom/6", nil)); rec.Code != http.StatusTooManyRequests || rec.Body.String() != want {
		t.Errorf("custom busy: %d %s, want 429 %s", rec.Code, rec.Body, want)
	}
	DecodeProblem(t, Serve(e, httptest.NewRequest(http.MethodPost, "/silent/6", nil)), http.StatusConflict)
	if rec := Serve(e, httptest.NewRequest(http.MethodPost, "/q", nil)); rec.Code != http.StatusUnprocessableEntity || !errors.Is(gotErr, ginlock.ErrNoKey) {
		t.Errorf("custom error: %d, err %v; want 422 and an error matching ErrNoKey", rec.Code, gotErr)
	}
}

// New rejects programming errors when the routes are set up.
func (r *runner) newPanics(t *testing.T) {
	l := r.locker(t)
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
// the Locker's.
func (r *runner) acquireOptionsTTL(t *testing.T) {
	if r.env.LeaseTTL == nil {
		t.Skipf("%s: no LeaseTTL hook", r.env.Name)
	}
	const leaseTTL = 3 * time.Second
	l := r.locker(t, lockmw.WithTTL(10*time.Second))
	var left time.Duration
	e := NewEngine(http.MethodPost, "/orders/:id",
		ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}"),
			ginlock.WithAcquireOptions(lockmw.WithLeaseTTL(leaseTTL))),
		func(c *gin.Context) {
			left = r.env.LeaseTTL(t, prefix(t), "order:12")
			c.Status(http.StatusOK)
		})
	if rec := Serve(e, httptest.NewRequest(http.MethodPost, "/orders/12", nil)); rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	if left <= 0 || left > leaseTTL {
		t.Errorf("TTL of the held lock = %v, want at most the %v lease TTL (the Locker's is 10s)", left, leaseTTL)
	}
}
