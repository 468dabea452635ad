package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/pgtest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/postgres"
)

// Inspecting (see "Inspecting" in doc.go): what the conformance suite
// cannot see of it on PostgreSQL.

const describedAs = "orders-7d9f host-a pid 42"

// waitExpired waits until Inspect reports key free.
func waitExpired(t *testing.T, l *lockmw.Locker, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := l.Inspect(bg(t), key)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q still held: %+v", key, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitQueued waits until lock key has n unexpired queue entries.
func waitQueued(t *testing.T, srv *pgtest.Server, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for queued(t, srv, key) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%q has %d queue entries, want %d", key, queued(t, srv, key), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// handOver has holder take key, then releases it to a Fair waiter of
// waiter, whose lease it returns, with the times before the release and
// after the waiter got the lock.
func handOver(t *testing.T, srv *pgtest.Server, holder, waiter *lockmw.Locker, key string) (lease *lockmw.Lease, before, after time.Time) {
	t.Helper()
	ctx := bg(t)
	held, err := holder.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		var err error
		lease, err = waiter.Acquire(ctx, key, lockmw.Fair())
		got <- err
	}()
	waitQueued(t, srv, key, 1)
	before = time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter for %q: %v", key, err)
	}
	return lease, before, time.Now()
}

// TestHolderInfoNeverShownForAnotherToken: a row keeps the description of
// the holding that wrote it after that holding ends (an expired row reused
// by a Locker without WithHolderInfo, which writes no description; a row
// handed over by a release), but Inspect shows it only while the token
// that wrote it holds the row.
func TestHolderInfoNeverShownForAnotherToken(t *testing.T) {
	srv := startServer(t)
	ctx := bg(t)
	described := newLocker(t, srv.URL(), lockmw.WithHolderInfo(describedAs))
	plain := newLocker(t, srv.URL())
	row := quote(postgres.RowName(lockmw.DefaultPrefix, "reused"))

	// An expired described holding, then a plain one on the same row.
	lease, err := described.Acquire(ctx, "reused", lockmw.WithLeaseTTL(200*time.Millisecond), lockmw.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	if info, err := plain.Inspect(ctx, "reused"); err != nil || info.Holder.Value != describedAs || !info.Since.Known() {
		t.Fatalf("held by the described Locker: %+v, %v; want its description and since", info, err)
	}
	waitExpired(t, plain, "reused")
	next, err := plain.TryAcquire(ctx, "reused")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if got := srv.Exec(t, "SELECT holder_info FROM lockmw_locks WHERE name = "+row); got != describedAs {
		t.Fatalf("the reused row's holder_info is %q; the test needs the earlier holding's left in it", got)
	}
	info, err := described.Inspect(ctx, "reused")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Fence.Value != next.Fence() || info.Holder.Known() || info.Since.Known() {
		t.Fatalf("held by a Locker without holder info, on a row a described holding wrote: %+v; want held with fence %d, Holder and Since unknown", info, next.Fence())
	}
	_ = lease.Release(ctx)

	// A described holder's row handed over to a plain Fair waiter.
	waiter, _, _ := handOver(t, srv, described, plain, "handed")
	defer waiter.Release(ctx)
	if info, err = described.Inspect(ctx, "handed"); err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Fence.Value != waiter.Fence() || info.Holder.Known() || info.Since.Known() {
		t.Fatalf("handed to a waiter without holder info: %+v; want held with fence %d, Holder and Since unknown", info, waiter.Fence())
	}
}

// TestHandOverCarriesWaitersInfo: a release hands the lock to a waiter of
// a Locker given WithHolderInfo with the description the waiter's queue
// entry keeps, dated from the hand-over; from one without, Holder and
// Since are unknown (TestHolderInfoNeverShownForAnotherToken).
func TestHandOverCarriesWaitersInfo(t *testing.T) {
	srv := startServer(t)
	ctx := bg(t)
	described := newLocker(t, srv.URL(), lockmw.WithHolderInfo(describedAs))
	plain := newLocker(t, srv.URL())
	waiter, before, after := handOver(t, srv, plain, described, "handed")
	defer waiter.Release(ctx)
	info, err := plain.Inspect(ctx, "handed")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Fence.Value != waiter.Fence() || info.Holder.Value != describedAs || info.Holder.Is != lockmw.Exact || info.Since.Is != lockmw.Exact {
		t.Fatalf("handed to a described waiter: %+v; want held with fence %d, Holder %q and Since exact", info, waiter.Fence(), describedAs)
	}
	if s := info.Since.Value; s.Before(before.Add(-2*time.Second)) || s.After(after.Add(2*time.Second)) {
		t.Fatalf("handed between %v and %v, but held since %v", before, after, s)
	}
}

// TestInspectOnOlderTable: a table made by a release before Inspect (no
// holder columns, no names index) keeps working for locking; Inspect,
// Locks and a Locker given WithHolderInfo say to migrate it; CreateTable
// migrates it under a held lock, which then reads as it is.
func TestInspectOnOlderTable(t *testing.T) {
	srv := startServer(t)
	ctx := bg(t)
	srv.Exec(t, `ALTER TABLE lockmw_locks DROP COLUMN holder_info, DROP COLUMN holder_token, DROP COLUMN holder_since,
	ALTER COLUMN name TYPE text COLLATE "default";
ALTER TABLE lockmw_locks_queue DROP COLUMN holder_info`)
	plain := newLocker(t, srv.URL())
	first, err := plain.Acquire(ctx, "old", lockmw.Fair())
	if err != nil {
		t.Fatalf("Acquire on a table before Inspect: %v", err)
	}
	// A release hands the lock to a waiter as releases before Inspect do.
	waiting := make(chan error, 1)
	var lease *lockmw.Lease
	go func() {
		var err error
		lease, err = newLocker(t, srv.URL()).Acquire(ctx, "old", lockmw.Fair())
		waiting <- err
	}()
	waitQueued(t, srv, "old", 1)
	if err := first.Release(ctx); err != nil {
		t.Fatalf("a release before a waiter, on a table before Inspect: %v", err)
	}
	if err := <-waiting; err != nil {
		t.Fatalf("a waiter on a table before Inspect: %v", err)
	}
	defer lease.Release(ctx)
	if _, err := plain.TryAcquire(ctx, "old"); !errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatalf("a second TryAcquire on a table before Inspect: %v, want ErrNotAcquired", err)
	}
	migrate := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, postgres.ErrNoTable) || !errors.Is(err, lockmw.ErrStoreSetup) || errors.Is(err, lockmw.ErrUnavailable) ||
			!strings.Contains(err.Error(), "holder_info") || !strings.Contains(err.Error(), "CreateTable") || strings.Contains(err.Error(), "\n") {
			t.Fatalf("%s on a table before Inspect: %v; want ErrNoTable (ErrStoreSetup, not ErrUnavailable) naming the holder columns and CreateTable, in one line", what, err)
		}
	}
	_, err = plain.Inspect(ctx, "old")
	migrate("Inspect", err)
	_, _, err = plain.Locks(ctx, "", 10)
	migrate("Locks", err)
	_, err = postgres.New(newPool(t, srv.URL()), lockmw.WithHolderInfo(describedAs))
	migrate("New with WithHolderInfo", err)

	if err := postgres.CreateTable(ctx, newPool(t, srv.URL())); err != nil {
		t.Fatalf("CreateTable on a table before Inspect: %v", err)
	}
	info, err := plain.Inspect(ctx, "old")
	if err != nil {
		t.Fatalf("Inspect after the migration: %v", err)
	}
	if !info.Held || info.Fence.Value != lease.Fence() || info.Fence.Is != lockmw.Exact || !info.TTL.Known() || info.Holder.Known() || info.Since.Known() {
		t.Fatalf("a lock held across the migration: %+v; want held, fence %d, TTL, no holder or since", info, lease.Fence())
	}
	page, next, err := plain.Locks(ctx, "", 10)
	if err != nil || len(page) != 1 || page[0].Key != "old" || next != "" {
		t.Fatalf("Locks after the migration: %+v, %q, %v; want the held lock", page, next, err)
	}
	described := newLocker(t, srv.URL(), lockmw.WithHolderInfo(describedAs))
	l2, err := described.TryAcquire(ctx, "new")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	if info, err := plain.Inspect(ctx, "new"); err != nil || info.Holder.Value != describedAs {
		t.Fatalf("a described holding after the migration: %+v, %v", info, err)
	}
}

