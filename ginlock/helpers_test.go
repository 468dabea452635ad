package ginlock_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockmw/lockmw/ginlock"
	"github.com/lockmw/lockmw/internal/lockmwtest"
	"github.com/lockmw/lockmw/lockmw"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.ReleaseMode)
	os.Exit(m.Run())
}

// newLocker and newLockerOn return a Locker closed at cleanup.
var (
	newLocker   = lockmwtest.NewLocker
	newLockerOn = lockmwtest.NewLockerOn
)

// newGin returns a new engine whose *gin.Context carries the request's
// context, as ginlock requires.
func newGin() *gin.Engine {
	e := gin.New()
	e.ContextWithFallback = true
	return e
}

// newEngine returns an engine serving handlers on method and path.
func newEngine(method, path string, handlers ...gin.HandlerFunc) *gin.Engine {
	e := newGin()
	e.Handle(method, path, handlers...)
	return e
}

// serve runs req through h and returns the recorded response.
func serve(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// problem decodes a problem+json response, failing the test if it is not one
// with the given status.
func problem(t testing.TB, rec *httptest.ResponseRecorder, status int) ginlock.Problem {
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

// mustBusy asserts that key is held by someone other than l.
func mustBusy(t testing.TB, l *lockmw.Locker, key string) {
	t.Helper()
	lease, err := l.TryAcquire(context.Background(), key)
	if err == nil {
		_ = lease.Release(context.Background())
		t.Fatalf("TryAcquire(%q) succeeded; the lock should be held", key)
	}
	if !errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatalf("TryAcquire(%q) = %v, want ErrNotAcquired", key, err)
	}
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

// within runs fn in a goroutine and fails the test if it does not return
// within limit.
func within(t testing.TB, limit time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s did not finish within %v", what, limit)
	}
}

// lockKey is where lockmw stores the owner token of key with the default prefix.
func lockKey(key string) string { return lockmw.DefaultPrefix + "{" + key + "}" }
