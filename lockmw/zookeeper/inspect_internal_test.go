package zookeeper

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

	"github.com/go-zookeeper/zk"

	"github.com/lockmw/lockmw/internal/testkit/zktest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// What the conformance suite cannot see of Inspect and Locks on
// ZooKeeper: the requests and node data with and without holder info,
// whose holder info a lock shows across a hand-over, and a listing through
// many idle parents, page by page, within its bound of reads.

// holderNode returns the data and stat of the first lock node of parent.
func holderNode(t *testing.T, adm *zk.Conn, parent string) ([]byte, *zk.Stat) {
	t.Helper()
	first, n := firstNode(children(t, adm, parent))
	if n == 0 {
		t.Fatalf("no lock node under %s", parent)
	}
	data, stat, err := adm.Get(parent + "/" + first.name)
	if err != nil {
		t.Fatal(err)
	}
	return data, stat
}

// Without WithHolderInfo a lock node has no data and an acquisition costs
// the requests it cost before (a create and a delete for a free lock);
// with it, the same requests, the description being the node's data.
// Inspect costs a sync, the children and the holder node's read while
// held, a sync and the children while free.
func TestHolderInfoCostsNothingWithout(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	adm := adminConn(t, srv.Addr())
	ctx := context.Background()
	const key, info = "info-cost", "orders-7d9f host-a pid 42"
	parent := parentOfKey(key)
	// A persistent parent, so that no request of the counted ones makes
	// it again after the container reaper.
	if _, err := adm.Create(parent, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = adm.Delete(parent, -1) })
	for _, described := range []bool{false, true} {
		var opts []lockmw.Option
		if described {
			opts = append(opts, lockmw.WithHolderInfo(info))
		}
		l, s := testLocker(t, []string{srv.Addr()}, opts...)
		c := count(s, parent)
		releaseOK := func(lease *lockmw.Lease) {
			t.Helper()
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		lease, err := l.Acquire(ctx, key) // makes the session's guard: not counted
		if err != nil {
			t.Fatal(err)
		}
		releaseOK(lease)
		c.take()
		lease, err = l.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		data, stat := holderNode(t, adm, parent)
		want := ""
		if described {
			want = info
		}
		if string(data) != want || int(stat.DataLength) != len(want) {
			t.Fatalf("described %v: the lock node's data is %q (%d bytes), want %q", described, data, stat.DataLength, want)
		}
		got, err := l.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if got.Holder.Known() != described || got.Holder.Value != want {
			t.Fatalf("described %v: Inspect reports holder %+v", described, got.Holder)
		}
		if ops, _ := c.take(); !maps.Equal(ops, map[string]int{"create": 1, "sync": 1, "children": 1, "get": 1}) {
			t.Fatalf("described %v: an acquisition of a free lock and an Inspect of it held: requests %v, want a create, and a sync, the children and the holder's node read", described, ops)
		}
		releaseOK(lease)
		if _, err := l.Inspect(ctx, key); err != nil {
			t.Fatal(err)
		}
		if ops, _ := c.take(); !maps.Equal(ops, map[string]int{"delete": 1, "sync": 1, "children": 1}) {
			t.Fatalf("described %v: a release and an Inspect of the free lock: requests %v, want a delete, a sync and a read of the children", described, ops)
		}
	}
}

