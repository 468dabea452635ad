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
// and keeps when each answered one came back.
type opCounter struct {
	mu  sync.Mutex
	ops map[string]int
	at  map[string][]time.Time // arrival of each answer without error
}

// count installs the counter as s's hook, for the requests on parent and
// its nodes; renewals ("multi") are not counted. Install it before the
// store's first request (the hook is read unlocked).
func count(s *zkStore, parent string) *opCounter {
	c := &opCounter{ops: map[string]int{}, at: map[string][]time.Time{}}
	s.hook = func(op, p string, err error) error {
		if op != "multi" && (p == parent || strings.HasPrefix(p, parent+"/")) {
			c.mu.Lock()
			c.ops[op]++
			if err == nil {
				c.at[op] = append(c.at[op], time.Now())
			}
			c.mu.Unlock()
		}
		return err
	}
	return c
}

// take returns the counts and arrivals so far, and starts again from zero.
func (c *opCounter) take() (map[string]int, map[string][]time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops, at := c.ops, c.at
	c.ops, c.at = map[string]int{}, map[string][]time.Time{}
	return ops, at
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

// An acquisition sends no more requests than zk.Lock's: a free lock costs
// the create and the delete (the create's answer carries the parent's
// stat, whose child count shows the node alone, so no read of the
// children, where zk.Lock reads them); the next waiter's costs the create,
// the read, the watch on its predecessor (whose deletion makes it first:
// WaitTurn reports the holding, with no read and no Enqueue again) and the
// delete, where zk.Lock reads the children again. The fence, which the
// create's answer carries, is the node's czxid. Before the fence came with
// the create, each read of the queue was two requests (the children and
// the node's stat), and a waiter asked Enqueue again after its wake-up: 4
// and 7 requests; before the create wrote the parent, a free lock cost 3
// (a read of the children after the create).
func TestRequestsPerAcquisition(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	adm := adminConn(t, srv.Addr())
	ctx := context.Background()
	const key = "reqs"
	parent := parentOfKey(key)
	// A persistent parent: the server's container reaper would otherwise
	// delete the empty parent between two acquisitions, and the next
	// create would make it again (requests counted here).
	if _, err := adm.Create(parent, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = adm.Delete(parent, -1) })
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
		if want := map[string]int{"create": 1, "delete": 1}; !maps.Equal(ops, want) {
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
	if want := map[string]int{"create": 1, "children": 1, "existsw": 1, "delete": 1}; !maps.Equal(ops, want) {
		t.Fatalf("waiter: requests %v, want %v", ops, want)
	}
}

// line is a queue of n entries, "tok0" first (holding), each of its own
// Locker's store; every store counts its requests from the start.
type line struct {
	k       store.Key
	parent  string
	stores  []*zkStore
	counts  []*opCounter
	replies []store.Reply
}

func queueUp(t *testing.T, addr, key string, n int) *line {
	t.Helper()
	q := &line{k: store.Key{Prefix: lockmw.DefaultPrefix, Name: key}}
	for i := range n {
		_, s := testLocker(t, []string{addr})
		q.parent = s.parentOf(q.k)
		c := count(s, q.parent)
		r, err := s.Enqueue(context.Background(), q.k, tok(i), time.Second, true)
		if err != nil || r.Acquired != (i == 0) || (i > 0 && path.Base(r.Predecessor) != nameOf(q.stores[i-1], tok(i-1))) {
			t.Fatalf("Enqueue %d: %+v, %v; want first, or busy behind %s", i, r, err, tok(i-1))
		}
		c.take()
		q.stores, q.counts, q.replies = append(q.stores, s), append(q.counts, c), append(q.replies, r)
	}
	return q
}

func tok(i int) string { return "tok" + string(rune('0'+i)) }

// waitTurn runs entry i's WaitTurn, and returns its outcome on a channel.
func (q *line) waitTurn(t *testing.T, i int) <-chan store.Reply {
	done := make(chan store.Reply, 1)
	go func() {
		r, err := q.stores[i].WaitTurn(context.Background(), q.k, tok(i), time.Second, q.replies[i])
		if err != nil {
			t.Errorf("WaitTurn of %s: %v", tok(i), err)
		}
		done <- r
	}()
	return done
}

// release ends entry i (Release: its holding, or its place).
func (q *line) release(t *testing.T, i int) {
	t.Helper()
	if own, err := q.stores[i].Release(context.Background(), q.k, tok(i)); own != store.Owned || err != nil {
		t.Fatalf("Release of %s: %v, %v", tok(i), own, err)
	}
}

// handed waits for a WaitTurn's report and checks it is the holding of
// entry i: fenced by its node's czxid, above the first entry's, and kept
// by the store (Renew).
func (q *line) handed(t *testing.T, adm *zk.Conn, i int, done <-chan store.Reply) store.Reply {
	t.Helper()
	var r store.Reply
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("WaitTurn of %s did not return within 10s", tok(i))
	}
	if !r.Acquired {
		t.Fatalf("WaitTurn of %s: %+v; want the hand-over reported (Acquired)", tok(i), r)
	}
	if want := czxidOf(t, adm, q.parent, tok(i)); int64(r.Fence) != want || r.Fence <= q.replies[0].Fence {
		t.Fatalf("hand-over fence %d, want %s's czxid %d, above tok0's %d", r.Fence, tok(i), want, q.replies[0].Fence)
	}
	rr := q.stores[i].Renew(context.Background(), []store.RenewRequest{{Key: q.k, Token: tok(i), TTL: time.Second}})
	if rr[0].Err != nil || rr[0].Ownership != store.Owned {
		t.Fatalf("Renew of the handed holding: %+v, want Owned", rr[0])
	}
	return r
}