// TestDescribedAndPlainLockersExclude: a Locker given WithHolderInfo
// (other statements) and one without (the statements of releases before
// Inspect) exclude each other, and each one's release hands the lock to
// the other's waiter.
func TestDescribedAndPlainLockersExclude(t *testing.T) {
	srv := startServer(t)
	ctx := bg(t)
	described := newLocker(t, srv.URL(), lockmw.WithHolderInfo(describedAs))
	plain := newLocker(t, srv.URL())
	for _, c := range []struct {
		name          string
		holder, other *lockmw.Locker
	}{{"described holds", described, plain}, {"plain holds", plain, described}} {
		lease, err := c.holder.TryAcquire(ctx, "both")
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if _, err := c.other.TryAcquire(ctx, "both"); !errors.Is(err, lockmw.ErrNotAcquired) {
			t.Fatalf("%s: the other's TryAcquire: %v, want ErrNotAcquired", c.name, err)
		}
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		if _, err := c.other.Acquire(wctx, "both"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: the other's Acquire: %v, want it to wait", c.name, err)
		}
		cancel()
		got := make(chan error, 1)
		go func() {
			l, err := c.other.Acquire(ctx, "both", lockmw.Fair())
			if err == nil {
				if l.Fence() <= lease.Fence() {
					err = errors.New("the next holder's fence is not above the last")
				}
				_ = l.Release(ctx)
			}
			got <- err
		}()
		waitQueued(t, srv, "both", 1)
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("%s: the other's waiter after the release: %v", c.name, err)
		}
	}
}
