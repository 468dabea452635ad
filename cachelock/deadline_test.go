package cachelock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lockmw/lockmw/cachelock"
	"github.com/lockmw/lockmw/internal/lockmwtest"
	"github.com/lockmw/lockmw/internal/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// A write that outlasts Update's lease is reported as lost also when the
// watchdog's timer that ends the lease context fires late: Update checks
// the lease's deadline itself. The keys are invalidated all the same (the
// write may have committed).
func TestUpdateCheckedAgainstTheLeaseDeadline(t *testing.T) {
	srv := redistest.Start(t)
	db := openDB(t)
	const ttl = 2 * time.Second
	stall := lockmwtest.NewWatchdogStall()
	locker := lockmwtest.NewLocker(t, srv, lockmw.WithTTL(ttl), lockmw.WithLogger(stall.Logger()))
	c, err := cachelock.New(srv.Client(t), locker, cachelock.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const key = "product:1"
	if v, _ := cachedPrice(t, c, db, key, 1); v != "100" {
		t.Fatalf("%s = %s, want 100", key, v)
	}

	err = c.Update(ctx, key, func(ctx context.Context, fence uint64) error {
		// The watchdog stalls, so the lease's deadline passes (every
		// renewal left before the stall) while its timer does not fire.
		stall.Stall(t, locker)
		stalled := time.Now()
		lockmwtest.Eventually(t, 2*ttl, "the lease deadline passing", func() bool { return time.Since(stalled) > ttl })
		if ctx.Err() != nil {
			t.Fatalf("the lease context ended though the watchdog stalled: %v", context.Cause(ctx))
		}
		return setPrice(ctx, db, 1, 200, fence)
	})
	if !errors.Is(err, lockmw.ErrLost) || !strings.Contains(err.Error(), "during the write") {
		t.Fatalf("Update whose write outlasted its lease: %v, want ErrLost, lost during the write", err)
	}
	if _, err := c.Get(ctx, key); !errors.Is(err, cachelock.ErrMiss) {
		t.Fatalf("Get after the Update: %v, want ErrMiss (invalidated)", err)
	}
}