// A lock shows the holder info of the Locker whose node holds it, never of
// a waiter's, nor of the Locker that held it before; and a holder that
// waited for its turn is held since at least its node's creation.
func TestHolderInfoIsTheHoldersOwn(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	adm := adminConn(t, srv.Addr())
	ctx := context.Background()
	const key = "info-own"
	parent := parentOfKey(key)
	plainA, _ := testLocker(t, []string{srv.Addr()})
	described, _ := testLocker(t, []string{srv.Addr()}, lockmw.WithHolderInfo("described"))
	plainC, _ := testLocker(t, []string{srv.Addr()})

	inspect := func(what string, holders int) lockmw.LockInfo {
		t.Helper()
		waitUntil(t, 10*time.Second, what+": the queue", func() bool {
			_, n := firstNode(children(t, adm, parent))
			return n == holders
		})
		got, err := plainA.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Held || got.Waiters != (lockmw.Reading[int]{Value: holders - 1, Is: lockmw.Exact}) {
			t.Fatalf("%s: %+v, want held with %d waiters (exact)", what, got, holders-1)
		}
		return got
	}
	acquire := func(l *lockmw.Locker) <-chan *lockmw.Lease {
		got := make(chan *lockmw.Lease, 1)
		go func() {
			lease, err := l.Acquire(ctx, key)
			if err != nil {
				t.Error(err)
			}
			got <- lease
		}()
		return got
	}

	held, err := plainA.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	next := acquire(described) // queued behind plainA's node
	if got := inspect("plain holder, described waiter", 2); got.Holder.Known() {
		t.Fatalf("plain holder, described waiter: holder %+v, want unknown (the waiter's info is not the holder's)", got.Holder)
	}
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	held = <-next
	if held == nil {
		t.FailNow()
	}
	got := inspect("described holder, after a hand-over", 1)
	if got.Holder != (lockmw.Reading[string]{Value: "described", Is: lockmw.Exact}) {
		t.Fatalf("described holder: holder %+v, want %q (exact)", got.Holder, "described")
	}
	// It waited: its holding began at the release, after its node's
	// creation, which is what the store can tell.
	_, stat := holderNode(t, adm, parent)
	if got.Since.Is != lockmw.AtLeast || !got.Since.Value.Equal(time.UnixMilli(stat.Ctime)) || got.Since.Value.After(released.Add(time.Second)) {
		t.Fatalf("a holder that waited: since %v (%v), want at least its node's ctime %v", got.Since.Value, got.Since.Is, time.UnixMilli(stat.Ctime))
	}
	if got.Fence != (lockmw.Reading[uint64]{Value: held.Fence(), Is: lockmw.Exact}) {
		t.Fatalf("described holder: fence %+v, want %d (exact)", got.Fence, held.Fence())
	}

	next = acquire(plainC)
	if got := inspect("described holder, plain waiter", 2); got.Holder.Value != "described" {
		t.Fatalf("described holder, plain waiter: holder %+v, want %q", got.Holder, "described")
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	held = <-next
	if held == nil {
		t.FailNow()
	}
	if got := inspect("plain holder after a described one", 1); got.Holder.Known() {
		t.Fatalf("plain holder after a described one: holder %+v, want unknown", got.Holder)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A listing under a root with many idle lock parents (persistent ones, as
// on servers without containers, or containers not yet reaped), lock
// parents of another prefix, and nodes that are not lock parents (the
// session guards, cron records): every held lock is listed once, nothing
// else, and no page reads more than its bound of lock parents.
func TestListThroughIdleParents(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	adm := adminConn(t, srv.Addr())
	ctx := context.Background()
	const root, prefix, idle = "/listing", "list:", 2*listIdleBudget + 50
	acl := zk.WorldACL(zk.PermAll)
	if _, err := adm.Create(root, nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	var ops []any
	for i := range idle {
		ops = append(ops, &zk.CreateRequest{Path: fmt.Sprintf("%s/%sk%04d", root, escape(prefix), i), Acl: acl})
	}
	ops = append(ops,
		&zk.CreateRequest{Path: root + "/" + escape(prefix) + "%cronfire%job", Acl: acl},
		&zk.CreateRequest{Path: root + "/" + escape(prefix) + "%cronrun%job", Acl: acl},
		&zk.CreateRequest{Path: root + "/other:k0005", Acl: acl},
		&zk.CreateRequest{Path: root + "/other:k0005/lock-x-0000000000", Acl: acl})
	for len(ops) > 0 {
		n := min(len(ops), 200)
		if _, err := adm.Multi(ops[:n]...); err != nil {
			t.Fatal(err)
		}
		ops = ops[n:]
	}
	cfg := Config{Servers: []string{srv.Addr()}, TickTime: zktest.TickTime, ConnectTimeout: 20 * time.Second, Root: root}
	l, s, err := newLocker(cfg, []lockmw.Option{lockmw.WithTTL(time.Second), lockmw.WithPrefix(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	// Held locks between the idle ones in the listing's order, and one
	// key that needs escaping.
	held := map[string]*lockmw.Lease{}
	for _, k := range []string{"k0000", "k0100x", "k0300x", "k0300y", "k0300z", "k9999", "k/%é"} {
		lease, err := l.Acquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		held[k] = lease
	}
	var (
		mu    sync.Mutex
		reads map[string]int // requests of the page being read, by op
	)
	s.hook = func(op, p string, err error) error {
		mu.Lock()
		if reads != nil && op != "multi" && strings.HasPrefix(p, root) { // renewals are not the listing's
			reads[op]++
		}
		mu.Unlock()
		return err
	}
	const limit = 2
	listed := map[string]int{}
	cursor, pages := "", 0
	for {
		mu.Lock()
		reads = map[string]int{}
		mu.Unlock()
		page, next, err := l.Locks(ctx, cursor, limit)
		if err != nil {
			t.Fatalf("Locks(%q, %d) after %d pages: %v", cursor, limit, pages, err)
		}
		pages++
		mu.Lock()
		got := reads
		reads = nil
		mu.Unlock()
		// A sync, the root's children, then at most limit + the idle budget
		// parents' children, and the holder nodes of at most limit.
		if got["children"] > 1+limit+listIdleBudget || got["get"] > limit || got["sync"] != 1 || len(got) > 3 || len(page) > limit {
			t.Fatalf("page %d: requests %v and %d locks; want a sync, at most %d reads of children and %d of nodes, %d locks",
				pages, got, len(page), 1+limit+listIdleBudget, limit, limit)
		}
		for _, info := range page {
			listed[info.Key]++
			if lease := held[info.Key]; lease == nil || !info.Held || info.Fence.Value != lease.Fence() {
				t.Fatalf("page %d lists %+v, which is not a held lock of prefix %q", pages, info, prefix)
			}
		}
		if next == "" {
			break
		}
		if pages > 100 {
			t.Fatalf("still a next cursor after %d pages", pages)
		}
		cursor = next
	}
	for k := range held {
		if listed[k] != 1 {
			t.Fatalf("%q listed %d times in %d pages (listed: %v)", k, listed[k], pages, listed)
		}
	}
	// Cursors: one of this listing is refused by a listing of another
	// prefix, a changed one and a foreign one by any.
	_, next, err := l.Locks(ctx, "", 1)
	if err != nil || next == "" {
		t.Fatalf("Locks first page: next %q, %v", next, err)
	}
	otherPrefix, _, err := newLocker(cfg, []lockmw.Option{lockmw.WithTTL(time.Second), lockmw.WithPrefix("list")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = otherPrefix.Close() })
	// A character of the checksum changed.
	swap := map[bool]string{true: "B", false: "A"}[next[5] == 'A']
	changed := next[:5] + swap + next[6:]
	for _, c := range []struct {
		l      *lockmw.Locker
		cursor string
	}{{otherPrefix, next}, {l, changed}, {l, "zk1."}, {l, "zk2." + next[4:]}, {l, "not a cursor"}} {
		_, _, err := c.l.Locks(ctx, c.cursor, limit)
		if !errors.Is(err, lockmw.ErrInvalidOption) || !errors.Is(err, store.ErrBadCursor) {
			t.Fatalf("Locks(%q): %v, want ErrInvalidOption wrapping store.ErrBadCursor", c.cursor, err)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(held)) {
		if err := held[k].Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// On an ensemble, Inspect through a follower sees a holding that another
// server confirmed before Inspect was called, though the follower had not
// applied it yet (it was paused during the acquisition): Inspect syncs its
// server with the leader before it reads.
func TestInspectSeesAHoldingConfirmedElsewhere(t *testing.T) {
	t.Parallel()
	e := zktest.StartEnsemble(t, 3)
	leader := e.Leader(t)
	follower := e.Servers()[0]
	if follower == leader {
		follower = e.Servers()[1]
	}
	holder, _ := testLocker(t, []string{leader.Addr()})
	inspector, _ := testLocker(t, []string{follower.Addr()})
	ctx := context.Background()
	const key = "confirmed-elsewhere"
	if _, err := inspector.Inspect(ctx, key); err != nil { // the session is there
		t.Fatal(err)
	}
	follower.Pause(t)
	lease, err := holder.Acquire(ctx, key)
	if err != nil {
		follower.Resume(t)
		t.Fatal(err)
	}
	type result struct {
		info lockmw.LockInfo
		err  error
	}
	got := make(chan result, 1)
	go func() {
		info, err := inspector.Inspect(ctx, key)
		got <- result{info, err}
	}()
	time.Sleep(50 * time.Millisecond) // the request waits in the paused server's socket
	follower.Resume(t)
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !r.info.Held || r.info.Fence.Value != lease.Fence() {
		t.Fatalf("Inspect through a follower after an acquisition through the leader: %+v, want held with fence %d", r.info, lease.Fence())
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
