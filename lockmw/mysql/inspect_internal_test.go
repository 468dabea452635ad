package mysql

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file tests what the conformance suite cannot see of Inspect and
// List: the statements of a Locker without a holder description, the
// description of a holding handed over, and the listing's reads.

const testInfo = "orders-7d9f host-a pid 42"

// A Locker without a holder description sends the acquisition statements
// it sent before descriptions existed, byte for byte (golden: what
// takeStmt and takeRowStmt of commit 254626b return for the same
// arguments; takeRowStmt's is prepared now, its strings parameters, and
// the statement with their values written in is compared); neither names
// holder nor held_since. With one, both do.
func TestStatementsWithoutHolderInfoAreUnchanged(t *testing.T) {
	n, _ := namesFor("")
	k := store.Key{Prefix: "p:", Name: "k"}
	before := map[bool][2]string{
		false: {"SET STATEMENT max_statement_time=0.800000 FOR INSERT INTO `lockmw_locks` (prefix, name, token, fence, expires_at, queue_seen) VALUES (X'703a', X'6b', X'746f6b', LAST_INSERT_ID(NEXTVAL(`lockmw_locks_fence`)), UTC_TIMESTAMP(6) + INTERVAL 1000000 MICROSECOND, 0) ON DUPLICATE KEY UPDATE token = IF(@lockmw_take := (expires_at <= UTC_TIMESTAMP(6) AND (queue_seen = 0 OR NOT EXISTS (SELECT 1 FROM `lockmw_locks_queue` q WHERE q.prefix = X'703a' AND q.name = X'6b' AND q.expires_at > UTC_TIMESTAMP(6)))), VALUES(token), token), fence = IF(@lockmw_take, LAST_INSERT_ID(NEXTVAL(`lockmw_locks_fence`)), fence), expires_at = IF(IF(@lockmw_take, (@lockmw_take := NULL) IS NULL, (@lockmw_take := NULL) IS NOT NULL), VALUES(expires_at), IF(LAST_INSERT_ID(IF(token = VALUES(token), 2305843009213693952, 4611686018427387904) + ((fence & 268435455) << 32) + GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), 0)) IS NULL, NULL, expires_at))",
			"SET STATEMENT max_statement_time=0.800000 FOR UPDATE `lockmw_locks` SET fence = IF((expires_at <= UTC_TIMESTAMP(6) AND queue_seen = 0), LAST_INSERT_ID(NEXTVAL(`lockmw_locks_fence`)), fence), token = IF((expires_at <= UTC_TIMESTAMP(6) AND queue_seen = 0), X'746f6b', token), expires_at = IF((expires_at <= UTC_TIMESTAMP(6) AND queue_seen = 0), UTC_TIMESTAMP(6) + INTERVAL 1000000 MICROSECOND, IF(LAST_INSERT_ID(IF(expires_at <= UTC_TIMESTAMP(6), 1152921504606846976, IF(token = X'746f6b', 2305843009213693952, 4611686018427387904) + ((fence & 268435455) << 32) + GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), 0))) IS NULL, NULL, expires_at)) WHERE prefix = X'703a' AND name = X'6b'"},
		true: {"SET STATEMENT max_statement_time=0.800000 FOR INSERT INTO `lockmw_locks` (prefix, name, token, fence, expires_at, queue_seen) VALUES (X'703a', X'6b', X'746f6b', LAST_INSERT_ID(NEXTVAL(`lockmw_locks_fence`)), UTC_TIMESTAMP(6) + INTERVAL 1000000 MICROSECOND, 0) ON DUPLICATE KEY UPDATE token = IF(@lockmw_take := (expires_at <= UTC_TIMESTAMP(6) AND (queue_seen = 0 OR NOT EXISTS (SELECT 1 FROM `lockmw_locks_queue` q WHERE q.prefix = X'703a' AND q.name = X'6b' AND q.expires_at > UTC_TIMESTAMP(6) AND q.token <> X'746f6b' AND q.seq < COALESCE((SELECT me.seq FROM `lockmw_locks_queue` me WHERE me.prefix = X'703a' AND me.name = X'6b' AND me.token = X'746f6b' AND me.expires_at > UTC_TIMESTAMP(6)), 18446744073709551615)))), VALUES(token), token), queue_seen = IF(@lockmw_take, queue_seen, 1), fence = IF(@lockmw_take, LAST_INSERT_ID(NEXTVAL(`lockmw_locks_fence`)), fence), expires_at = IF(IF(@lockmw_take, (@lockmw_take := NULL) IS NULL, (@lockmw_take := NULL) IS NOT NULL), VALUES(expires_at), IF(LAST_INSERT_ID(IF(token = VALUES(token), 2305843009213693952, 4611686018427387904) + ((fence & 268435455) << 32) + GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), 0)) IS NULL, NULL, expires_at))",
			"SET STATEMENT max_statement_time=0.800000 FOR UPDATE `lockmw_locks` SET fence = IF((expires_at <= UTC_TIMESTAMP(6) AND queue_seen = 0), LAST_INSERT_ID(NEXTVAL(`lockmw_locks_fence`)), fence), token = IF((expires_at <= UTC_TIMESTAMP(6) AND queue_seen = 0), X'746f6b', token), queue_seen = IF(expires_at <= UTC_TIMESTAMP(6) OR token = X'746f6b', queue_seen, 1), expires_at = IF((expires_at <= UTC_TIMESTAMP(6) AND queue_seen = 0), UTC_TIMESTAMP(6) + INTERVAL 1000000 MICROSECOND, IF(LAST_INSERT_ID(IF(expires_at <= UTC_TIMESTAMP(6), 1152921504606846976, IF(token = X'746f6b', 2305843009213693952, 4611686018427387904) + ((fence & 268435455) << 32) + GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), 0))) IS NULL, NULL, expires_at)) WHERE prefix = X'703a' AND name = X'6b'"},
	}
	for _, info := range []string{"", testInfo} {
		s := &sqlStore{n: n, info: info}
		for _, queued := range []bool{false, true} {
			stmts := [2]string{s.takeStmt(k, "tok", time.Second, queued), s.takeRowStmt(k, "tok", time.Second, queued).literal()}
			for i, name := range []string{"takeStmt", "takeRowStmt"} {
				q := stmts[i]
				if info == "" && q != before[queued][i] {
					t.Errorf("queued %v: without a description, %s is\n%s\nnot as before descriptions:\n%s", queued, name, q, before[queued][i])
				}
				if described := strings.Replace(before[queued][i], "X'746f6b', token), ", "X'746f6b', token), holder = IF((expires_at <= UTC_TIMESTAMP(6) AND queue_seen = 0), "+
					hexLit("tok"+sinceTaken+info)+", holder), held_since = IF((expires_at <= UTC_TIMESTAMP(6) AND queue_seen = 0), UTC_TIMESTAMP(6), held_since), ", 1); i == 1 && info != "" && q != described {
					// The prepared statement's values, in its
					// placeholders' order, with the description's.
					t.Errorf("queued %v: with a description, %s is\n%s\nwant\n%s", queued, name, q, described)
				}
				for _, col := range []string{"holder", "held_since"} {
					if named := strings.Contains(q, col); named != (info != "") {
						t.Errorf("info %q, queued %v: %s names %s: %v, want %v\n%s", info, queued, name, col, named, info != "", q)
					}
				}
			}
		}
	}
}

