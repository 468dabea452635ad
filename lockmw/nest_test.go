package lockmw_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// A lease context that outlives its lease (context.WithoutCancel keeps its
// values) does not nest once the lease has ended: while another Locker
// holds the key, Acquire and TryAcquire see the lock busy instead of
// returning a nested lease of a lock nobody here holds.
func TestNestAfterOuterEndedIsAnOrdinaryAcquisition(t *testing.T) {
	for _, end := range []string{"released", "lost"} {
		t.Run(end, func(t *testing.T) {
			srv := redistest.Start(t)
			l, rival := newLocker(t, srv), newLocker(t, srv)
			ctx := context.Background()
			outer, err := l.Acquire(ctx, "order:7", lockmw.WithLeaseTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			detached := context.WithoutCancel(outer.Context())
			switch end {
			case "released":
				if err := outer.Release(ctx); err != nil {
					t.Fatal(err)
				}
			case "lost":
				if err := srv.Client(t).Del(ctx, lockKey("order:7")).Err(); err != nil {
					t.Fatal(err)
				}
				waitDone(t, outer.Context(), 10*time.Second, "outer lease after its key was deleted")
				lostReason(t, outer.Context())
			}
			held, err := rival.Acquire(ctx, "order:7", lockmw.WithWait(5*time.Second))
			if err != nil {
				t.Fatalf("rival Acquire: %v", err)
			}
			defer held.Release(ctx)

			if n, err := l.TryAcquire(detached, "order:7"); !errors.Is(err, lockmw.ErrNotAcquired) {
				if n != nil {
					t.Errorf("TryAcquire released: %v", n.Release(ctx))
				}
				t.Fatalf("TryAcquire through the %s lease's detached context = %v, want ErrNotAcquired (the rival holds the lock)", end, err)
			}
			// A waiting Acquire waits its WithWait out: the rival holds the lock.
			if n, err := l.Acquire(detached, "order:7", lockmw.WithWait(300*time.Millisecond)); !errors.Is(err, lockmw.ErrNotAcquired) {
				if n != nil {
					t.Errorf("Acquire released: %v", n.Release(ctx))
				}
				t.Fatalf("Acquire through the %s lease's detached context = %v, want ErrNotAcquired after waiting (the rival holds the lock)", end, err)
			}
		})
	}
}

// A nested lease made through a detached context while its outer lease was
// live ends when the outer lease is lost, with the same cause, and its
// Release reports the loss.
func TestNestedLeaseEndsWhenOuterIsLost(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv)
	ctx := context.Background()
	outer, err := l.Acquire(ctx, "order:8", lockmw.WithLeaseTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	nested, err := l.Acquire(context.WithoutCancel(outer.Context()), "order:8")
	if err != nil {
		t.Fatal(err)
	}
	if nested.Fence() != outer.Fence() {
		t.Fatalf("nested fence %d, outer %d: not nested", nested.Fence(), outer.Fence())
	}
	if err := srv.Client(t).Del(ctx, lockKey("order:8")).Err(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, outer.Context(), 10*time.Second, "outer lease after its key was deleted")
	waitDone(t, nested.Context(), 10*time.Second, "nested lease of a lost lease")
	lostReason(t, nested.Context())
	if err := nested.Release(ctx); !errors.Is(err, lockmw.ErrLost) {
		t.Errorf("nested Release after the outer was lost = %v, want ErrLost", err)
	}
	if err := outer.Release(ctx); !errors.Is(err, lockmw.ErrLost) {
		t.Errorf("outer Release = %v, want ErrLost", err)
	}
}

// Releasing the outer lease ends the nested leases still live in it, also
// those made through a detached context; their Release then says the lock
// had gone before them (ErrLost, reason LostReleased), while a nested lease
// released first returns nil.
func TestNestedLeaseEndsWhenOuterIsReleased(t *testing.T) {
	srv := redistest.Start(t)
	l, rival := newLocker(t, srv), newLocker(t, srv)
	ctx := context.Background()
	outer, err := l.Acquire(ctx, "order:9")
	if err != nil {
		t.Fatal(err)
	}
	detached, err := l.Acquire(context.WithoutCancel(outer.Context()), "order:9")
	if err != nil {
		t.Fatal(err)
	}
	derived, err := l.TryAcquire(outer.Context(), "order:9")
	if err != nil {
		t.Fatal(err)
	}
	early, err := l.TryAcquire(outer.Context(), "order:9")
	if err != nil {
		t.Fatal(err)
	}
	if err := early.Release(ctx); err != nil {
		t.Errorf("nested Release while the outer is held = %v, want nil", err)
	}
	if detached.Context().Err() != nil || derived.Context().Err() != nil {
		t.Fatal("nested lease ended while its outer lease is held")
	}

	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitDone(t, detached.Context(), 10*time.Second, "detached nested lease after the outer Release")
	waitDone(t, derived.Context(), 10*time.Second, "derived nested lease after the outer Release")
	if cause := context.Cause(detached.Context()); !errors.Is(cause, context.Canceled) {
		t.Errorf("detached nested context cause = %v, want context.Canceled, as the outer's", cause)
	}
	// The lock is free for others now.
	lease, err := rival.TryAcquire(ctx, "order:9")
	if err != nil {
		t.Fatalf("rival after the outer Release: %v", err)
	}
	defer lease.Release(ctx)
	for name, n := range map[string]*lockmw.Lease{"detached": detached, "derived": derived} {
		err := n.Release(ctx)
		var lost *lockmw.LostError
		if !errors.Is(err, lockmw.ErrLost) || !errors.As(err, &lost) || lost.Reason != lockmw.LostReleased {
			t.Errorf("%s nested Release after the outer's = %v, want a LostError with reason %q", name, err, lockmw.LostReleased)
		}
	}
	if err := early.Release(ctx); err != nil {
		t.Errorf("second Release of the early nested lease = %v, want its first result (nil)", err)
	}
}

// A nested lease of a Locker that closes ends with ErrClosed, as its outer
// lease does, and its Release says so.
func TestNestedLeaseEndsWhenLockerCloses(t *testing.T) {
	srv := redistest.Start(t)
	l, err := lockmw.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	outer, err := l.Acquire(ctx, "order:10")
	if err != nil {
		t.Fatal(err)
	}
	nested, err := l.Acquire(context.WithoutCancel(outer.Context()), "order:10")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, nested.Context(), 10*time.Second, "nested lease after Close")
	if cause := context.Cause(nested.Context()); !errors.Is(cause, lockmw.ErrClosed) {
		t.Errorf("nested context cause = %v, want ErrClosed", cause)
	}
	if err := nested.Release(ctx); !errors.Is(err, lockmw.ErrClosed) {
		t.Errorf("nested Release after Close = %v, want ErrClosed", err)
	}
}