// When the node just before token's was the only one below it at the last
// read, its deletion makes token's first: WaitTurn reports the holding at
// the watch's event, with no read, dated from the watch's send time (a
// request answered in the session, before the hand-over: no later than its
// answer), with the node's czxid as fence. Before, WaitTurn returned
// nothing and the Locker asked Enqueue again (two requests, one round trip
// after the event).
func TestWaitTurnReportsHandOver(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	adm := adminConn(t, srv.Addr())
	q := queueUp(t, srv.Addr(), "handover", 2)
	asked := time.Now()
	done := q.waitTurn(t, 1)
	waitUntil(t, 10*time.Second, "WaitTurn watching tok0's node", func() bool { return q.counts[1].get("existsw") == 1 })
	q.release(t, 0)
	r := q.handed(t, adm, 1, done)
	ops, at := q.counts[1].take()
	if want := map[string]int{"existsw": 1}; !maps.Equal(ops, want) {
		t.Fatalf("WaitTurn's requests %v, want %v", ops, want)
	}
	if v := r.ValidFrom; v.Before(asked) || v.After(at["existsw"][0]) {
		t.Fatalf("ValidFrom %v: want the watch's send time (WaitTurn called %v, watch answered %v)",
			v.Format(time.StampMicro), asked.Format(time.StampMicro), at["existsw"][0].Format(time.StampMicro))
	}
	q.release(t, 1)
}

// When the last read found two nodes below token's, WaitTurn watches the
// node before its predecessor too; when that one goes (the holder
// releasing), it reads the queue during the predecessor's turn, finds the
// predecessor the only node below, and takes the lock at the
// predecessor's deletion with no request more: no round trip between that
// release and the next holding, as when only one node was below. The
// holding is dated from that read's send time (after the first deletion,
// before the second). Before, the waiter watched its predecessor only,
// and read the queue after its deletion.
func TestWaitTurnReadsWhenTheNodeBeforeThePredecessorGoes(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	adm := adminConn(t, srv.Addr())
	q := queueUp(t, srv.Addr(), "others-below", 3)
	done := q.waitTurn(t, 2)
	waitUntil(t, 10*time.Second, "tok2 watching tok1's and tok0's nodes", func() bool { return q.counts[2].get("getw") == 1 })
	releasing := time.Now()
	q.release(t, 0)
	waitUntil(t, 10*time.Second, "tok2 reading the queue after tok0 left", func() bool { return q.counts[2].get("children") == 1 })
	select {
	case r := <-done:
		t.Fatalf("WaitTurn returned %+v while tok1 holds", r)
	case <-time.After(50 * time.Millisecond):
	}
	released := time.Now()
	q.release(t, 1)
	r := q.handed(t, adm, 2, done)
	ops, at := q.counts[2].take()
	if want := map[string]int{"existsw": 1, "getw": 1, "children": 1}; !maps.Equal(ops, want) {
		t.Fatalf("WaitTurn's requests %v, want %v", ops, want)
	}
	if read := at["children"][0]; read.After(released) {
		t.Fatalf("the read came back %v, after tok1's release %v: want it during tok1's turn", read.Format(time.StampMicro), released.Format(time.StampMicro))
	}
	if v := r.ValidFrom; v.Before(releasing) || v.After(released) {
		t.Fatalf("ValidFrom %v: want the read's send time, after tok0's release (sent %v), before tok1's (sent %v)",
			v.Format(time.StampMicro), releasing.Format(time.StampMicro), released.Format(time.StampMicro))
	}
	q.release(t, 2)
}

