package lockmw

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

// Nesting and releasing many times leaves nothing behind: no goroutine, and
// no nested lease kept by the outer one, whether the nested leases are
// released before their outer lease or end with it.
func TestNestReleaseCyclesLeaveNothing(t *testing.T) {
	_, l := startNestLocker(t)
	ctx := context.Background()
	// Settle the Locker's own goroutines (watchdog, connections) first.
	warm, err := l.Acquire(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	_ = warm.Release(ctx)
	base := runtime.NumGoroutine()

	outer, err := l.Acquire(ctx, "cycles")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		parent := outer.Context()
		if i%2 == 0 {
			parent = context.WithoutCancel(parent)
		}
		n, err := l.TryAcquire(parent, "cycles")
		if err != nil {
			t.Fatal(err)
		}
		if n.outer != outer {
			t.Fatal("not nested in the outer lease")
		}
		if err := n.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	outer.endMu.Lock()
	kept := len(outer.nested)
	outer.endMu.Unlock()
	if kept != 0 {
		t.Errorf("outer lease still tracks %d released nested leases", kept)
	}

	// Nested leases that end with their outer lease leave nothing either.
	var live []*Lease
	for range 100 {
		n, err := l.TryAcquire(context.WithoutCancel(outer.Context()), "cycles")
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, n)
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range live {
		if n.Context().Err() == nil {
			t.Fatal("nested lease live after its outer lease was released")
		}
	}
	outer.endMu.Lock()
	kept = len(outer.nested)
	outer.endMu.Unlock()
	if kept != 0 {
		t.Errorf("released outer lease still tracks %d nested leases", kept)
	}

	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after the cycles, %d before", runtime.NumGoroutine(), base)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A lease's nested leases end before its own context does, whichever way
// it ends: whoever sees the outermost context ended (a context.AfterFunc
// that runs late on a loaded host, say) finds every lease nested in it
// ended too, also one nested through context.WithoutCancel.
func TestNestedLeasesEndBeforeTheirOuter(t *testing.T) {
	_, l := startNestLocker(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, outer *Lease)
	}{
		{"released", func(t *testing.T, outer *Lease) {
			if err := outer.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"lost", func(t *testing.T, outer *Lease) {
			l.keeper.ahead.Store(int64(time.Until(outer.Deadline()) + time.Millisecond))
			defer l.keeper.ahead.Store(0)
			if outer.Valid() {
				t.Fatal("Valid past the deadline")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outer, err := l.Acquire(ctx, "nested-end-"+tc.name)
			if err != nil {
				t.Fatal(err)
			}
			n, err := l.Acquire(context.WithoutCancel(outer.Context()), "nested-end-"+tc.name)
			if err != nil || n.outer != outer {
				t.Fatalf("nested Acquire: %v (nested in %p, want %p)", err, n.outer, outer)
			}
			stopOuter := outer.stop
			nestedLive := false
			outer.stop = func(cause error) {
				nestedLive = nestedLive || n.Context().Err() == nil || n.Valid()
				stopOuter(cause)
			}
			tc.end(t, outer)
			if outer.Context().Err() == nil {
				t.Fatal("outer lease still live")
			}
			if nestedLive {
				t.Fatal("the outer lease's context ended while a lease nested in it was still live")
			}
		})
	}
}

// A Release that finds its lease taken by a Close under way (the watchdog
// already closed, the lease not yet ended by Close) ends the lease and its
// nested leases before it returns ErrClosed: no lease nests in it after
// that, and its context is done. (The randomized checker found a lease
// nested in one whose Release had returned ErrClosed, on a Locker whose
// Close was between closing the watchdog and ending its leases.)
func TestReleaseDuringCloseEndsTheLease(t *testing.T) {
	srv, l := startNestLocker(t)
	ctx := context.Background()
	outer, err := l.Acquire(ctx, "closing")
	if err != nil {
		t.Fatal(err)
	}
	inner, err := l.TryAcquire(outer.Context(), "closing")
	if err != nil || inner.outer != outer {
		t.Fatalf("nested acquisition: %v (outer %p, want %p)", err, inner.outer, outer)
	}
	// Close's first step, without the steps that end the leases.
	held := l.keeper.close()
	if len(held) != 1 || held[0] != outer {
		t.Fatalf("the watchdog kept %d leases, want the outer one", len(held))
	}
	if err := outer.Release(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Release during Close = %v, want ErrClosed", err)
	}
	if cause := context.Cause(outer.Context()); !errors.Is(cause, ErrClosed) {
		t.Errorf("outer lease's context after Release returned: cause %v, want ErrClosed", cause)
	}
	if cause := context.Cause(inner.Context()); !errors.Is(cause, ErrClosed) {
		t.Errorf("nested lease's context after the outer's Release returned: cause %v, want ErrClosed", cause)
	}
	if n := l.nest(ctx, outer); n != nil {
		t.Errorf("a lease nested in one whose Release returned ErrClosed")
	}
	// Close still gives the lock back.
	if err := l.releaseAll(held); err != nil {
		t.Fatal(err)
	}
	if n, err := srv.Client(t).Exists(ctx, DefaultPrefix+"{closing}").Result(); err != nil || n != 0 {
		t.Errorf("lock key after Close's release: EXISTS = %d, %v; want 0", n, err)
	}
}

// startNestLocker starts a Redis server and a Locker on it, closed when the
// test ends.
func startNestLocker(t *testing.T) (*redistest.Server, *Locker) {
	t.Helper()
	srv := redistest.Start(t)
	l, err := New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return srv, l
}