// A release hands the lock to a queued waiter in a statement that does
// not know the waiter's description: until the waiter learns the
// hand-over, the row's holder names the releasing token, and Inspect
// reports no holder; once it learns it (by its poll, or by its next
// attempt), its Locker writes its description, bound to its token, and
// Inspect reports it, with Since at most the time it learnt it (the store
// does not keep when the hand-over was).
func TestHandedHoldingIsDescribed(t *testing.T) {
	t.Parallel()
	s, admin := newTestStore(t)
	s.info = testInfo
	ctx := tctx(t)
	ttl := 5 * time.Second
	for _, learn := range []string{"poll", "attempt"} {
		k := store.Key{Prefix: "p:", Name: "handed-" + learn}
		start := time.Now()
		r, fence, _ := handedSetup(t, s, admin, k, ttl)
		in, err := s.Inspect(ctx, k)
		if err != nil || !in.Held || in.Holder.Is != store.Unknown || in.Since.Is != store.Unknown {
			t.Fatalf("%s: handed, not learnt yet: %+v, %v; want held, holder and since unknown (holder names the releasing token)", learn, in, err)
		}
		var got store.Reply
		if learn == "poll" {
			got, err = s.WaitTurn(ctx, k, "w", ttl, r)
		} else {
			got, err = s.Enqueue(ctx, k, "w", ttl, true)
		}
		if err != nil || !got.Acquired || got.Fence != fence {
			t.Fatalf("%s: learning the hand-over: %+v, %v", learn, got, err)
		}
		in, err = s.Inspect(ctx, k)
		if err != nil || !in.Held || in.Holder != (store.Reading[string]{Value: testInfo, Is: store.Exact}) || in.Fence.Value != fence {
			t.Fatalf("%s: handed and learnt: %+v, %v; want held with fence %d, holder %q exact", learn, in, err, fence, testInfo)
		}
		if in.Since.Is != store.AtMost || in.Since.Value.Before(start.Add(-2*time.Second)) || in.Since.Value.After(time.Now().Add(2*time.Second)) {
			t.Fatalf("%s: handed and learnt: since %v (%v), want at most a time between %v and now", learn, in.Since.Value, in.Since.Is, start)
		}
		if o, err := s.Release(ctx, k, "w"); err != nil || o != store.Owned {
			t.Fatalf("%s: release: %v, %v", learn, o, err)
		}
	}
}

