package zookeeper

import (
	"context"
	"errors"
	"maps"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockmw/lockmw/internal/testkit/zktest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// The requests of an acquisition, and the hand-over a waiter sees when its
// predecessor's node is deleted (doc.go, "Safety": Acquisition and
// queueing, Hand-over seen by the waiter), each on a real server.

// opCounter counts a store's requests on one lock's nodes by operation,
// and keeps when each "children" reply came back.
type opCounter struct {
	mu       sync.Mutex
	ops      map[string]int
	children []time.Time // arrival of each answered "children" read
}

// count installs the counter as s's hook, for the requests on parent and
// its nodes; renewals ("multi") are not counted. Install it before the
// store's first request (the hook is read unlocked).
func count(s *zkStore, parent string) *opCounter {
	c := &opCounter{ops: map[string]int{}}
	s.hook = func(op, p string, err error) error {
		if op != "multi" && (p == parent || strings.HasPrefix(p, parent+"/")) {
			c.mu.Lock()
			c.ops[op]++
			if op == "children" && err == nil {
				c.children = append(c.children, time.Now())
			}
			c.mu.Unlock()
		}
		return err
	}
	return c
}

// take returns the counts so far, and starts again from zero.
func (c *opCounter) take() (map[string]int, []time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops, ch := c.ops, c.children
	c.ops, c.children = map[string]int{}, nil
	return ops, ch
}

func (c *opCounter) get(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops[op]
}

// czxidOf reads the czxid of token's node under parent, from another
// connection; token "": of the only node there.
func czxidOf(t *testing.T, adm *zk.Conn, parent, token string) int64 {
	t.Helper()
	nodes := children(t, adm, parent)
	if token == "" && len(nodes) != 1 {
		t.Fatalf("nodes under %s: %v, want one", parent, nodes)
	}
	for _, c := range nodes {
		if strings.HasPrefix(c, nodePrefix(token)) || token == "" {
			_, stat, err := adm.Exists(parent + "/" + c)
			if err != nil || stat == nil {
				t.Fatalf("the node %s: %v", c, err)
			}
			return stat.Czxid
		}
	}
	t.Fatalf("no node of %s under %s", token, parent)
	return 0
}

// nameOf is the name of token's node in s.
func nameOf(s *zkStore, token string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.held[token]; e != nil {
		return e.name
	}
	return ""
}

// An acquisition sends zk.Lock's requests: a free lock costs the create,
// one read of the children and the delete; a waiter's costs the create,
// the read, the watch on its predecessor, one read when the predecessor is
// deleted (WaitTurn reports the holding: no Enqueue again) and the delete.
// The fence, which the create's answer carries, is the node's czxid. Before
// the fence came with the create, each read of the queue was two requests
// (the children and the node's stat), and a waiter asked Enqueue again
// after its wake-up: 4 and 7 requests.
func TestRequestsPerAcquisition(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	adm := adminConn(t, srv.Addr())
	ctx := context.Background()
	const key = "reqs"
	parent := parentOfKey(key)
	holder, hs := testLocker(t, []string{srv.Addr()})
	waiter, ws := testLocker(t, []string{srv.Addr()})
	hc, wc := count(hs, parent), count(ws, parent)
	// Each store's first acquisition makes its session's guard (and the
	// parent): not counted.
	for _, l := range []*lockmw.Locker{holder, waiter} {
		lease, err := l.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	hc.take()
	wc.take()

	// Free: Acquire and TryAcquire alike.
	for _, try := range []bool{false, true} {
		acquire := holder.Acquire
		if try {
			acquire = holder.TryAcquire
		}
		lease, err := acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if want := czxidOf(t, adm, parent, ""); int64(lease.Fence()) != want {
			t.Fatalf("free lock (try %v): fence %d, want the node's czxid %d", try, lease.Fence(), want)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		ops, _ := hc.take()
		if want := map[string]int{"create": 1, "children": 1, "delete": 1}; !maps.Equal(ops, want) {
			t.Fatalf("free lock (try %v): requests %v, want %v", try, ops, want)
		}
	}

	// Busy: the waiter queues behind the holder, and gets the lock when
	// the holder releases it.
	held, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lockmw.Lease, 1)
	go func() {
		lease, err := waiter.Acquire(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- lease
	}()
	waitUntil(t, 10*time.Second, "the waiter watching the holder's node", func() bool { return wc.get("existsw") == 1 })
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lease := <-got
	if lease == nil {
		t.FailNow()
	}
	if want := czxidOf(t, adm, parent, ""); int64(lease.Fence()) != want || lease.Fence() <= held.Fence() {
		t.Fatalf("handed lock: fence %d, want the node's czxid %d, above the holder's %d", lease.Fence(), want, held.Fence())
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	ops, _ := wc.take()
	if want := map[string]int{"create": 1, "children": 2, "existsw": 1, "delete": 1}; !maps.Equal(ops, want) {
		t.Fatalf("waiter: requests %v, want %v", ops, want)
	}
}

// WaitTurn reports the holding when the predecessor's node is deleted and
// token's node is first, dated from the send time of the read that found
// it first (no later than that read's answer, and after the deletion), with
// the node's czxid as fence; the holding is the store's (Renew keeps it).
// Before, WaitTurn returned nothing and the Locker asked Enqueue again.
func TestWaitTurnReportsHandOver(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	adm := adminConn(t, srv.Addr())
	_, s1 := testLocker(t, []string{srv.Addr()})
	_, s2 := testLocker(t, []string{srv.Addr()})
	ctx := context.Background()
	k := store.Key{Prefix: lockmw.DefaultPrefix, Name: "handover"}
	parent := s1.parentOf(k)
	c2 := count(s2, parent)
	r1, err := s1.Enqueue(ctx, k, "tokA", time.Second, true)
	if err != nil || !r1.Acquired {
		t.Fatalf("first Enqueue: %+v, %v", r1, err)
	}
	r2, err := s2.Enqueue(ctx, k, "tokB", time.Second, true)
	if err != nil || r2.Acquired || path.Base(r2.Predecessor) != nameOf(s1, "tokA") {
		t.Fatalf("second Enqueue: %+v, %v; want busy behind tokA", r2, err)
	}
	c2.take()
	type result struct {
		r   store.Reply
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := s2.WaitTurn(ctx, k, "tokB", time.Second, r2)
		done <- result{r, err}
	}()
	waitUntil(t, 10*time.Second, "WaitTurn watching tokA's node", func() bool { return c2.get("existsw") == 1 })
	released := time.Now()
	if own, err := s1.Release(ctx, k, "tokA"); own != store.Owned || err != nil {
		t.Fatalf("Release: %v, %v", own, err)
	}
	var res result
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("WaitTurn did not return within 10s of the holder's release")
	}
	if res.err != nil || !res.r.Acquired {
		t.Fatalf("WaitTurn after the holder's release: %+v, %v; want the hand-over reported (Acquired)", res.r, res.err)
	}
	if want := czxidOf(t, adm, parent, "tokB"); int64(res.r.Fence) != want || res.r.Fence <= r1.Fence {
		t.Fatalf("hand-over fence %d, want tokB's czxid %d, above tokA's %d", res.r.Fence, want, r1.Fence)
	}
	_, reads := c2.take()
	if len(reads) != 1 {
		t.Fatalf("WaitTurn read the children %d times, want once", len(reads))
	}
	if v := res.r.ValidFrom; v.Before(released) || v.After(reads[0]) {
		t.Fatalf("ValidFrom %v: want the send time of the read after the release (released %v, read answered %v)",
			v.Format(time.StampMicro), released.Format(time.StampMicro), reads[0].Format(time.StampMicro))
	}
	rr := s2.Renew(ctx, []store.RenewRequest{{Key: k, Token: "tokB", TTL: time.Second}})
	if rr[0].Err != nil || rr[0].Ownership != store.Owned {
		t.Fatalf("Renew of the handed holding: %+v, want Owned", rr[0])
	}
	if own, err := s2.Release(ctx, k, "tokB"); own != store.Owned || err != nil {
		t.Fatalf("Release of the handed holding: %v, %v", own, err)
	}
}

// When the node before token's is deleted but token's is not first (a
// waiter ahead left the queue), WaitTurn reports nothing and watches the
// node now before it, with one read; it reports the holding once that one
// is deleted. Before, it returned at the first deletion and the Locker
// asked Enqueue again.
func TestWaitTurnWatchesTheNewPredecessor(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	_, sa := testLocker(t, []string{srv.Addr()})
	_, sb := testLocker(t, []string{srv.Addr()})
	_, sc := testLocker(t, []string{srv.Addr()})
	ctx := context.Background()
	k := store.Key{Prefix: lockmw.DefaultPrefix, Name: "newpred"}
	cc := count(sc, sc.parentOf(k))
	ra, err := sa.Enqueue(ctx, k, "tokA", time.Second, true)
	if err != nil || !ra.Acquired {
		t.Fatalf("A's Enqueue: %+v, %v", ra, err)
	}
	if rb, err := sb.Enqueue(ctx, k, "tokB", time.Second, true); err != nil || rb.Acquired {
		t.Fatalf("B's Enqueue: %+v, %v", rb, err)
	}
	rc, err := sc.Enqueue(ctx, k, "tokC", time.Second, true)
	if err != nil || rc.Acquired || path.Base(rc.Predecessor) != nameOf(sb, "tokB") {
		t.Fatalf("C's Enqueue: %+v, %v; want busy behind B", rc, err)
	}
	cc.take()
	done := make(chan store.Reply, 1)
	go func() {
		r, err := sc.WaitTurn(ctx, k, "tokC", time.Second, rc)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	waitUntil(t, 10*time.Second, "C watching B's node", func() bool { return cc.get("existsw") == 1 })
	if err := sb.Leave(ctx, k, "tokB"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for cc.get("existsw") < 2 {
		select {
		case r := <-done:
			t.Fatalf("WaitTurn returned %+v when B left while A holds; want it to watch A's node", r)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("C did not watch A's node within 10s of B leaving")
		}
	}
	if own, err := sa.Release(ctx, k, "tokA"); own != store.Owned || err != nil {
		t.Fatalf("A's Release: %v, %v", own, err)
	}
	select {
	case r := <-done:
		if !r.Acquired || r.Fence <= ra.Fence {
			t.Fatalf("WaitTurn after A's release: %+v; want the hand-over, fence above A's %d", r, ra.Fence)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitTurn did not return within 10s of A's release")
	}
	if ops, _ := cc.take(); ops["children"] != 2 || ops["existsw"] != 2 {
		t.Fatalf("C's requests %v, want 2 watches and 2 reads", ops)
	}
	if _, err := sc.Release(ctx, k, "tokC"); err != nil {
		t.Fatal(err)
	}
}

// Where Config.ACL does not let the client write the guard, the create's
// Multi checks the guard's version (the server refuses the write and
// creates nothing), and the fence is read from the node's stat: locks
// work, fences are czxids, and a hand-over is still reported.
func TestGuardNotWritable(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	adm := adminConn(t, srv.Addr())
	acl := zk.WorldACL(zk.PermRead | zk.PermCreate | zk.PermDelete)
	newRO := func() (*lockmw.Locker, *zkStore) {
		cfg := Config{Servers: []string{srv.Addr()}, TickTime: zktest.TickTime, ConnectTimeout: 20 * time.Second, ACL: acl}
		l, s, err := newLocker(cfg, []lockmw.Option{lockmw.WithTTL(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l, s
	}
	l1, s1 := newRO()
	l2, _ := newRO()
	ctx := context.Background()
	const key = "guard-ro"
	parent := parentOfKey(key)
	held, err := l1.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("Acquire with an ACL that does not let the guard be written: %v", err)
	}
	if want := czxidOf(t, adm, parent, ""); int64(held.Fence()) != want {
		t.Fatalf("fence %d, want the node's czxid %d", held.Fence(), want)
	}
	s1.mu.Lock()
	ro := s1.guardRO
	s1.mu.Unlock()
	if !ro {
		t.Fatal("the store did not notice that its guard is not writable")
	}
	got := make(chan *lockmw.Lease, 1)
	go func() {
		lease, err := l2.Acquire(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- lease
	}()
	waitUntil(t, 10*time.Second, "the waiter queued", func() bool { return len(children(t, adm, parent)) == 2 })
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lease := <-got
	if lease == nil {
		t.FailNow()
	}
	if want := czxidOf(t, adm, parent, ""); int64(lease.Fence()) != want || lease.Fence() <= held.Fence() {
		t.Fatalf("handed lock: fence %d, want the node's czxid %d above %d", lease.Fence(), want, held.Fence())
	}
	if err := lease.Release(ctx); err != nil && !errors.Is(err, lockmw.ErrLost) {
		t.Fatal(err)
	}
}