// When the predecessor's deletion comes while the last read found other
// nodes below token's (here the holder and the predecessor go in one
// transaction), WaitTurn reads the queue once, finds token's node first,
// and dates the holding from that read's send time (after the deletion, no
// later than the read's answer).
func TestWaitTurnReadsWhenOthersWereBelow(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	adm := adminConn(t, srv.Addr())
	q := queueUp(t, srv.Addr(), "others-below-unseen", 3)
	done := q.waitTurn(t, 2)
	waitUntil(t, 10*time.Second, "tok2 watching tok1's and tok0's nodes", func() bool { return q.counts[2].get("getw") == 1 })
	left := time.Now()
	if _, err := adm.Multi(&zk.DeleteRequest{Path: q.parent + "/" + nameOf(q.stores[0], tok(0)), Version: -1},
		&zk.DeleteRequest{Path: q.parent + "/" + nameOf(q.stores[1], tok(1)), Version: -1}); err != nil {
		t.Fatal(err)
	}
	r := q.handed(t, adm, 2, done)
	ops, at := q.counts[2].take()
	if want := map[string]int{"existsw": 1, "getw": 1, "children": 1}; !maps.Equal(ops, want) {
		t.Fatalf("WaitTurn's requests %v, want %v", ops, want)
	}
	if v := r.ValidFrom; v.Before(left) || v.After(at["children"][0]) {
		t.Fatalf("ValidFrom %v: want the send time of the read after the deletion (deleted %v, read answered %v)",
			v.Format(time.StampMicro), left.Format(time.StampMicro), at["children"][0].Format(time.StampMicro))
	}
	q.release(t, 2)
}

// A watch sent so long before the hand-over that it would leave less than
// 3/4 of the TTL does not date the holding: WaitTurn reads the queue and
// dates it from that read.
func TestWaitTurnDatesALongWaitByARead(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	adm := adminConn(t, srv.Addr())
	q := queueUp(t, srv.Addr(), "long-wait", 2)
	done := q.waitTurn(t, 1)
	waitUntil(t, 10*time.Second, "WaitTurn watching tok0's node", func() bool { return q.counts[1].get("existsw") == 1 })
	time.Sleep(time.Second / 4) // a quarter of the TTL
	released := time.Now()
	q.release(t, 0)
	r := q.handed(t, adm, 1, done)
	ops, at := q.counts[1].take()
	if ops["children"] != 1 {
		t.Fatalf("WaitTurn's requests %v, want one read of the children", ops)
	}
	if v := r.ValidFrom; v.Before(released) || v.After(at["children"][0]) {
		t.Fatalf("ValidFrom %v: want the send time of the read after the release (released %v, read answered %v)",
			v.Format(time.StampMicro), released.Format(time.StampMicro), at["children"][0].Format(time.StampMicro))
	}
	q.release(t, 1)
}

// When the node before token's is deleted but token's is not first (a
// waiter ahead left the queue while the lock is held), WaitTurn reports
// nothing: it reads the queue once and watches the node now before it,
// and reports the holding when that one is deleted. Before, it returned at
// the first deletion and the Locker asked Enqueue again; a WaitTurn that
// took every deletion of its predecessor for a hand-over would report a
// holding here while tok0 holds.
func TestWaitTurnWatchesTheNewPredecessor(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	adm := adminConn(t, srv.Addr())
	q := queueUp(t, srv.Addr(), "newpred", 3)
	done := q.waitTurn(t, 2)
	waitUntil(t, 10*time.Second, "tok2 watching tok1's and tok0's nodes", func() bool { return q.counts[2].get("getw") == 1 })
	q.release(t, 1)
	deadline := time.Now().Add(10 * time.Second)
	for q.counts[2].get("existsw") < 2 {
		select {
		case r := <-done:
			t.Fatalf("WaitTurn returned %+v when tok1 left while tok0 holds; want it to watch tok0's node", r)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("tok2 did not watch tok0's node within 10s of tok1 leaving")
		}
	}
	q.release(t, 0)
	q.handed(t, adm, 2, done)
	if ops, _ := q.counts[2].take(); !maps.Equal(ops, map[string]int{"existsw": 2, "getw": 1, "children": 1}) {
		t.Fatalf("tok2's requests %v, want 2 watches (tok1, then tok0 as predecessor), tok0 watched before as the node before tok1, 1 read", ops)
	}
	q.release(t, 2)
}

