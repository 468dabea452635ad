// Package lockmwtest holds test helpers shared by lockmw's packages.
package lockmwtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// MustBusy asserts that key is held by someone other than l: TryAcquire
// from l answers ErrNotAcquired (a lease it gets is given back before the
// test fails).
func MustBusy(t testing.TB, l *lockmw.Locker, key string) {
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

// NewLocker returns a Locker on its own client to srv (one per simulated
// process or service instance), closed at cleanup.
func NewLocker(t testing.TB, srv *redistest.Server, opts ...lockmw.Option) *lockmw.Locker {
	t.Helper()
	return NewLockerOn(t, srv.Client(t), opts...)
}

// NewLockerOn returns a Locker on client, closed at cleanup.
func NewLockerOn(t testing.TB, client redis.UniversalClient, opts ...lockmw.Option) *lockmw.Locker {
	t.Helper()
	l, err := lockmw.New(client, opts...)
	if err != nil {
		t.Fatalf("lockmw.New: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// Eventually polls cond until it holds, failing the test after limit; what
// names the awaited condition in the failure.
func Eventually(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v", what, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Within runs fn in a goroutine and fails the test if it does not return
// within limit; what names fn in the failure.
func Within(t testing.TB, limit time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s did not finish within %v", what, limit)
	}
}

// A SyncBuffer is a strings.Builder safe for a logger and a test to
// share.
type SyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// RunWithRedis is the body of a TestMain for a package whose runnable
// examples use a real Redis: it starts one redis-server (redistest.StartMain),
// points *addr at it (the examples' redisAddr), runs m and stops the server.
// It returns the exit code for os.Exit: 1, with the reason on standard error,
// if the server cannot be started (redis-server missing, with install advice).
func RunWithRedis(m *testing.M, addr *string) int {
	a, stop, err := redistest.StartMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	*addr = a
	return m.Run()
}
