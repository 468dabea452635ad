// Package ginsuite holds ginlock's store-independent behaviour tests, so
// that they run on every store's *lockmw.Locker: per-resource exclusion
// across service instances, busy answers, bounded waits, lost locks,
// malformed requests, telemetry. A store's tests call Run with an Env that
// makes Lockers on that store.
package ginsuite

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockmw/lockmw/ginlock"
	"github.com/lockmw/lockmw/lockmw"
)

// Env describes the store the suite runs on. NewLocker is required; a nil
// hook skips the subtests that need it.
type Env struct {
	// Name names the store in failure messages.
	Name string

	// NewLocker returns a new Locker with opts on its own client to the
	// store, as a separate service instance would have, closed at cleanup.
	// The suite gives every Locker of a subtest a lockmw.WithPrefix of its
	// own, so that subtests never see each other's locks.
	NewLocker func(t testing.TB, opts ...lockmw.Option) *lockmw.Locker

	// Lose deletes the held lock on key (under prefix) behind its holder's
	// back, as an operator or a flush would, so that the holder loses it;
	// it returns an error if it could not (no such lock). The suite may
	// call it from a handler's goroutine.
	Lose func(prefix, key string) error

	// LeaseTTL, when set, returns how long the store keeps the held lock
	// on key (under prefix) if its holder stops renewing it.
	LeaseTTL func(t testing.TB, prefix, key string) time.Duration

	// ShortTTL is the lease TTL of the subtests that want a lock to expire,
	// or a loss to be noticed, soon: the store's shortest, or 300 ms when
	// zero.
	ShortTTL time.Duration

	// KnowsHolderTTL is set when a Locker that finds a lock held by another
	// Locker learns how long the holder's lease has left
	// (lockmw.RetryAfter reports it).
	KnowsHolderTTL bool
}

// Run runs every subtest of the suite against env, one after another.
func Run(t *testing.T, env Env) {
	t.Helper()
	if env.Name == "" || env.NewLocker == nil {
		t.Fatalf("ginsuite: Env needs Name and NewLocker (got %+v)", env)
	}
	if env.ShortTTL == 0 {
		env.ShortTTL = 300 * time.Millisecond
	}
	gin.SetMode(gin.ReleaseMode)
	r := &runner{env: env}
	for _, st := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"OneKeyNeverOverlapsAcrossInstances", r.oneKeyNeverOverlaps},
		{"DifferentKeysRunInParallel", r.differentKeysInParallel},
		{"BusyIsConflictWithRetryAfter", r.busyIsConflict},
		{"WithWaitWaitsForTheHolder", r.withWaitWaits},
		{"WaitIsBoundedByTheRequestContext", r.waitBoundedByRequest},
		{"MissingOrInvalidKey", r.missingOrInvalidKey},
		{"JSONBodyIsIntactForTheHandler", r.jsonBodyIntact},
		{"LostLockCancelsTheHandler", r.lostLockCancels},
		{"PanicReleasesTheLock", r.panicReleases},
		{"HandlerReentersThroughItsContext", r.handlerReenters},
		{"CustomHandlers", r.customHandlers},
		{"NewPanicsOnBadConfiguration", r.newPanics},
		{"WithAcquireOptionsSetsTheLeaseTTL", r.acquireOptionsTTL},
		{"NextRequestOfTheSameClientIsNotBusy", r.nextRequestNotBusy},
		{"StreamingResponsesLeaveAtOnce", r.streaming},
		{"JSONNumbersLockOneKeyPerResource", r.jsonNumbers},
		{"LostLockIsReportedAndAnswered", r.lostReported},
		{"GinContextIdiom", r.ginContextIdiom},
		{"RetryAfterEstimatesTheWait", r.retryAfterEstimates},
		{"SetupMistakesAndOperations", r.setupMistakes},
		{"SpansNestUnderOtelgin", r.spansNestUnderOtelgin},
		{"LostOutcomeOnTheSpan", r.lostOutcomeOnTheSpan},
	} {
		t.Run(st.name, st.run)
	}
}

type runner struct {
	env Env
}

// prefix is the key prefix of the running subtest's Lockers.
func prefix(t testing.TB) string {
	return "ginsuite:" + strings.ReplaceAll(t.Name(), "/", ":") + ":"
}

// locker returns a new Locker of the running subtest, closed at cleanup.
func (r *runner) locker(t testing.TB, opts ...lockmw.Option) *lockmw.Locker {
	t.Helper()
	return r.env.NewLocker(t, append([]lockmw.Option{lockmw.WithPrefix(prefix(t))}, opts...)...)
}

// needLose skips the running subtest when the store cannot lose a lock on
// demand.
func (r *runner) needLose(t testing.TB) {
	t.Helper()
	if r.env.Lose == nil {
		t.Skipf("%s: no Lose hook", r.env.Name)
	}
}

// lose makes the held lock on key be lost, reporting a failure with
// t.Error (it may run in a handler's goroutine).
func (r *runner) lose(t testing.TB, key string) {
	t.Helper()
	if err := r.env.Lose(prefix(t), key); err != nil {
		t.Errorf("%s: losing the lock on %q: %v", r.env.Name, key, err)
	}
}

// NewGin returns a new engine whose *gin.Context carries the request's
// context, as ginlock requires.
func NewGin() *gin.Engine {
	e := gin.New()
	e.ContextWithFallback = true
	return e
}

// NewEngine returns an engine serving handlers on method and path.
func NewEngine(method, path string, handlers ...gin.HandlerFunc) *gin.Engine {
	e := NewGin()
	e.Handle(method, path, handlers...)
	return e
}

// Serve runs req through h and returns the recorded response.
func Serve(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// DecodeProblem decodes a problem+json response, failing the test if it is
// not one with the given status.
func DecodeProblem(t testing.TB, rec *httptest.ResponseRecorder, status int) ginlock.Problem {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status = %d, want %d; body %s", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json", ct)
	}
	var p ginlock.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("body is not JSON: %v: %s", err, rec.Body)
	}
	if p.Status != status || p.Type == "" || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem = %+v, want type, title, detail and status %d", p, status)
	}
	return p
}

// mustFree asserts that key can be taken from l, and gives it back.
func mustFree(t testing.TB, l *lockmw.Locker, key string) {
	t.Helper()
	lease, err := l.TryAcquire(context.Background(), key)
	if err != nil {
		t.Fatalf("TryAcquire(%q) = %v; the lock should be free", key, err)
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// post sends a POST with a JSON body to url and returns status and body.
func post(t testing.TB, client *http.Client, url, body string) (int, string) {
	t.Helper()
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Errorf("POST %s: %v", url, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
