package lockmw_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// The calls one Locker makes for one lock reach Redis in the order they were
// made, also when they queue together behind busy round trips and the
// server answers NOSCRIPT (its script cache was flushed): the release that
// had to be resent in full still runs before the acquisition that queued
// behind it, which then finds the lock free.
func TestBatchKeepsOrderOfOneLockThroughNoScript(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv)
	admin := srv.Client(t)
	ctx := context.Background()

	lease, err := l.TryAcquire(ctx, "order")
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	// Load the scripts on other keys, then drop them: the release below
	// sends EVALSHA and gets NOSCRIPT.
	if warm, err := l.TryAcquire(ctx, "warm"); err != nil {
		t.Fatalf("TryAcquire warm: %v", err)
	} else if err := warm.Release(ctx); err != nil {
		t.Fatalf("Release warm: %v", err)
	}
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	// With the server stopped, four acquisitions of other locks fill the
	// Locker's round trips; the release and then the acquisition of
	// "order" queue behind them and leave together once the server runs.
	srv.Pause(t)
	paused := true
	defer func() {
		if paused {
			srv.Resume(t)
		}
	}()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s, err := l.TryAcquire(ctx, "filler:"+strconv.Itoa(i)); err == nil {
				_ = s.Release(ctx)
			}
		}()
	}
	time.Sleep(100 * time.Millisecond) // the fillers are on the wire
	released := make(chan error, 1)
	go func() { released <- lease.Release(ctx) }()
	time.Sleep(100 * time.Millisecond) // the release has queued
	acquired := make(chan error, 1)
	var second *lockmw.Lease
	go func() {
		var err error
		second, err = l.TryAcquire(ctx, "order")
		acquired <- err
	}()
	time.Sleep(100 * time.Millisecond) // the acquisition has queued behind it
	srv.Resume(t)
	paused = false

	if err := <-released; err != nil {
		t.Fatalf("Release: %v", err)
	}
	err = <-acquired
	wg.Wait()
	if errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatal("TryAcquire made after Release found the lock still held: it ran before the release, which was resent after NOSCRIPT")
	}
	if err != nil {
		t.Fatalf("TryAcquire after Release: %v", err)
	}
	if err := second.Release(ctx); err != nil {
		t.Fatalf("Release of the second lease: %v", err)
	}
}

var _ = redis.Nil
