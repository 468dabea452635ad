package mysql_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/mysql"
)

// This file tests Inspect beside Lockers with and without a holder
// description, and on tables made before descriptions.

const describedAs = "orders-7d9f host-a pid 42"

// A holding by a Locker without a description (of this version or an
// earlier one: their statements are the same) never shows the
// description an earlier holding left in the row: not after taking over
// an expired row by the full statement, nor by the one-UPDATE path.
func TestHolderInfoNeverShownForAnotherToken(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	admin := srv.DB(t, "")
	described := newLocker(t, srv, lockmw.WithHolderInfo(describedAs))
	plain := newLocker(t, srv)
	ctx := bg(t)
	const key = "another-token"
	for round := range 2 {
		lease, err := described.TryAcquire(ctx, key, lockmw.WithLeaseTTL(mysql.MinTTL), lockmw.WithoutWatchdog())
		if err != nil {
			t.Fatal(err)
		}
		info, err := plain.Inspect(ctx, key)
		if err != nil || info.Holder.Value != describedAs || !info.Since.Known() {
			t.Fatalf("round %d: held by the described Locker: %+v, %v", round, info, err)
		}
		if _, err := plain.TryAcquire(ctx, key); !errors.Is(err, lockmw.ErrNotAcquired) {
			t.Fatalf("round %d: a Locker without a description beside a described holding: %v, want ErrNotAcquired", round, err)
		}
		<-lease.Context().Done()
		for {
			// The row expires by the database's clock.
			if info, err = plain.Inspect(ctx, key); err != nil || !info.Held {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		// Round 0: plain never saw the row (the full statement); round
		// 1: it did (the one UPDATE of the row).
		taken, err := plain.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("round %d: taking the expired lock: %v", round, err)
		}
		var raw []byte
		if err := admin.QueryRowContext(ctx, "SELECT holder FROM lockmw_locks WHERE prefix = ? AND name = ?", lockmw.DefaultPrefix, key).Scan(&raw); err != nil || !strings.Contains(string(raw), describedAs) {
			t.Fatalf("round %d: the row's holder column is %q, %v; want the earlier holding's description left in it", round, raw, err)
		}
		info, err = described.Inspect(ctx, key)
		if err != nil || !info.Held || info.Fence.Value != taken.Fence() || info.Holder.Known() || info.Since.Known() {
			t.Fatalf("round %d: taken over by a Locker without a description: %+v, %v; want held with fence %d, holder and since unknown", round, info, err, taken.Fence())
		}
		if _, err := described.TryAcquire(ctx, key); !errors.Is(err, lockmw.ErrNotAcquired) {
			t.Fatalf("round %d: a described Locker beside a holding without a description: %v, want ErrNotAcquired", round, err)
		}
		if err := taken.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Lockers with and without a description (the latter's statements are
// those of the version before descriptions) wait for each other as Fair
// waiters, each way: the waiter gets the lock once the other's holding
// ends, and Inspect then shows the waiter's description, or none.
func TestDescribedAndPlainWaitForEachOther(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	admin := srv.DB(t, "")
	described := newLocker(t, srv, lockmw.WithHolderInfo(describedAs))
	plain := newLocker(t, srv)
	ctx := bg(t)
	const key = "mixed-fair"
	for _, c := range []struct {
		holder, waiter *lockmw.Locker
		info           string
	}{{plain, described, describedAs}, {described, plain, ""}} {
		held, err := c.holder.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *lockmw.Lease, 1)
		go func() {
			l, err := c.waiter.Acquire(ctx, key, lockmw.Fair())
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		for deadline := time.Now().Add(10 * time.Second); len(queueTokens(t, admin, key, true)) == 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the Fair waiter did not queue")
			}
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		l := <-got
		if l == nil {
			t.FailNow()
		}
		info, err := plain.Inspect(ctx, key)
		if err != nil || !info.Held || info.Fence.Value != l.Fence() || info.Holder.Value != c.info || info.Holder.Known() != (c.info != "") {
			t.Fatalf("the waiter's holding: %+v, %v; want held with fence %d and holder %q", info, err, l.Fence(), c.info)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A lock table made before holder descriptions (no columns holder and
// held_since) keeps working for Lockers without a description; Inspect
// and Locks on it, and New with WithHolderInfo, fail with ErrOldSchema
// (an ErrStoreSetup), naming the migration. After CreateTable migrates
// it, a holding taken before reads as held with its fence and TTL, no
// holder and no start, and a described Locker's holdings read with both.
func TestInspectOnTableBeforeDescriptions(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	admin := srv.DB(t, "")
	ctx := bg(t)
	if _, err := admin.ExecContext(ctx, "ALTER TABLE lockmw_locks DROP COLUMN holder, DROP COLUMN held_since"); err != nil {
		t.Fatal(err)
	}
	plain := newLocker(t, srv)
	before, err := plain.Acquire(ctx, "before")
	if err != nil {
		t.Fatalf("Acquire on the table without the columns: %v", err)
	}
	checkOld := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, mysql.ErrOldSchema) || !errors.Is(err, lockmw.ErrStoreSetup) || errors.Is(err, lockmw.ErrUnavailable) {
			t.Fatalf("%s on the table without holder columns: %v, want ErrOldSchema (an ErrStoreSetup, not ErrUnavailable)", what, err)
		}
		for _, want := range []string{"holder", "mysql.CreateTable", "ALTER TABLE"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s's error %q does not say %q", what, err, want)
			}
		}
	}
	_, err = plain.Inspect(ctx, "before")
	checkOld("Inspect", err)
	_, _, err = plain.Locks(ctx, "", 10)
	checkOld("Locks", err)
	_, err = mysql.New(srv.DB(t, ""), lockmw.WithTTL(testTTL), lockmw.WithHolderInfo(describedAs))
	checkOld("New with WithHolderInfo", err)

	if err := mysql.CreateTable(ctx, admin, ""); err != nil {
		t.Fatal(err)
	}
	info, err := plain.Inspect(ctx, "before")
	if err != nil || !info.Held || info.Fence.Value != before.Fence() || !info.TTL.Known() || info.Holder.Known() || info.Since.Known() {
		t.Fatalf("a holding from before the migration: %+v, %v; want held, fence %d, TTL known, holder and since unknown", info, err, before.Fence())
	}
	described := newLocker(t, srv, lockmw.WithHolderInfo(describedAs))
	start := time.Now()
	after, err := described.Acquire(ctx, "after")
	if err != nil {
		t.Fatal(err)
	}
	info, err = plain.Inspect(ctx, "after")
	if err != nil || info.Holder.Value != describedAs || info.Holder.Is != lockmw.Exact || info.Since.Is != lockmw.Exact ||
		info.Since.Value.Before(start.Add(-2*time.Second)) || info.Since.Value.After(time.Now().Add(2*time.Second)) {
		t.Fatalf("a described holding after the migration: %+v, %v", info, err)
	}
	for _, l := range []*lockmw.Lease{before, after} {
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
