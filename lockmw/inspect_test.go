package lockmw_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// What the conformance suite cannot see of Inspect and Locks on Redis:
// holder info kept alive by renewals, a listing of a prefix with 100,000
// idle keys that leaves no slow command behind, prefixes holding SCAN's
// glob characters, cursors that were not made by Locks.

// A described holding that the watchdog renews keeps its description
// past its first TTL, on one Redis and under Redlock.
func TestHolderInfoOutlivesTTLWithRenewals(t *testing.T) {
	const ttl = 200 * time.Millisecond
	srv := redistest.Start(t)
	masters := redistest.StartN(t, 3)
	for name, newL := range map[string]func(opts ...lockmw.Option) *lockmw.Locker{
		"redis":   func(opts ...lockmw.Option) *lockmw.Locker { return newLocker(t, srv, opts...) },
		"redlock": func(opts ...lockmw.Option) *lockmw.Locker { return newRedlock(t, masters, opts...) },
	} {
		t.Run(name, func(t *testing.T) {
			l := newL(lockmw.WithTTL(ttl), lockmw.WithHolderInfo("renewed host-a"))
			lease, err := l.Acquire(context.Background(), "order:42")
			if err != nil {
				t.Fatal(err)
			}
			defer lease.Release(context.Background())
			// Several TTLs, each renewal sent at TTL/3.
			time.Sleep(4 * ttl)
			info, err := l.Inspect(context.Background(), "order:42")
			if err != nil {
				t.Fatal(err)
			}
			if !lease.Valid() || !info.Held || info.Holder.Value != "renewed host-a" || info.Holder.Is != lockmw.Exact {
				t.Fatalf("after %v of a %v lease (valid %v): %+v, want held by \"renewed host-a\"", 4*ttl, ttl, lease.Valid(), info)
			}
		})
	}
}

// A listing of a prefix with 100,000 idle keys (fence counters, as idle
// locks leave) finds the held locks among them in pages, and no command it
// sends runs for 10ms or more (Redis's SLOWLOG).
func TestLocksAmongManyIdleKeysStaysFast(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const prefix, idle = "big:", 100_000
	pipe := rdb.Pipeline()
	for i := range idle {
		pipe.Set(ctx, fmt.Sprintf("%s{idle:%d}:fence", prefix, i), 1, 0)
		if i%10_000 == 9_999 {
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	l := newLocker(t, srv, lockmw.WithPrefix(prefix))
	var held []string
	for i := range 7 {
		k := fmt.Sprintf("held:%d", i)
		lease, err := l.Acquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(ctx)
		held = append(held, k)
	}
	if err := rdb.ConfigSet(ctx, "slowlog-log-slower-than", "10000").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.SlowLogReset(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var listed []string
	cursor, pages := "", 0
	for {
		page, next, err := l.Locks(ctx, cursor, 5)
		if err != nil {
			t.Fatalf("Locks after %d pages: %v", pages, err)
		}
		pages++
		for _, info := range page {
			listed = append(listed, info.Key)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	slices.Sort(listed)
	if !slices.Equal(listed, held) {
		t.Fatalf("Locks listed %q in %d pages, want the held %q", listed, pages, held)
	}
	slow, err := rdb.SlowLogGet(ctx, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slow {
		t.Errorf("slow command during the listing: %v for %v", s.Args, s.Duration)
	}
	t.Logf("%d held locks among %d idle keys: %d pages", len(held), idle, pages)
}

// A prefix with SCAN's glob characters lists its own locks only, not those
// of a prefix its characters would match as a pattern.
func TestLocksPrefixWithGlobCharacters(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	odd := newLocker(t, srv, lockmw.WithPrefix(`o*[d]?\:`))
	plain := newLocker(t, srv, lockmw.WithPrefix("oxd!:")) // what o*[d]?\: matches as a pattern
	for _, l := range []*lockmw.Locker{odd, plain} {
		lease, err := l.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(ctx)
	}
	page, next, err := odd.Locks(ctx, "", 10)
	if err != nil || next != "" || len(page) != 1 || page[0].Key != "k" {
		t.Fatalf("Locks under a glob-like prefix: %+v, next %q, %v; want the one lock k", page, next, err)
	}
}

// Cursors Locks did not make are refused, saying what to pass.
func TestLocksRefusesForeignCursors(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv)
	for _, c := range []string{"x", "r1.", "r1.!!!", "r1." + strings.Repeat("A", 8), "0"} {
		_, _, err := l.Locks(context.Background(), c, 10)
		if !errors.Is(err, lockmw.ErrInvalidOption) || !strings.Contains(err.Error(), "cursor") {
			t.Errorf("Locks(%q): %v, want ErrInvalidOption naming the cursor", c, err)
		}
	}
}
