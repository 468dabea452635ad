package ginsuite

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/lockmw/lockmw/ginlock"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/lockmw"
)

// The subtests in this file follow requests as clients meet them.

// A client that has read a complete response and at once sends its next
// request for the same resource, on a new connection, never gets 409 from
// its own finished request. The body (64 KiB) is larger than net/http's
// write buffer, so without the middleware holding it back it would leave
// while the handler still runs its 20 ms of audit logging, lock held.
func (r *runner) nextRequestNotBusy(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 64<<10)
	e := NewEngine(http.MethodPost, "/orders/:id",
		ginlock.New(r.locker(t), ginlock.Param("id"), ginlock.WithName("order:{id}")),
		func(c *gin.Context) {
			c.Data(http.StatusOK, "application/octet-stream", body)
			time.Sleep(20 * time.Millisecond) // the audit log, after the response was written
		})
	ts := httptest.NewServer(e)
	defer ts.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}} // a new connection per request
	for i := range 20 {
		resp, err := client.Post(ts.URL+"/orders/42", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || len(got) != len(body) {
			t.Fatalf("request %d: status %d, %d bytes (%v), want 200 with %d bytes: %.200s", i, resp.StatusCode, len(got), err, len(body), got)
		}
	}
}

// With WithStreaming, or once a handler flushes, the response leaves as it
// is written: the client reads it while the handler, still holding the
// lock, waits for the client to have it. (Without WithStreaming, the 64 KiB
// would be held back: the handler would wait in vain.)
func (r *runner) streaming(t *testing.T) {
	l := r.locker(t)
	for _, tc := range []struct {
		name  string
		opts  []ginlock.Option
		flush bool
		body  string
	}{
		{"WithStreaming", []ginlock.Option{ginlock.WithStreaming()}, false, strings.Repeat("e", 64<<10)},
		{"Flush", nil, true, "event 1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clientHasIt := make(chan struct{})
			e := NewEngine(http.MethodGet, "/events/:id",
				ginlock.New(l, ginlock.Param("id"), append(tc.opts, ginlock.WithName("feed:{id}"))...),
				func(c *gin.Context) {
					c.String(http.StatusOK, tc.body)
					if tc.flush {
						c.Writer.Flush()
					}
					select {
					case <-clientHasIt:
					case <-time.After(10 * time.Second):
						t.Error("the client never got the streamed response while the lock was held")
					}
				})
			ts := httptest.NewServer(e)
			defer ts.Close()
			resp, err := http.Get(ts.URL + "/events/1")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got := make([]byte, len(tc.body))
			if _, err := io.ReadFull(resp.Body, got); err != nil || string(got) != tc.body {
				t.Fatalf("read %.40q, %v", got, err)
			}
			close(clientHasIt)
			_, _ = io.ReadAll(resp.Body)
		})
	}
}

// One resource is one key: a JSON number is written in canonical form, so
// 42, 42.0, 4.2e1, 420e-1 and the string "42" lock the same item.
func (r *runner) jsonNumbers(t *testing.T) {
	var key string
	e := NewEngine(http.MethodPost, "/buy",
		ginlock.New(r.locker(t), ginlock.JSONField("sku"), ginlock.WithName("item:{sku}")),
		func(c *gin.Context) { key = ginlock.LeaseFrom(c).Key(); c.Status(http.StatusOK) })
	for body, want := range map[string]string{
		`{"sku":42}`: "item:42", `{"sku":42.0}`: "item:42", `{"sku":4.2e1}`: "item:42", `{"sku":420E-1}`: "item:42",
		`{"sku":"42"}`: "item:42", `{"sku":-0.0}`: "item:0", `{"sku":0.50}`: "item:0.5", `{"sku":-5e-3}`: "item:-0.005",
		`{"sku":1.5e2}`: "item:150", `{"sku":"42.0"}`: "item:42.0",
	} {
		key = ""
		if rec := Serve(e, httptest.NewRequest(http.MethodPost, "/buy", strings.NewReader(body))); rec.Code != http.StatusOK || key != want {
			t.Errorf("%s: status %d, locked %q; want 200 and %q", body, rec.Code, key, want)
		}
	}
	rec := Serve(e, httptest.NewRequest(http.MethodPost, "/buy", strings.NewReader(`{"sku":1e100000}`)))
	if p := DecodeProblem(t, rec, http.StatusBadRequest); !strings.Contains(p.Detail, "too large") {
		t.Errorf("huge number: detail %q, want it to say too large", p.Detail)
	}
}

