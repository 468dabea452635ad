package lockmwtest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// TestNewLockerIsClosedAtCleanup checks that the Locker works and that the
// cleanup of the test that made it closes it.
func TestNewLockerIsClosedAtCleanup(t *testing.T) {
	srv := redistest.Start(t)
	var locker *lockmw.Locker
	t.Run("use", func(t *testing.T) {
		locker = lockmwtest.NewLocker(t, srv)
		lease, err := locker.TryAcquire(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := locker.TryAcquire(context.Background(), "k"); !errors.Is(err, lockmw.ErrClosed) {
		t.Fatalf("TryAcquire after cleanup = %v, want ErrClosed", err)
	}
}
