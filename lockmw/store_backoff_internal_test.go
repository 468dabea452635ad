package lockmw

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// busyStore is a store whose every lock is held by someone else for an
// hour: it counts the attempts a waiter makes. With backoff set, it offers
// store.Backoff.
type busyStore struct {
	attempts atomic.Int64
}

func (s *busyStore) CheckTTL(time.Duration) error { return nil }

func (s *busyStore) Acquire(context.Context, store.Key, string, time.Duration, bool) (store.Reply, error) {
	s.attempts.Add(1)
	return store.Reply{HolderTTL: time.Hour}, nil
}

func (s *busyStore) Release(context.Context, store.Key, string) (store.Ownership, error) {
	return store.Missing, nil
}

func (s *busyStore) Renew(_ context.Context, reqs []store.RenewRequest) []store.RenewResult {
	return make([]store.RenewResult, len(reqs))
}

func (s *busyStore) Close() error { return nil }

// tunedStore is a busyStore with a backoff range of its own.
type tunedStore struct {
	busyStore
	min, max time.Duration
}

func (s *tunedStore) Backoff() (time.Duration, time.Duration) { return s.min, s.max }

// A store's backoff range (store.Backoff) is what its waiters sleep
// between attempts: every sleep is at least min/2, so a wait of w makes at
// most 1 + w/(min/2) attempts whatever the machine's speed (timers never
// fire early). The Redis-tuned range (0.5–8 ms) makes far more in the same
// wait, as a store without the capability still does.
func TestStoreBackoffRange(t *testing.T) {
	const wait = 400 * time.Millisecond
	waitOn := func(t *testing.T, s store.Store) int64 {
		t.Helper()
		l, err := newStoreLocker(s, []Option{WithTTL(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, err = l.Acquire(context.Background(), "k", WithWait(wait))
		if !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("Acquire on a busy lock: %v, want ErrNotAcquired", err)
		}
		return s.(interface{ count() int64 }).count()
	}
	var tunedN, redisN int64
	var wg sync.WaitGroup
	wg.Go(func() { tunedN = waitOn(t, &tunedStore{min: 50 * time.Millisecond, max: 100 * time.Millisecond}) })
	wg.Go(func() { redisN = waitOn(t, &busyStore{}) })
	wg.Wait()
	if limit := int64(1 + wait/(25*time.Millisecond)); tunedN > limit {
		t.Errorf("a store backing off in [50ms, 100ms] was tried %d times in a %v wait, want at most %d", tunedN, wait, limit)
	}
	if tunedN < 2 {
		t.Errorf("a store backing off in [50ms, 100ms] was tried %d times in a %v wait: the waiter did not retry", tunedN, wait)
	}
	// Redis' range sleeps at most 8 ms: 400ms hold 50 of them; a loaded
	// machine makes fewer, never as few as the tuned store's bound.
	if redisN <= int64(1+wait/(25*time.Millisecond)) {
		t.Errorf("a store without Backoff was tried %d times in a %v wait: it should poll at Redis' 0.5–8 ms", redisN, wait)
	}
}

// The holder's remaining TTL still caps a store's backoff: a holder with
// 1ms left is retried after at most 1ms, not the store's minimum.
func TestStoreBackoffCappedByHolderTTL(t *testing.T) {
	s := &shortHolder{tunedStore: tunedStore{min: time.Hour, max: time.Hour}}
	l, err := newStoreLocker(s, []Option{WithTTL(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatalf("Acquire: %v (the hour-long backoff was not capped by the holder's 1ms)", err)
	}
	_ = lease.Release(ctx)
}

// shortHolder is busy on the first attempt, with 1ms left to its holder,
// and free on the next.
type shortHolder struct {
	tunedStore
}

func (s *shortHolder) Acquire(context.Context, store.Key, string, time.Duration, bool) (store.Reply, error) {
	if s.attempts.Add(1) == 1 {
		return store.Reply{HolderTTL: time.Millisecond}, nil
	}
	return store.Reply{Acquired: true, Fence: 1, ValidFrom: time.Now()}, nil
}

// A store's range must be 0 < min <= max.
func TestStoreBackoffBadRange(t *testing.T) {
	for _, r := range [][2]time.Duration{{0, time.Second}, {2 * time.Second, time.Second}} {
		_, err := newStoreLocker(&tunedStore{min: r[0], max: r[1]}, nil)
		if !errors.Is(err, ErrInvalidOption) {
			t.Errorf("backoff range %v: %v, want ErrInvalidOption", r, err)
		}
	}
}

func (s *busyStore) count() int64 { return s.attempts.Load() }