// A lock lost while the handlers ran is an error span with outcome lost,
// counted as lost; a client whose handler wrote nothing gets 409 with type
// ProblemLost, and one whose handler answered gets that answer.
func (r *runner) lostReported(t *testing.T) {
	r.needLose(t)
	recorder, tp, reader, mp := lockmwtest.NewTelemetry()
	l := r.locker(t, lockmw.WithTTL(r.env.ShortTTL))
	var logs lockmwtest.SyncBuffer
	mw := ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}"), ginlock.WithTracerProvider(tp),
		ginlock.WithMeterProvider(mp), ginlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	loseLock := func(c *gin.Context) {
		r.lose(t, "order:"+c.Param("id"))
		<-c.Request.Context().Done()
	}
	e := NewGin()
	e.POST("/silent/:id", mw, loseLock)
	e.POST("/answers/:id", mw, func(c *gin.Context) { loseLock(c); c.String(http.StatusOK, "charged") })

	var silent, answered *httptest.ResponseRecorder
	lockmwtest.Within(t, 10*time.Second+2*r.env.ShortTTL, "requests whose lock is lost", func() {
		silent = Serve(e, httptest.NewRequest(http.MethodPost, "/silent/11", nil))
		answered = Serve(e, httptest.NewRequest(http.MethodPost, "/answers/12", nil))
	})
	if p := DecodeProblem(t, silent, http.StatusConflict); p.Type != ginlock.ProblemLost {
		t.Errorf("handler wrote nothing: problem %+v, want type %s", p, ginlock.ProblemLost)
	}
	if answered.Code != http.StatusOK || answered.Body.String() != "charged" {
		t.Errorf("handler answered: got %d %q, want its own 200", answered.Code, answered.Body)
	}
	spans := recorder.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for _, s := range spans {
		if got := attrMap(s.Attributes())["lock.outcome"]; got != attribute.StringValue(ginlock.OutcomeLost) || s.Status().Code != codes.Error {
			t.Errorf("span: lock.outcome %v, status %v; want lost, Error", got, s.Status())
		}
	}
	if n := countOutcomes(t, reader, "")[ginlock.OutcomeLost]; n != 2 {
		t.Errorf("ginlock.requests{outcome=lost} = %d, want 2", n)
	}
	if !strings.Contains(logs.String(), "lost") {
		t.Errorf("nothing logged about the lost lock: %q", logs.String())
	}
}

// Locking the same key with the *gin.Context inside a locked handler nests
// (the engine sets ContextWithFallback); an engine without fallback is a
// setup mistake answered 500 and logged before any handler runs, unless
// WithRequestContextOnly says the handlers use c.Request.Context().
func (r *runner) ginContextIdiom(t *testing.T) {
	l := r.locker(t)
	var logs lockmwtest.SyncBuffer
	logger := ginlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	nested := func(c *gin.Context) {
		err := l.Do(c, "order:"+c.Param("id"), func(ctx context.Context) error { return nil }, lockmw.WithWait(5*time.Second))
		if err != nil {
			c.String(http.StatusInternalServerError, err.Error())
			return
		}
		c.String(http.StatusOK, "nested")
	}
	fallback := NewEngine(http.MethodPost, "/orders/:id", ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}")), nested)
	lockmwtest.Within(t, 10*time.Second, "locker.Do(c, ...) in a locked handler", func() {
		if rec := Serve(fallback, httptest.NewRequest(http.MethodPost, "/orders/1", nil)); rec.Code != http.StatusOK {
			t.Errorf("fallback engine: status %d %s, want 200", rec.Code, rec.Body)
		}
	})

	plain := gin.New() // ContextWithFallback false
	var ran bool
	plain.POST("/orders/:id", ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}"), logger),
		func(c *gin.Context) { ran = true; nested(c) })
	plain.POST("/own/:id", ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}"), ginlock.WithRequestContextOnly()),
		func(c *gin.Context) { c.Status(http.StatusNoContent) })
	lockmwtest.Within(t, 10*time.Second, "a request on an engine without fallback", func() {
		p := DecodeProblem(t, Serve(plain, httptest.NewRequest(http.MethodPost, "/orders/2", nil)), http.StatusInternalServerError)
		if p.Type != ginlock.ProblemMisconfigured || ran {
			t.Errorf("problem %+v, handler ran %v; want type %s and no handler", p, ran, ginlock.ProblemMisconfigured)
		}
	})
	if !strings.Contains(logs.String(), "ContextWithFallback") {
		t.Errorf("the log does not say how to fix it: %q", logs.String())
	}
	if rec := Serve(plain, httptest.NewRequest(http.MethodPost, "/own/3", nil)); rec.Code != http.StatusNoContent {
		t.Errorf("WithRequestContextOnly: status %d, want 204", rec.Code)
	}
	mustFree(t, r.locker(t), "order:2")
}

