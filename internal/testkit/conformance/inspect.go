package conformance

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw"
)

// This file checks Locker.Inspect and Locker.Locks against the exactness
// each store declares (Inspects).

// Inspects declares how exactly a store's Inspect reports a held lock:
// each field's Exactness, which the suite requires the store to report, and
// checks the value against.
type Inspects struct {
	// TTL, Fence and Holder are the exactness of those fields of a held
	// lock (Holder's when its holder gave WithHolderInfo).
	TTL, Fence, Holder lockmw.Exactness
	// Since is the exactness of Since of a lock whose holder gave no
	// WithHolderInfo, SinceWithInfo of one whose holder gave one.
	Since, SinceWithInfo lockmw.Exactness
	// Waiters and FairWaiters are the exactness of those counts while
	// Fair waiters of other Lockers wait (on a store with Fair).
	Waiters, FairWaiters lockmw.Exactness
}

// holderInfo is the description the suite's described Locker gives.
const holderInfo = "conformance host-a pid 42"

// clockSlack bounds the difference between the store's clock and the
// test's, and the time a read takes.
const clockSlack = 2 * time.Second

func inspectOK(t *testing.T, l *lockmw.Locker, key string) lockmw.LockInfo {
	t.Helper()
	info, err := l.Inspect(context.Background(), key)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", key, err)
	}
	if info.Key != key {
		t.Fatalf("Inspect(%q) reports key %q", key, info.Key)
	}
	return info
}

// checkIs fails t unless field r is reported with exactness want.
func checkIs[T any](t *testing.T, what, field string, r lockmw.Reading[T], want lockmw.Exactness) {
	t.Helper()
	if r.Is != want {
		t.Fatalf("%s: %s is %v (%v), the store declares %v", what, field, r.Is, r.Value, want)
	}
}

// checkFree fails t unless info reads as a free lock whose last fence (if
// any) was fence.
func checkFree(t *testing.T, what string, info lockmw.LockInfo, fence uint64) {
	t.Helper()
	if info.Held || info.TTL.Known() || info.Holder.Known() || info.Since.Known() {
		t.Fatalf("%s: %+v, want not held, with TTL, Holder and Since unknown", what, info)
	}
	if info.Fence.Known() && info.Fence.Value < fence {
		t.Fatalf("%s: fence %d (%v) below the last holder's %d", what, info.Fence.Value, info.Fence.Is, fence)
	}
	if info.Waiters.Known() && info.Waiters.Value != 0 {
		t.Fatalf("%s: %d waiters (%v), none waits", what, info.Waiters.Value, info.Waiters.Is)
	}
}

// checkHeld fails t unless info reads as lease's holding, which began
// between before and after, with the declared exactness.
func (r *runner) checkHeld(t *testing.T, what string, info lockmw.LockInfo, lease *lockmw.Lease, ttl time.Duration, described bool, before, after time.Time) {
	t.Helper()
	spec := r.Inspects
	if !info.Held {
		t.Fatalf("%s: %+v, want held", what, info)
	}
	checkIs(t, what, "TTL", info.TTL, spec.TTL)
	switch spec.TTL {
	case lockmw.Exact:
		if info.TTL.Value <= 0 || info.TTL.Value > ttl {
			t.Fatalf("%s: TTL left %v, want in (0, %v]", what, info.TTL.Value, ttl)
		}
	case lockmw.AtMost:
		if info.TTL.Value <= 0 || info.TTL.Value > ttl+clockSlack {
			t.Fatalf("%s: TTL left at most %v, want in (0, %v]", what, info.TTL.Value, ttl+clockSlack)
		}
	}
	checkIs(t, what, "Fence", info.Fence, spec.Fence)
	switch spec.Fence {
	case lockmw.Exact:
		if info.Fence.Value != lease.Fence() {
			t.Fatalf("%s: fence %d, the holder's is %d", what, info.Fence.Value, lease.Fence())
		}
	case lockmw.AtMost:
		if info.Fence.Value < lease.Fence() {
			t.Fatalf("%s: fence at most %d, below the holder's %d", what, info.Fence.Value, lease.Fence())
		}
	}
	since := spec.Since
	if described {
		since = spec.SinceWithInfo
		checkIs(t, what, "Holder", info.Holder, spec.Holder)
		if spec.Holder == lockmw.Exact && info.Holder.Value != holderInfo {
			t.Fatalf("%s: holder %q, want %q", what, info.Holder.Value, holderInfo)
		}
	} else if info.Holder.Known() {
		t.Fatalf("%s: holder %q (%v), but the holding Locker gave no WithHolderInfo", what, info.Holder.Value, info.Holder.Is)
	}
	checkIs(t, what, "Since", info.Since, since)
	if since != lockmw.Unknown {
		if s := info.Since.Value; s.Before(before.Add(-clockSlack)) || s.After(after.Add(clockSlack)) {
			t.Fatalf("%s: held since %v, but it was acquired between %v and %v", what, s, before, after)
		}
	}
}

