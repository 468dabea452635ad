// Package lockmwtest holds test helpers shared by lockmw's packages.
package lockmwtest

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

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
