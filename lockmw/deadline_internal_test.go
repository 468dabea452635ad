package lockmw

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// A lease's deadline is checked, not only timed. Each subtest moves the
// clock that lockmw checks deadlines against (renewScheduler.ahead) past a
// lease's deadline while the watchdog's timer for it has not fired, as on a
// host where timers fire late, and shows one place where lockmw acts on the
// lease refusing to: the lease's context is still live until then.
func TestLeaseDeadlineChecked(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	const ttl = 10 * time.Second

	newLocker := func(t *testing.T) *Locker {
		t.Helper()
		l, err := New(srv.Client(t), WithTTL(ttl), WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	acquire := func(t *testing.T, l *Locker, ctx context.Context, key string) *Lease {
		t.Helper()
		s, err := l.TryAcquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// pastDeadline moves l's check clock past s's deadline; s's timer has
	// not fired (its context is live).
	pastDeadline := func(t *testing.T, l *Locker, s *Lease) {
		t.Helper()
		l.keeper.ahead.Store(int64(time.Until(s.Deadline()) + time.Millisecond))
		if s.Context().Err() != nil {
			t.Fatalf("lease context ended before the check: %v", context.Cause(s.Context()))
		}
	}
	// lostAt asserts that s ended lost with reason, wrapping why if not nil.
	lostAt := func(t *testing.T, s *Lease, reason LostReason, why error) {
		t.Helper()
		if s.Context().Err() == nil {
			t.Fatal("lease context still live past the deadline")
		}
		var lost *LostError
		if cause := context.Cause(s.Context()); !errors.As(cause, &lost) || lost.Reason != reason {
			t.Fatalf("lease context cause %v, want a LostError with reason %s", cause, reason)
		}
		if why != nil && !errors.Is(lost.Err, why) {
			t.Fatalf("lost because %v, want %v", lost.Err, why)
		}
	}

	t.Run("Valid", func(t *testing.T) {
		l := newLocker(t)
		s := acquire(t, l, ctx, "valid")
		d := s.Deadline()
		if !strings.Contains(d.String(), "m=") {
			t.Errorf("Deadline %v carries no monotonic reading", d)
		}
		if left := time.Until(d); left <= 0 || left > ttl {
			t.Errorf("Deadline %v after acquisition, want within the TTL %v", left, ttl)
		}
		if !s.Valid() {
			t.Fatal("Valid false for a fresh lease")
		}
		n := acquire(t, l, s.Context(), "valid")
		if n.outer != s || !n.Deadline().Equal(d) || !n.Valid() {
			t.Fatalf("nested lease: outer %p (want %p), deadline %v (want %v), valid %v", n.outer, s, n.Deadline(), d, n.Valid())
		}
		// A confirmed renewal moves the deadline.
		renewNow(l, s)
		if !s.Deadline().After(d) {
			t.Fatalf("Deadline %v after a renewal, want later than %v", s.Deadline(), d)
		}
		pastDeadline(t, l, s)
		if n.Valid() {
			t.Error("nested lease Valid past its outermost lease's deadline")
		}
		if s.Valid() {
			t.Error("Valid past the deadline")
		}
		lostAt(t, s, LostDeadline, nil)
		lostAt(t, n, LostDeadline, nil)
	})

	t.Run("renewal", func(t *testing.T) {
		l := newLocker(t)
		s := acquire(t, l, ctx, "renewal")
		// The renewal leaves before the deadline and its confirmation comes
		// after it: the lease is not revived.
		d := s.Deadline()
		pastDeadline(t, l, s)
		renewNow(l, s)
		lostAt(t, s, LostDeadline, errRenewalLate)
		if !s.Deadline().Equal(d) {
			t.Errorf("a renewal confirmed late moved the deadline from %v to %v", d, s.Deadline())
		}
	})

	t.Run("nested", func(t *testing.T) {
		l := newLocker(t)
		s := acquire(t, l, ctx, "nested")
		pastDeadline(t, l, s)
		if n, err := l.TryAcquire(context.WithoutCancel(s.Context()), "nested"); err == nil {
			t.Fatalf("nested lease %p returned through a lease past its deadline", n)
		}
		lostAt(t, s, LostDeadline, nil)
		_, err := l.Acquire(s.Context(), "nested")
		if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrLost) {
			t.Fatalf("Acquire through the lost lease's context: %v, want context.Canceled and ErrLost", err)
		}
	})

	t.Run("release", func(t *testing.T) {
		l := newLocker(t)
		s := acquire(t, l, ctx, "release")
		pastDeadline(t, l, s)
		err := s.Release(ctx)
		var lost *LostError
		if !errors.As(err, &lost) || lost.Reason != LostDeadline {
			t.Fatalf("Release past the deadline: %v, want ErrLost (reason deadline)", err)
		}
		lostAt(t, s, LostDeadline, nil)
		// The key was still the lease's: the release freed it.
		other := acquire(t, newLocker(t), ctx, "release")
		_ = other.Release(ctx)
	})

	t.Run("nested release", func(t *testing.T) {
		l := newLocker(t)
		s := acquire(t, l, ctx, "nested-release")
		n := acquire(t, l, s.Context(), "nested-release")
		pastDeadline(t, l, s)
		if err := n.Release(ctx); !errors.Is(err, ErrLost) {
			t.Fatalf("nested Release past the deadline: %v, want ErrLost", err)
		}
		lostAt(t, s, LostDeadline, nil)
	})

	t.Run("hand-over confirmed late", func(t *testing.T) {
		l := newLocker(t)
		a := testAcquisition(l, "confirmed-late")
		h := newTestHandOver()
		s, err := l.newEarlyLease(a, newToken(), 1, time.Now().Add(ttl), false, nil, h)
		if err != nil {
			t.Fatal(err)
		}
		pastDeadline(t, l, s)
		h.settle()
		l.keeper.confirm(s, time.Now()) // as the store's policy does (store.Host's Confirm)
		lostAt(t, s, LostDeadline, errConfirmedLate)
	})

	t.Run("hand-over taken late", func(t *testing.T) {
		l := newLocker(t)
		a := testAcquisition(l, "taken-late")
		h := newTestHandOver()
		h.settle()
		deadline := time.Now().Add(ttl)
		l.keeper.ahead.Store(int64(time.Until(deadline) + time.Millisecond))
		s, err := l.newEarlyLease(a, newToken(), 1, deadline, false, nil, h)
		if s != nil || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("lease %p handed over past its deadline (error %v); want none and ErrUnavailable", s, err)
		}
	})
}

// renewNow renews s once, as the watchdog would, and returns once the
// answer is applied.
func renewNow(l *Locker, s *Lease) {
	l.keeper.mu.Lock()
	s.keep.inflight = true
	l.keeper.mu.Unlock()
	l.keeper.renew([]*Lease{s}, time.Now())
}

// testAcquisition is an Acquire of key on l under way, with l's TTL.
func testAcquisition(l *Locker, key string) *acquisition {
	ctx := context.Background()
	return newAcquisition(ctx, ctx, store.Key{Prefix: l.cfg.prefix, Name: key}, &acquireConfig{ttl: l.cfg.ttl, watchdog: true, name: key})
}

// testHandOver is an early hand-over (store.Settling) that a test settles.
type testHandOver struct{ done chan struct{} }

func newTestHandOver() *testHandOver { return &testHandOver{done: make(chan struct{})} }

func (h *testHandOver) settle()                  { close(h.done) }
func (h *testHandOver) Settled() <-chan struct{} { return h.done }
func (h *testHandOver) Wait(ctx context.Context) {
	select {
	case <-h.done:
	case <-ctx.Done():
	}
}
