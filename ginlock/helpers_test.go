package ginlock_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockmw/lockmw/ginlock"
	"github.com/lockmw/lockmw/internal/lockmwtest"
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

// lockKey is where lockmw stores the owner token of key with prefix.
func lockKey(prefix, key string) string { return prefix + "{" + key + "}" }
