package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// Inspecting (inspect.go): the statements an acquisition sends with and
// without holder info, and the listing's index and bounds.

// statementLog records every statement sent on a pool, with its number of
// arguments.
type statementLog struct {
	mu   sync.Mutex
	sent []sentStatement
}

type sentStatement struct {
	sql  string
	args int
}

func (l *statementLog) add(sql string, args int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent = append(l.sent, sentStatement{sql, args})
}

func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.add(d.SQL, len(d.Args))
	return ctx
}
func (l *statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (l *statementLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (l *statementLog) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	l.add(d.SQL, len(d.Args))
}
func (l *statementLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// take returns the statements sent since the last call.
func (l *statementLog) take() []sentStatement {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.sent
	l.sent = nil
	return out
}

// lockSteps has l take key while it is free, release it, then queue for
// it behind other's holding and take it from other's release: a plain
// and a queued acquisition, and a release.
func lockSteps(t *testing.T, ctx context.Context, pool *pgxpool.Pool, l, other *lockmw.Locker, key string) {
	t.Helper()
	lease, err := l.TryAcquire(ctx, key)
	if err == nil {
		err = lease.Release(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	held, err := other.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		lease, err := l.Acquire(ctx, key, lockmw.Fair())
		if err == nil {
			err = lease.Release(ctx)
		}
		got <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for queueLen(t, ctx, pool, key) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the acquisition does not queue")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// queueLen counts lock key's queue entries (default prefix).
func queueLen(t *testing.T, ctx context.Context, pool *pgxpool.Pool, key string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM lockmw_locks_queue WHERE name = $1", RowName(lockmw.DefaultPrefix, key)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAcquisitionsWithoutHolderInfoUnchanged: a Locker without
// WithHolderInfo sends the acquisition statements of releases before
// Inspect, or their takeFresh (the same text, the same arguments, no
// holder column); one given it sends the
// upserts and the enqueue that write its description, as one more
// argument.
func TestAcquisitionsWithoutHolderInfoUnchanged(t *testing.T) {
	log := &statementLog{}
	ctx, pool, s := startStoreWith(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = log })
	cfg := pool.Config()
	cfg.ConnConfig.Tracer = nil
	otherPool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer otherPool.Close()
	other, err := New(otherPool, lockmw.WithTTL(handTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	type kind struct {
		name string
		args int
	}
	kinds := map[string]kind{
		s.sql.insertLease: {"insertLease", 3}, s.sql.insertLeaseQueued: {"insertLeaseQueued", 3},
		s.sql.enqueueFence: {"enqueueFence", 5}, s.sql.fence: {"fence", 2},
		s.sql.insertLeaseInfo: {"insertLeaseInfo", 4}, s.sql.insertLeaseQueuedInfo: {"insertLeaseQueuedInfo", 4},
		s.sql.enqueueFenceInfo: {"enqueueFenceInfo", 6},
		s.sql.takeFresh:        {"takeFresh", 3}, s.sql.takeFreshInfo: {"takeFreshInfo", 4},
	}
	for _, described := range []bool{false, true} {
		var opts []lockmw.Option
		if described {
			opts = append(opts, lockmw.WithHolderInfo("host-a pid 42"))
		}
		l, err := New(pool, append(opts, lockmw.WithTTL(handTTL))...)
		if err != nil {
			t.Fatal(err)
		}
		log.take()
		lockSteps(t, ctx, pool, l, other, fmt.Sprintf("steps-%v", described))
		_ = l.Close()
		seen := map[string]bool{}
		for _, st := range log.take() {
			k, ok := kinds[st.sql]
			if !ok {
				if strings.HasPrefix(st.sql, "INSERT INTO") {
					t.Errorf("described %v: an acquisition statement of no known kind: %s", described, st.sql)
				}
				continue
			}
			if st.args != k.args {
				t.Errorf("described %v: %s with %d arguments, want %d", described, k.name, st.args, k.args)
			}
			seen[k.name] = true
		}
		// insertLease and fence follow a takeFresh whose own draw was
		// refused (a value drawn meanwhile by the other Locker): they may
		// be there.
		want := []string{"takeFresh", "insertLeaseQueued", "enqueueFence"}
		if described {
			want = []string{"takeFreshInfo", "insertLeaseQueuedInfo", "enqueueFenceInfo"}
		}
		delete(seen, "fence")
		if described {
			delete(seen, "insertLeaseInfo")
		} else {
			delete(seen, "insertLease")
		}
		if got := slices.Sorted(maps.Keys(seen)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
			t.Fatalf("described %v: acquisition statements sent: %v, want %v", described, got, want)
		}
	}
}

// fillIdle inserts n expired lease rows under prefix, named in byte order
// before "~": rows of holdings that ended without a release.
func fillIdle(t *testing.T, ctx context.Context, pool *pgxpool.Pool, prefix string, n int) {
	t.Helper()
	p := RowName(prefix, "idle-")
	if _, err := pool.Exec(ctx, `INSERT INTO lockmw_locks (name, token, fence, expires_at)
	SELECT $1 || lpad(i::text, 7, '0'), 'crashed', i, clock_timestamp() - interval '1 hour' FROM generate_series(1, $2::int) i`, p, n); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE lockmw_locks"); err != nil {
		t.Fatal(err)
	}
}

// listingPlan returns the plan of the listing's statement for a page of
// 100 under the default prefix, planned for its arguments ("auto") or for
// any (a prepared statement's generic plan: "force_generic_plan").
func listingPlan(t *testing.T, ctx context.Context, pool *pgxpool.Pool, mode string) string {
	t.Helper()
	n, _ := Schema{}.names()
	r := prefixRanges(lockmw.DefaultPrefix)
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	defer func() {
		_, _ = c.Exec(ctx, "RESET plan_cache_mode")
		if mode == "force_generic_plan" {
			_, _ = c.Exec(ctx, "DEALLOCATE listp")
		}
	}()
	args := []any{"", r.plainLo, r.plainHi, r.hexLo, r.hexHi, listBudget(100), 100}
	q := "EXPLAIN " + listSQL(n)
	if _, err := c.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
		t.Fatal(err)
	}
	if mode == "force_generic_plan" {
		lit := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
		q = fmt.Sprintf("EXPLAIN EXECUTE listp(%s, %s, %s, %s, %s, %d, %d)", lit(""), lit(r.plainLo), lit(r.plainHi), lit(r.hexLo), lit(r.hexHi), listBudget(100), 100)
		args = nil
		if _, err := c.Exec(ctx, "PREPARE listp(text, text, text, text, text, bigint, bigint) AS "+listSQL(n)); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := c.Query(ctx, q, args...)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

// checkListingReads fails t unless the listing's statement reads the
// lease table through index, in order and limited, whatever its plan.
func checkListingReads(t *testing.T, ctx context.Context, pool *pgxpool.Pool, what, index string) {
	t.Helper()
	for _, mode := range []string{"auto", "force_generic_plan"} {
		plan := listingPlan(t, ctx, pool, mode)
		t.Logf("%s, %s:\n%s", what, mode, plan)
		if strings.Count(plan, "Index Scan using "+index+" on lockmw_locks") != 2 || strings.Contains(plan, "Seq Scan on lockmw_locks ") ||
			strings.Contains(plan, "Bitmap Heap Scan on lockmw_locks ") {
			t.Fatalf("%s, plan_cache_mode %s: the listing does not read the index %s in order:\n%s", what, mode, index, plan)
		}
	}
}

// TestListingUsesNamesIndex: with 20,000 rows under the prefix, the
// listing's statement reads an index in byte order of the names, in order
// and limited, whether planned for its arguments or generically: the
// primary key of a table CreateTable makes (its names are COLLATE "C"),
// and, on a table of a release before Inspect whose names have a
// collation of another order (ICU's "und-x-icu", as a database's default
// collation may be), the names index CreateTable adds to it.
func TestListingUsesNamesIndex(t *testing.T) {
	ctx, pool, _ := startStore(t)
	fillIdle(t, ctx, pool, lockmw.DefaultPrefix, 20000)
	checkListingReads(t, ctx, pool, "a table CreateTable made", "lockmw_locks_pkey")

	var icu bool
	if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_collation WHERE collname = 'und-x-icu')").Scan(&icu); err != nil {
		t.Fatal(err)
	}
	if !icu {
		t.Skip(`this PostgreSQL has no ICU collation "und-x-icu" (built without ICU)`)
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE lockmw_locks ALTER COLUMN name TYPE text COLLATE "und-x-icu";
ANALYZE lockmw_locks`); err != nil {
		t.Fatal(err)
	}
	if err := CreateTable(ctx, pool); err != nil {
		t.Fatalf("CreateTable on a table whose names are ICU's: %v", err)
	}
	checkListingReads(t, ctx, pool, "a migrated table whose names are ICU's", "lockmw_locks_names")
}

// TestListingBoundedPastIdleRows: a page reads at most listBudget rows:
// behind thousands of rows of ended holdings, a page lists none and names
// the next; walking on lists the held locks behind them, with a key that
// is no text (a hex row name) among them, and every cursor of the walk is
// one of this prefix's.
func TestListingBoundedPastIdleRows(t *testing.T) {
	ctx, pool, s := startStore(t)
	const prefix = "lockmw:"
	fillIdle(t, ctx, pool, prefix, 3000)
	held := []string{"~held-1", "~held-2", "nul\x00", "bad\xff"}
	for i, k := range held {
		if r, err := s.Acquire(ctx, store.Key{Prefix: prefix, Name: k}, fmt.Sprint("t", i), handTTL, true); err != nil || !r.Acquired {
			t.Fatalf("acquiring %q: %+v, %v", k, r, err)
		}
	}
	// Another prefix's lock, which the listing must not show.
	if r, err := s.Acquire(ctx, store.Key{Prefix: "other:", Name: "x"}, "o", handTTL, true); err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	const limit = 10
	var listed []string
	cursor, pages, empty := "", 0, 0
	for {
		page, next, err := s.List(ctx, prefix, cursor, limit)
		if err != nil {
			t.Fatalf("List after %d pages: %v", pages, err)
		}
		pages++
		if len(page) == 0 && next != "" {
			empty++
		}
		if pages == 1 && (len(page) != 0 || next == "") {
			t.Fatalf("the first page, before 3000 rows of ended holdings: %d locks, next %q; want none, and a next page (a page reads a bounded number of rows)", len(page), next)
		}
		for _, in := range page {
			if !in.Held || in.Fence.Is != store.Exact {
				t.Fatalf("listed %+v", in)
			}
			listed = append(listed, in.Name)
		}
		if next == "" {
			break
		}
		if _, err := prefixRanges(prefix).decodeCursor(next); err != nil {
			t.Fatalf("List's own cursor %q: %v", next, err)
		}
		if pages > 3000/limit {
			t.Fatalf("%d pages and still a next one", pages)
		}
		cursor = next
	}
	slices.Sort(listed)
	want := slices.Clone(held)
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Fatalf("listed %q, want %q", listed, want)
	}
	t.Logf("%d pages, %d of them empty", pages, empty)
}

// TestListingRefusesOthersCursors: a cursor List did not make for this
// prefix (another format, another prefix's, one not base64) gives an
// error matching store.ErrBadCursor.
func TestListingRefusesOthersCursors(t *testing.T) {
	ctx, _, s := startStore(t)
	other := prefixRanges("other:").encodeCursor(RowName("other:", "x"))
	for _, c := range []string{"x", "pg1.***", other, cursorVersion + "MTox"} {
		if _, _, err := s.List(ctx, "lockmw:", c, 10); !errors.Is(err, store.ErrBadCursor) {
			t.Errorf("List(cursor %q): %v, want ErrBadCursor", c, err)
		}
	}
}

// TestListingPrefixNotText: a prefix that is no text (its locks' rows all
// have hex names) lists its locks, and not those of a prefix that starts
// with it, nor of one it starts with.
func TestListingPrefixNotText(t *testing.T) {
	ctx, _, s := startStore(t)
	const prefix = "p\xff:"
	for i, k := range []store.Key{{Prefix: prefix, Name: "a"}, {Prefix: prefix, Name: "b\x00"}, {Prefix: prefix + "x", Name: "c"}, {Prefix: "p", Name: "\xff:d"}} {
		if r, err := s.Acquire(ctx, k, fmt.Sprint("t", i), handTTL, true); err != nil || !r.Acquired {
			t.Fatalf("acquiring %q: %+v, %v", k, r, err)
		}
	}
	page, next, err := s.List(ctx, prefix, "", 10)
	if err != nil || next != "" {
		t.Fatalf("List: %v, next %q", err, next)
	}
	var keys []string
	for _, in := range page {
		keys = append(keys, in.Name)
	}
	if want := []string{"a", "b\x00"}; !slices.Equal(keys, want) {
		t.Fatalf("listed %q under %q, want %q", keys, prefix, want)
	}
	page, next, err = s.List(ctx, prefix, "", 1)
	if err != nil || len(page) != 1 || page[0].Name != "a" || next == "" {
		t.Fatalf("a page of 1: %+v, next %q, %v", page, next, err)
	}
	if page, next, err = s.List(ctx, prefix, next, 1); err != nil || len(page) != 1 || page[0].Name != "b\x00" {
		t.Fatalf("the second page of 1: %+v, next %q, %v", page, next, err)
	}
}

// TestHandOversBesideOlderLockers: a release that copies descriptions
// (handOverInfo) and one of releases before Inspect (handOver, the same
// text as theirs) hand the lock to a described waiter alike, the first
// with the waiter's description, the second without any; and the first
// wakes, and does not hand the lock to, an entry of a Locker before
// hand-overs (TestOldEntryWokenNotHanded, with the older release).
func TestHandOversBesideOlderLockers(t *testing.T) {
	ctx, pool, s := startStore(t)
	s.holderInfo = "w-info"
	for _, copies := range []bool{true, false} {
		s.handsInfo = copies
		k := store.Key{Prefix: "lockmw:", Name: fmt.Sprint("copies-", copies)}
		h, w := holdAndQueue(t, ctx, s, k)
		o, _, handed := release(t, ctx, pool, s, k, "h")
		if o != store.Owned || handed <= h.Fence || handed <= w.Counter {
			t.Fatalf("copies %v: h's release: %v, handed fence %d; want Owned, handed above h's %d and w's seq %d", copies, o, handed, h.Fence, w.Counter)
		}
		in, err := s.Inspect(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		token, fence, _ := leaseRow(t, ctx, pool, k)
		if token != "w" || uint64(fence) != handed || !in.Held || in.Fence.Value != handed {
			t.Fatalf("copies %v: the row is %s's with fence %d, Inspect %+v; want w's, with %d", copies, token, fence, in, handed)
		}
		if got := in.Holder.Value; (got == "w-info") != copies || (in.Holder.Is == store.Exact) != copies || (in.Since.Is == store.Exact) != copies {
			t.Fatalf("copies %v: handed to a described waiter: %+v", copies, in)
		}
	}

	s.handsInfo = true
	k := store.Key{Prefix: "lockmw:", Name: "mixed"}
	if r, err := s.Acquire(ctx, k, "h", handTTL, true); err != nil || !r.Acquired {
		t.Fatalf("h's acquisition: %+v, %v", r, err)
	}
	// The old Enqueue's queue insert (e916f6c's enqueueFence).
	if _, err := pool.Exec(ctx, `INSERT INTO lockmw_locks_queue AS q (name, token, seq, expires_at)
		SELECT $1, 'old', nextval('"lockmw_locks_fence"'), clock_timestamp() + interval '10 seconds'`, name(k)); err != nil {
		t.Fatal(err)
	}
	o, woke, handed := release(t, ctx, pool, s, k, "h")
	if o != store.Owned || woke != 1 || handed != 0 || entries(t, ctx, pool, k, "old") != 1 {
		t.Fatalf("h's release before an old waiter: %v, woke %d, handed %d; want Owned, 1 wake, nothing handed, the entry kept", o, woke, handed)
	}
}