func (r *runner) inspect(t *testing.T) {
	if r.Inspects == nil {
		t.Fatalf("store %s declares no Inspects: every store reports its locks (set Store.Inspects)", r.Name)
	}
	k := key(t, "")
	ttl := r.ttl(10 * time.Second)
	plain := r.locker(t, lockmw.WithTTL(ttl))
	described := r.locker(t, lockmw.WithTTL(ttl), lockmw.WithHolderInfo(holderInfo))

	checkFree(t, "a key never used", inspectOK(t, plain, k), 0)

	lease := r.holdInspected(t, "held, no holder info", plain, described, k, ttl, false)
	if r.Fair {
		r.inspectWaiters(t, described, k, ttl)
	}
	releaseInspected(t, "released", lease, plain)

	lease = r.holdInspected(t, "held with holder info", described, plain, k, ttl, true)
	releaseInspected(t, "released by a described holder", lease, plain)

	// The next holder gave no description: the last one's is not shown
	// for it, wherever the store keeps descriptions.
	lease = r.holdInspected(t, "held without holder info after a described holder", plain, described, k, ttl, false)

	// A described waiter of another Locker that the release hands the
	// lock to (or that takes it after the release) is shown as the holder.
	opts := []lockmw.AcquireOption{lockmw.WithWait(30 * time.Second)}
	if r.Fair {
		opts = append(opts, lockmw.Fair())
	}
	handed := make(chan *lockmw.Lease, 1)
	go func() {
		w, err := described.Acquire(context.Background(), k, opts...)
		if err != nil {
			t.Errorf("a described waiter: %v", err)
		}
		handed <- w
	}()
	if r.Fair {
		deadline := time.Now().Add(10 * time.Second)
		for r.Queued(t, k) != 1 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	releaseOK(t, lease)
	if w := <-handed; w != nil {
		info := inspectOK(t, plain, k)
		if !info.Held || info.Holder.Is != r.Inspects.Holder || (r.Inspects.Holder == lockmw.Exact && info.Holder.Value != holderInfo) {
			t.Fatalf("handed to a described waiter: %+v, want held by %q (%v)", info, holderInfo, r.Inspects.Holder)
		}
		if r.Inspects.Fence == lockmw.Exact && info.Fence.Value != w.Fence() {
			t.Fatalf("handed to a described waiter: fence %d, the holder's is %d", info.Fence.Value, w.Fence())
		}
		releaseOK(t, w)
	}

	// A holding that expires: Inspect stops reporting it, and its holder
	// info, within its TTL (plus the store's expiry slack).
	// Not the shortest TTL a store accepts: an acquisition answered after
	// a lease that short had ended is refused, and a loaded machine may
	// take longer.
	short := r.ttl(300 * time.Millisecond)
	before := time.Now()
	lease, err := described.Acquire(context.Background(), k, lockmw.WithLeaseTTL(short), lockmw.WithoutWatchdog())
	if err != nil {
		t.Fatalf("Acquire(%q) without watchdog: %v", k, err)
	}
	fence := lease.Fence()
	r.checkHeld(t, "held without watchdog", inspectOK(t, plain, k), lease, short, true, before, time.Now())
	deadline := time.Now().Add(short + 5*time.Second)
	for {
		info := inspectOK(t, plain, k)
		if !info.Held {
			checkFree(t, "expired", info, fence)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("expired: still held %v after the %v lease's expiry: %+v", time.Since(before), short, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = lease.Release(context.Background())

	if _, err := plain.Inspect(context.Background(), ""); !errors.Is(err, lockmw.ErrInvalidKey) {
		t.Fatalf(`Inspect(""): %v, want ErrInvalidKey`, err)
	}
	closed := r.locker(t)
	_ = closed.Close()
	if _, err := closed.Inspect(context.Background(), k); !errors.Is(err, lockmw.ErrClosed) {
		t.Fatalf("Inspect on a closed Locker: %v, want ErrClosed", err)
	}
	r.waitNoLeftovers(t, k)
}

// holdInspected takes k with holder and checks what reader's Inspect
// reports of the holding (described: holder gave WithHolderInfo).
func (r *runner) holdInspected(t *testing.T, what string, holder, reader *lockmw.Locker, k string, ttl time.Duration, described bool) *lockmw.Lease {
	t.Helper()
	before := time.Now()
	lease := acquireOK(t, holder, k)
	r.checkHeld(t, what, inspectOK(t, reader, k), lease, ttl, described, before, time.Now())
	return lease
}

// releaseInspected releases lease and checks that reader's Inspect reports
// the lock free.
func releaseInspected(t *testing.T, what string, lease *lockmw.Lease, reader *lockmw.Locker) {
	t.Helper()
	fence := lease.Fence()
	releaseOK(t, lease)
	checkFree(t, what, inspectOK(t, reader, lease.Key()), fence)
}

// inspectWaiters queues two Fair waiters of other Lockers behind the lock
// k that another Locker holds, checks the counts that l's Inspect reports,
// then takes them out.
func (r *runner) inspectWaiters(t *testing.T, l *lockmw.Locker, k string, ttl time.Duration) {
	t.Helper()
	const n = 2
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, n)
	defer func() {
		cancel()
		for range n {
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("a Fair waiter, cancelled: %v, want context.Canceled", err)
			}
		}
	}()
	for range n {
		w := r.locker(t, lockmw.WithTTL(ttl))
		go func() {
			_, err := w.Acquire(ctx, k, lockmw.Fair())
			done <- err
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.Queued(t, k) != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue holds %d waiters, want %d", r.Queued(t, k), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	info := inspectOK(t, l, k)
	if !info.Held {
		t.Fatalf("with %d waiters: %+v, want held", n, info)
	}
	for _, c := range []struct {
		field string
		got   lockmw.Reading[int]
		is    lockmw.Exactness
	}{{"Waiters", info.Waiters, r.Inspects.Waiters}, {"FairWaiters", info.FairWaiters, r.Inspects.FairWaiters}} {
		checkIs(t, fmt.Sprintf("with %d Fair waiters", n), c.field, c.got, c.is)
		v := c.got.Value
		if (c.is == lockmw.Exact && v != n) || (c.is == lockmw.AtLeast && (v < 1 || v > n)) || (c.is == lockmw.AtMost && v < n) {
			t.Fatalf("with %d Fair waiters of other Lockers: %s %d (%v)", n, c.field, v, c.is)
		}
	}
}

func (r *runner) locks(t *testing.T) {
	if r.Inspects == nil {
		t.Fatalf("store %s declares no Inspects: every store reports its locks (set Store.Inspects)", r.Name)
	}
	// A prefix of this subtest's own, so that the listing sees only its
	// locks.
	prefix := fmt.Sprintf("lockmw-list-%d:", time.Now().UnixNano())
	ttl := r.ttl(10 * time.Second)
	l := r.locker(t, lockmw.WithPrefix(prefix), lockmw.WithTTL(ttl), lockmw.WithHolderInfo(holderInfo))
	other := r.locker(t, lockmw.WithPrefix(prefix), lockmw.WithTTL(ttl))
	ctx := context.Background()

	// Idle locks: taken and released before the listing.
	var idle []string
	for i := range 3 {
		k := fmt.Sprintf("idle:%d", i)
		releaseOK(t, acquireOK(t, l, k))
		idle = append(idle, k)
	}
	held := map[string]*lockmw.Lease{}
	for i := range 5 {
		k := fmt.Sprintf("held:%d", i)
		held[k] = acquireOK(t, l, k)
	}
	const limit = 2
	listed := map[string]lockmw.LockInfo{}
	cursor, pages := "", 0
	for {
		page, next, err := other.Locks(ctx, cursor, limit)
		if err != nil {
			t.Fatalf("Locks(%q, %d) after %d pages: %v", cursor, limit, pages, err)
		}
		pages++
		if len(page) > limit {
			t.Fatalf("Locks(%q, %d): %d locks", cursor, limit, len(page))
		}
		for _, info := range page {
			listed[info.Key] = info
		}
		if next == "" {
			break
		}
		if pages > 1000 {
			t.Fatalf("Locks: still a next cursor after %d pages of %d", pages, limit)
		}
		cursor = next
	}
	if pages < 3 {
		t.Fatalf("Locks listed %d locks in %d pages of %d: the listing was not tested past one page", len(listed), pages, limit)
	}
	for k, lease := range held {
		info, ok := listed[k]
		if !ok {
			t.Fatalf("Locks did not list the held lock %q (listed %v)", k, slices.Sorted(maps.Keys(listed)))
		}
		if !info.Held || (info.Holder.Known() && info.Holder.Value != holderInfo) {
			t.Fatalf("Locks listed %q as %+v, held by a Locker with holder info %q", k, info, holderInfo)
		}
		if r.Inspects.Fence == lockmw.Exact && info.Fence.Value != lease.Fence() {
			t.Fatalf("Locks listed %q with fence %d, the holder's is %d", k, info.Fence.Value, lease.Fence())
		}
	}
	for k := range listed {
		if _, ok := held[k]; !ok {
			t.Fatalf("Locks listed %q, which is not held under prefix %q (idle: %q)", k, prefix, idle)
		}
	}
	for _, c := range []struct {
		cursor string
		limit  int
	}{{"", 0}, {"", -1}, {"", lockmw.MaxListLimit + 1}, {"not a cursor", limit}} {
		if _, _, err := other.Locks(ctx, c.cursor, c.limit); !errors.Is(err, lockmw.ErrInvalidOption) {
			t.Fatalf("Locks(%q, %d): %v, want ErrInvalidOption", c.cursor, c.limit, err)
		}
	}
	for _, lease := range held {
		releaseOK(t, lease)
	}
	page, next, err := other.Locks(ctx, "", lockmw.MaxListLimit)
	if err != nil || len(page) != 0 || next != "" {
		t.Fatalf("Locks after every release: %d locks, next %q, %v; want none", len(page), next, err)
	}
}