// Retry-After estimates the wait from how long the lock's holds take, not
// from the holder's TTL: after quick holds, a request that finds a lock
// with 3 s of lease left is told to come back sooner than those 3 s.
func (r *runner) retryAfterEstimates(t *testing.T) {
	l := r.locker(t)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	e := NewEngine(http.MethodPost, "/orders/:id",
		ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}"),
			ginlock.WithAcquireOptions(lockmw.WithLeaseTTL(3*time.Second))),
		func(c *gin.Context) {
			if c.Param("id") == "slow" {
				entered <- struct{}{}
				<-release
			}
			c.Status(http.StatusOK)
		})
	var longest time.Duration // bounds every hold the middleware observed
	for range 5 {
		start := time.Now()
		if rec := Serve(e, httptest.NewRequest(http.MethodPost, "/orders/quick", nil)); rec.Code != http.StatusOK {
			t.Fatalf("status %d", rec.Code)
		}
		longest = max(longest, time.Since(start))
	}
	done := make(chan struct{})
	go func() { defer close(done); Serve(e, httptest.NewRequest(http.MethodPost, "/orders/slow", nil)) }()
	<-entered
	rec := Serve(e, httptest.NewRequest(http.MethodPost, "/orders/slow", nil))
	close(release)
	<-done
	DecodeProblem(t, rec, http.StatusConflict)
	secs, err := strconv.Atoi(rec.Header().Get("Retry-After"))
	if err != nil || secs < 1 {
		t.Fatalf("Retry-After = %q, want whole seconds", rec.Header().Get("Retry-After"))
	}
	ttlSecs := 3 // the holder's lease, which the old answer gave
	if longest >= 2*time.Second {
		t.Skipf("the quick holds took up to %v: too slow to tell the estimate from the TTL", longest)
	}
	if want := max(1, int((longest+time.Second-1)/time.Second)); secs > want || secs >= ttlSecs {
		t.Errorf("Retry-After = %d s, want at most %d s (holds took up to %v), below the holder's %d s lease",
			secs, want, longest, ttlSecs)
	}
}

// Setup mistakes fail loudly: a Param the route lacks is 500 (not 400 for
// every request) and logged. A 500 is recorded in c.Errors for gin loggers
// (and otelgin); the 400 and 409 answers are not, and WithSkip passes
// requests through without a lock.
func (r *runner) setupMistakes(t *testing.T) {
	l, other := r.locker(t), r.locker(t)
	var logs lockmwtest.SyncBuffer
	var mu sync.Mutex
	var recorded []string
	e := NewGin()
	e.Use(func(c *gin.Context) { // a gin logger's view
		c.Next()
		mu.Lock()
		defer mu.Unlock()
		recorded = append(recorded, c.Errors.String())
	})
	e.POST("/typo/:id", ginlock.New(l, ginlock.Param("order_id"), ginlock.WithName("order:{id}"),
		ginlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))), func(c *gin.Context) { t.Error("handler ran") })
	e.POST("/orders/:id", ginlock.New(l, ginlock.Param("id"), ginlock.WithName("order:{id}"),
		ginlock.WithSkip(func(c *gin.Context) bool { return c.Query("dry_run") == "1" })),
		func(c *gin.Context) {
			if ginlock.LeaseFrom(c) != nil {
				c.String(http.StatusOK, "locked")
				return
			}
			mustFree(t, other, "order:"+c.Param("id"))
			c.String(http.StatusOK, "skipped")
		})
	e.POST("/q", ginlock.New(l, ginlock.Query("id")), func(c *gin.Context) {})

	p := DecodeProblem(t, Serve(e, httptest.NewRequest(http.MethodPost, "/typo/1", nil)), http.StatusInternalServerError)
	if p.Type != ginlock.ProblemMisconfigured || !strings.Contains(logs.String(), "order_id") {
		t.Errorf("missing route parameter: problem %+v, log %q; want %s and a log naming order_id", p, logs.String(), ginlock.ProblemMisconfigured)
	}
	if rec := Serve(e, httptest.NewRequest(http.MethodPost, "/orders/5?dry_run=1", nil)); rec.Body.String() != "skipped" {
		t.Errorf("WithSkip: %d %s, want the handler to run without the lock", rec.Code, rec.Body)
	}
	if rec := Serve(e, httptest.NewRequest(http.MethodPost, "/orders/5", nil)); rec.Body.String() != "locked" {
		t.Errorf("not skipped: %d %s, want the handler to run with the lock", rec.Code, rec.Body)
	}
	DecodeProblem(t, Serve(e, httptest.NewRequest(http.MethodPost, "/q", nil)), http.StatusBadRequest)
	lease, err := other.Acquire(context.Background(), "order:6")
	if err != nil {
		t.Fatal(err)
	}
	DecodeProblem(t, Serve(e, httptest.NewRequest(http.MethodPost, "/orders/6", nil)), http.StatusConflict)
	_ = lease.Release(context.Background())

	mu.Lock()
	got := append([]string(nil), recorded...)
	mu.Unlock()
	for i, want := range []string{"order_id", "", "", "", ""} {
		if i >= len(got) || (want == "") != (got[i] == "") || !strings.Contains(got[i], want) {
			t.Errorf("request %d: c.Errors %q, want it to mention %q", i, got[min(i, len(got)-1)], want)
		}
	}
}
