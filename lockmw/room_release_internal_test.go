package lockmw

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// TestRoomWaiterWokenDuringReleaseLinesUp: a Locker's second caller waits
// in its room while its first caller holds the lock; a waiter of another
// Locker lined up first, so the release hands the lock there and wakes the
// room's waiter. The woken waiter's attempt can finish while the release
// is still under way, when the lock still counts as this Locker's (the
// room would then get it in-process): the waiter stays in the room. It
// must still line up once the release ends, not sleep until the holder's
// TTL would have run out (the fleet check saw such 10 s waits with 2
// goroutines per Locker). The test widens that window: the release's end
// waits for the woken waiter to have made its attempt.
func TestRoomWaiterWokenDuringReleaseLinesUp(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	const key, ttl = "room:woken-during-release", 30 * time.Second
	newL := func() *Locker {
		l, err := New(srv.Client(t), WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	a, b := newL(), newL()
	k := newLockRef(a.cfg.prefix, key)
	queueLen := func(n int64) error {
		got, err := admin.LLen(ctx, k.queue).Result()
		if err != nil {
			return err
		}
		if got != n {
			return fmt.Errorf("the lock's queue holds %d entries, want %d", got, n)
		}
		return nil
	}
	until := func(within time.Duration, cond func() error) error {
		deadline := time.Now().Add(within)
		for {
			err := cond()
			if err == nil || time.Now().After(deadline) {
				return err
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	held, err := a.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		who   string
		lease *Lease
		err   error
	}
	got := make(chan result, 2)
	go func() {
		l, err := b.Acquire(ctx, key)
		got <- result{"b", l, err}
	}()
	if err := until(10*time.Second, func() error { return queueLen(1) }); err != nil {
		t.Fatal(err) // b lined up
	}
	go func() {
		l, err := a.Acquire(ctx, key)
		got <- result{"a2", l, err}
	}()
	// a2 waits in a's room.
	if err := until(10*time.Second, func() error {
		if roomOf(a, key).Defaults == 1 {
			return nil
		}
		return fmt.Errorf("a2 is not in a's room")
	}); err != nil {
		t.Fatal(err)
	}
	testHookReleaseEnding = func(lock store.Key) {
		if lock != k.Key {
			return
		}
		// The release handed the lock to b and woke a2: let a2 take the
		// wake and make its attempt while the lease still counts as a's.
		_ = until(10*time.Second, func() error {
			if roomOf(a, key).Woken {
				return fmt.Errorf("a2 has not taken its wake yet")
			}
			return nil
		})
		time.Sleep(300 * time.Millisecond) // a2's attempt: one round trip
	}
	t.Cleanup(func() { testHookReleaseEnding = nil })
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	testHookReleaseEnding = nil
	first := <-got
	if first.err != nil || first.who != "b" {
		t.Fatalf("first after the release: %s (%v), want b, lined up first", first.who, first.err)
	}
	// a2 lines up behind b, well before the TTL.
	if err := until(ttl/3, func() error { return queueLen(1) }); err != nil {
		t.Fatalf("a2 did not line up behind b within %v of the release (TTL %v): %v", ttl/3, ttl, err)
	}
	if err := first.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if second.err != nil {
		t.Fatal(second.err)
	}
	if second.lease.Fence() <= first.lease.Fence() {
		t.Fatalf("fence %d after %d", second.lease.Fence(), first.lease.Fence())
	}
	if err := second.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
