package lockmw

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// stallingStore answers no request: each waits until its context ends,
// bounded by the store's own TTL bound as the stores bound theirs, and
// returns the bare context error, as store clients do. With diagnosis set,
// it is a store.Diagnoser that says so.
type stallingStore struct {
	diagnosis error
	acquires  bool          // Acquire answers at once, acquired
	ttl       time.Duration // the store's own bound on each request
}

func (s *stallingStore) CheckTTL(time.Duration) error { return nil }

func (s *stallingStore) Acquire(ctx context.Context, _ store.Key, _ string, _ time.Duration, _ bool) (store.Reply, error) {
	if s.acquires {
		return store.Reply{Acquired: true, Fence: 1, ValidFrom: time.Now()}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.ttl)
	defer cancel()
	<-ctx.Done()
	return store.Reply{}, ctx.Err()
}

func (s *stallingStore) Release(ctx context.Context, _ store.Key, _ string) (store.Ownership, error) {
	ctx, cancel := context.WithTimeout(ctx, s.ttl)
	defer cancel()
	<-ctx.Done()
	return 0, ctx.Err()
}

func (s *stallingStore) Renew(ctx context.Context, reqs []store.RenewRequest) []store.RenewResult {
	ctx, cancel := context.WithTimeout(ctx, s.ttl)
	defer cancel()
	<-ctx.Done()
	res := make([]store.RenewResult, len(reqs))
	for i := range res {
		res[i].Err = ctx.Err()
	}
	return res
}

func (s *stallingStore) Close() error { return nil }
func (s *stallingStore) Name() string { return "Memo" }

// diagnosedStore is a stallingStore that is a store.Diagnoser.
type diagnosedStore struct{ stallingStore }

func (s *diagnosedStore) Diagnose(context.Context) error { return s.diagnosis }

// TestUnansweredRequestIsNamed: a request that the Locker's bound (the TTL)
// ended names the store, what it waited for, how long and, from a
// store.Diagnoser, the last error reaching it; it still matches
// ErrUnavailable and context.DeadlineExceeded. The caller's own context
// ending first stays the caller's error.
func TestUnansweredRequestIsNamed(t *testing.T) {
	refused := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	for _, tc := range []struct {
		name string
		s    store.Store
		want string
	}{
		{"plain", &stallingStore{ttl: 200 * time.Millisecond}, `lockmw: store unavailable: acquire "k": Memo did not answer the acquisition within 200ms (the lease TTL bounds each request): context deadline exceeded`},
		{"diagnosed", &diagnosedStore{stallingStore{diagnosis: refused, ttl: 200 * time.Millisecond}}, "Memo did not answer the acquisition within 200ms (the lease TTL bounds each request); last error reaching it: " + refused.Error()},
		{"no cause known", &diagnosedStore{stallingStore{ttl: 200 * time.Millisecond}}, "Memo did not answer the acquisition within 200ms (the lease TTL bounds each request); its client saw no connection error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := newStoreLocker(tc.s, []Option{WithTTL(200 * time.Millisecond)})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			_, err = l.TryAcquire(context.Background(), "k")
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("TryAcquire: %v, want ErrUnavailable and DeadlineExceeded saying %q", err, tc.want)
			}
			if errors.Is(err, refused) {
				t.Errorf("TryAcquire: %v matches the diagnosis, which is not what the request did", err)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err = l.TryAcquire(ctx, "k")
			if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), "did not answer") {
				t.Errorf("TryAcquire whose own context ended first: %v, want the caller's context error only", err)
			}
		})
	}
}

// TestUnansweredReleaseIsNamed: a release that the Locker's bound ended
// names the store and the release.
func TestUnansweredReleaseIsNamed(t *testing.T) {
	l, err := newStoreLocker(&stallingStore{acquires: true, ttl: time.Second}, []Option{WithTTL(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lease, err := l.TryAcquire(context.Background(), "k", WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	err = lease.Release(context.Background())
	want := `lockmw: store unavailable: release "k": Memo did not answer the release within 1s (the lease TTL bounds each request)`
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), want) {
		t.Errorf("Release: %v, want ErrUnavailable saying %q", err, want)
	}
}
