package mysql_test

import (
	"errors"
	"testing"

	"github.com/lockmw/lockmw/lockmw"
)

// A first look: acquire, busy, release, fences rising across holders.
func TestAcquireBusyRelease(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	a, b := newLocker(t, srv), newLocker(t, srv)
	ctx := bg(t)
	l1, err := a.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx, "k"); !errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatalf("second TryAcquire: %v, want ErrNotAcquired", err)
	}
	var busy *lockmw.NotAcquiredError
	if _, err := b.TryAcquire(ctx, "k"); !errors.As(err, &busy) || busy.RetryAfter <= 0 || busy.RetryAfter > testTTL {
		t.Fatalf("busy: %v, want RetryAfter in (0, %v]", err, testTTL)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := b.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Fence() <= l1.Fence() {
		t.Fatalf("fence %d after %d", l2.Fence(), l1.Fence())
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