// tableRead is what ANALYZE FORMAT=JSON says of a table a statement
// read: the index used and the rows read per loop.
type tableRead struct {
	key  string
	rows float64
}

// tableReads is what js, ANALYZE FORMAT=JSON's output, says of each
// table.
func tableReads(t *testing.T, js string) map[string]tableRead {
	t.Helper()
	var doc any
	if err := json.Unmarshal([]byte(js), &doc); err != nil {
		t.Fatalf("ANALYZE's JSON: %v\n%s", err, js)
	}
	out := map[string]tableRead{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if name, ok := v["table_name"].(string); ok {
				key, _ := v["key"].(string)
				rows, _ := v["r_rows"].(float64)
				out[name] = tableRead{key: key, rows: rows}
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(doc)
	return out
}

// One page of the listing reads at most listScan rows of the lock table,
// by its primary key, however many idle rows the prefix has (here 20 000),
// and counts each lock's waiters by the queue's primary key (never a
// range of every lock's live entries); Inspect reads the queue the same
// way. The pages walk all the rows, listing every held lock and the free
// one with a waiter, and no idle one.
func TestListReadsBoundedRowsByIndex(t *testing.T) {
	t.Parallel()
	s, admin := newTestStore(t)
	ctx := tctx(t)
	const idle = 20000
	prefix := "big:"
	if _, err := admin.ExecContext(ctx, fmt.Sprintf("INSERT INTO lockmw_locks (prefix, name, token, fence, expires_at) SELECT ?, CONCAT('k', LPAD(seq, 6, '0')), '', seq, UTC_TIMESTAMP(6) - INTERVAL 1 SECOND FROM seq_1_to_%d", idle), prefix); err != nil {
		t.Fatal(err)
	}
	// A live entry of another lock, which a read of the queue by expiry
	// goes through (the optimizer, left to itself, reads a queue this
	// small by expires_at: every lock's live entries, for each row).
	if _, err := admin.ExecContext(ctx, "INSERT INTO lockmw_locks_queue (prefix, name, token, seq, expires_at, handover) SELECT 'other:', 'k', CONCAT('t', seq), seq, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, 1 FROM seq_1_to_1"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.ExecContext(context.Background(), "DELETE FROM lockmw_locks WHERE prefix = ?", prefix)
		_, _ = admin.ExecContext(context.Background(), "DELETE FROM lockmw_locks_queue WHERE prefix IN (?, 'other:')", prefix)
	})
	held := map[string]bool{}
	for _, name := range []string{"k000001", "k005000", "k012345", "k019999", "k020000"} {
		if r, err := s.Acquire(ctx, store.Key{Prefix: prefix, Name: name}, "h-"+name, time.Minute, true); err != nil || !r.Acquired {
			t.Fatalf("taking %s: %+v, %v", name, r, err)
		}
		held[name] = true
	}
	// A free lock with a live queue entry: waited for, so listed.
	waited := "k017000"
	if _, err := admin.ExecContext(ctx, "INSERT INTO lockmw_locks_queue (prefix, name, token, seq, expires_at, handover) VALUES (?, ?, 'w', NEXTVAL(lockmw_locks_fence), UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, 1)", prefix, waited); err != nil {
		t.Fatal(err)
	}

	var js string
	if err := admin.QueryRowContext(ctx, "ANALYZE FORMAT=JSON "+s.listStmt(prefix, "", 10)).Scan(&js); err != nil {
		t.Fatal(err)
	}
	reads := tableReads(t, js)
	if l := reads["l"]; l.key != "PRIMARY" || l.rows > listScan {
		t.Fatalf("a page read the lock table by %q, %v rows (%d under the prefix); want the primary key, at most %d rows\n%s", l.key, l.rows, idle, listScan, js)
	}
	if q := reads["q"]; q.key != "PRIMARY" || q.rows > 1 {
		t.Fatalf("a page read the queue by %q, %v rows a loop; want its primary key, the lock's own entries\n%s", q.key, q.rows, js)
	}
	cols, _ := s.inspectCols()
	if err := admin.QueryRowContext(ctx, "ANALYZE FORMAT=JSON SELECT "+strings.Join(cols, ", ")+" FROM (SELECT 1) one LEFT JOIN lockmw_locks l ON l.prefix = 'big:' AND l.name = 'k000001'").Scan(&js); err != nil {
		t.Fatal(err)
	}
	if q := tableReads(t, js)["q"]; q.key != "PRIMARY" {
		t.Fatalf("Inspect read the queue by %q; want its primary key\n%s", q.key, js)
	}

	listed := map[string]store.Inspection{}
	cursor, pages := "", 0
	for {
		page, next, err := s.List(ctx, prefix, cursor, 2)
		if err != nil {
			t.Fatalf("List(%q) after %d pages: %v", cursor, pages, err)
		}
		pages++
		if len(page) > 2 {
			t.Fatalf("a page of %d locks, limit 2", len(page))
		}
		for _, in := range page {
			if _, twice := listed[in.Name]; twice {
				t.Fatalf("%s listed twice", in.Name)
			}
			listed[in.Name] = in
		}
		if next == "" {
			break
		}
		if pages > 100 {
			t.Fatalf("still a cursor after %d pages", pages)
		}
		cursor = next
	}
	if pages < idle/listScan {
		t.Fatalf("%d pages for %d rows: a page read more than %d", pages, idle, listScan)
	}
	for name := range held {
		if in, ok := listed[name]; !ok || !in.Held || in.TTL.Is != store.Exact {
			t.Fatalf("held lock %s listed as %+v (%v)", name, in, ok)
		}
	}
	if in, ok := listed[waited]; !ok || in.Held || in.FairWaiters != (store.Reading[int]{Value: 1, Is: store.Exact}) {
		t.Fatalf("the free lock with a waiter listed as %+v (%v); want listed, free, 1 Fair waiter", in, ok)
	}
	if len(listed) != len(held)+1 {
		t.Fatalf("listed %d locks, want the %d held and the waited one", len(listed), len(held))
	}
	for _, bad := range []string{"m1.", "m1.!!", "m2.aw", "k000001"} {
		if _, _, err := s.List(ctx, prefix, bad, 2); !errors.Is(err, store.ErrBadCursor) {
			t.Errorf("List with cursor %q: %v, want ErrBadCursor", bad, err)
		}
	}
}