// Only the predecessor's deletion hands the lock on: another event of its
// watch (its data written, here by another client) is read as no more than
// a reason to look at the queue again.
func TestWaitTurnOnlyDeletionHandsOver(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	adm := adminConn(t, srv.Addr())
	q := queueUp(t, srv.Addr(), "data-event", 2)
	done := q.waitTurn(t, 1)
	waitUntil(t, 10*time.Second, "WaitTurn watching tok0's node", func() bool { return q.counts[1].get("existsw") == 1 })
	if _, err := adm.Set(q.parent+"/"+nameOf(q.stores[0], tok(0)), []byte("x"), -1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for q.counts[1].get("existsw") < 2 {
		select {
		case r := <-done:
			t.Fatalf("WaitTurn returned %+v when tok0's data changed while it holds; want it to watch again", r)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("tok1 did not watch tok0's node again within 10s of the data change")
		}
	}
	q.release(t, 0)
	q.handed(t, adm, 1, done)
	q.release(t, 1)
}

// Where Config.ACL does not let the client write the guard, the create's
// Multi checks the guard's version (the server refuses the write and
// creates nothing), and the fence is read from the node's stat: locks
// work, fences are czxids, and a hand-over is still reported. Nor can it
// write the lock's parent: the create leaves the parent out (the server
// refuses the write and creates nothing), and the queue is read after it.
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
	ro, parentRO := s1.guardRO, s1.parentRO
	s1.mu.Unlock()
	if !ro {
		t.Fatal("the store did not notice that its guard is not writable")
	}
	if !parentRO {
		t.Fatal("the store did not notice that the lock's parent is not writable")
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

// A lock node the store did not make in that transaction, such as an
// earlier version's (whose create did not write the parent), counts: a
// create's answer shows the node alone only when the parent's stat, read
// after the create in the same transaction, counts one child. Here the
// other node is made by a plain create, as before; TryAcquire is busy
// while it exists, and takes the lock without a read once it is gone. A
// create that wrote the parent before creating its node would see one
// child and take the lock.
func TestCreateCountsOtherNodes(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	adm := adminConn(t, srv.Addr())
	ctx := context.Background()
	const key = "counts-others"
	parent := parentOfKey(key)
	if _, err := adm.Create(parent, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = adm.Delete(parent, -1) })
	other, err := adm.Create(parent+"/"+nodePrefix("00000000000000000000000000000001"), nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	l, s := testLocker(t, []string{srv.Addr()})
	c := count(s, parent)
	if lease, err := l.TryAcquire(ctx, key); !errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatalf("TryAcquire beside another version's node: error %v, lease taken %v; want ErrNotAcquired", err, lease != nil)
	}
	if ops, _ := c.take(); ops["children"] != 1 {
		t.Fatalf("busy TryAcquire's requests %v, want a read of the children after the create", ops)
	}
	if err := adm.Delete(other, -1); err != nil {
		t.Fatal(err)
	}
	lease, err := l.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire once the other node is gone: %v", err)
	}
	if want := czxidOf(t, adm, parent, ""); int64(lease.Fence()) != want {
		t.Fatalf("fence %d, want the node's czxid %d", lease.Fence(), want)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if ops, _ := c.take(); !maps.Equal(ops, map[string]int{"create": 1, "delete": 1}) {
		t.Fatalf("free TryAcquire and release: requests %v, want a create and a delete", ops)
	}
}

// Where the guard cannot be written but the lock's parent can (another
// Locker made it, under a wider ACL), the create's answer still carries
// the fence: the parent's new mzxid, the transaction's zxid, the node's
// czxid; a free lock costs the create and the delete.
func TestGuardNotWritableParentWritable(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	adm := adminConn(t, srv.Addr())
	const key = "guard-ro-parent-rw"
	parent := parentOfKey(key)
	if _, err := adm.Create(parent, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = adm.Delete(parent, -1) })
	cfg := Config{Servers: []string{srv.Addr()}, TickTime: zktest.TickTime, ConnectTimeout: 20 * time.Second,
		ACL: zk.WorldACL(zk.PermRead | zk.PermCreate | zk.PermDelete)}
	l, s, err := newLocker(cfg, []lockmw.Option{lockmw.WithTTL(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	c := count(s, parent) // before the store's first request: the hook is read unlocked
	for i := range 2 {    // the first makes the session's guard, and learns it is not writable
		lease, err := l.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if want := czxidOf(t, adm, parent, ""); int64(lease.Fence()) != want {
			t.Fatalf("fence %d, want the node's czxid %d", lease.Fence(), want)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		ro, parentRO := s.guardRO, s.parentRO
		s.mu.Unlock()
		if !ro || parentRO {
			t.Fatalf("guard not writable noticed %v, parent not writable %v; want true, false", ro, parentRO)
		}
		if ops, _ := c.take(); i == 1 && !maps.Equal(ops, map[string]int{"create": 1, "delete": 1}) {
			t.Fatalf("free lock: requests %v, want a create and a delete", ops)
		}
	}
}
