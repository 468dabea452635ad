package etcd_test

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/lockmw/etcd"
	"github.com/lockmw/lockmw/lockmw/etcd/internal/etcdtest"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file tests where a queued waiter's watch starts. A watch from the
// revision after Enqueue's read is one etcd 3.6 serves only every 100ms
// (its unsynced group) once anything was written after that read, so
// WaitTurn (and WaitFree) watch from the member's current revision R0 and,
// when R0 is above Enqueue's revision, read the lock's keys at R0 once
// instead. The tests write between Enqueue and WaitTurn, which a Locker
// runs back to back, and count the reads the waiter's client sends: one
// exactly when etcd's revision moved.

// calls counts the unary requests a client sends, by gRPC method.
type calls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *calls) get(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[method]
}

const (
	rangeMethod = "/etcdserverpb.KV/Range"
	txnMethod   = "/etcdserverpb.KV/Txn"
)

// countedQueue returns a store on a client of its own whose unary
// requests are counted as they are sent.
func countedQueue(t *testing.T, srv *etcdtest.Server) (*etcd.Queue, *calls) {
	t.Helper()
	c := &calls{n: map[string]int{}}
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		c.mu.Lock()
		c.n[method]++
		c.mu.Unlock()
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli := srv.Client(t, func(cfg *clientv3.Config) {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(count))
	})
	return newQueue(t, cli), c
}

// newQueue returns a store on cli with a TTL under which nothing is renewed
// within a test.
func newQueue(t *testing.T, cli *clientv3.Client) *etcd.Queue {
	t.Helper()
	q, err := etcd.NewQueue(cli, quietTTL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// turn is the outcome of a WaitTurn run in the background.
type turn struct {
	r   store.Reply
	err error
}

func waitTurnInBackground(ctx context.Context, q *etcd.Queue, key, token string, r store.Reply) <-chan turn {
	ch := make(chan turn, 1)
	go func() {
		got, err := q.WaitTurn(ctx, key, token, r)
		ch <- turn{got, err}
	}()
	return ch
}

// mustHold takes lock key for token on a free lock.
func mustHold(t *testing.T, ctx context.Context, q *etcd.Queue, key, token string) store.Reply {
	t.Helper()
	r, err := q.Acquire(ctx, key, token)
	if err != nil || !r.Acquired {
		t.Fatalf("%s taking the free lock %q: %+v, %v", token, key, r, err)
	}
	return r
}

// mustQueue queues token on lock key, held by someone else.
func mustQueue(t *testing.T, ctx context.Context, q *etcd.Queue, key, token string) store.Reply {
	t.Helper()
	r, err := q.Enqueue(ctx, key, token)
	if err != nil || r.Acquired || r.Seen == 0 {
		t.Fatalf("%s queueing on the held lock %q: %+v, %v; want queued", token, key, r, err)
	}
	return r
}

// elsewhere writes a key no lock has: etcd's revision moves on.
func elsewhere(t *testing.T, ctx context.Context, admin *clientv3.Client) int64 {
	t.Helper()
	resp, err := admin.Put(ctx, "unrelated", "x")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// noTurnYet fails the test if WaitTurn has returned.
func noTurnYet(t *testing.T, ch <-chan turn, while string) {
	t.Helper()
	select {
	case got := <-ch:
		t.Fatalf("WaitTurn returned %+v, %v while %s", got.r, got.err, while)
	default:
	}
}

// turnWithin returns what WaitTurn returned within 10s.
func turnWithin(t *testing.T, ch <-chan turn) turn {
	t.Helper()
	select {
	case got := <-ch:
		if got.err != nil {
			t.Fatalf("WaitTurn: %v", got.err)
		}
		return got
	case <-time.After(10 * time.Second):
		t.Fatal("WaitTurn did not return within 10s")
	}
	panic("unreachable")
}

// When etcd's revision moved between the waiter's Enqueue and its WaitTurn
// (a write elsewhere), WaitTurn reads the lock's keys once, at the
// revision its watch starts from, and then takes the hand-over from the
// watch: after the holder's release and the departure of the waiter
// before it (both below it in that read), without another request. With
// a watch from Enqueue's revision + 1 there is no read, and etcd delivers
// the watch's events only at its next 100ms resync.
func TestWaitTurnReadsOnceWhenEtcdMovedOn(t *testing.T) {
	srv := etcdtest.Start(t)
	admin := srv.Client(t)
	ctx := bg(t)
	holder, middle := newQueue(t, srv.Client(t)), newQueue(t, srv.Client(t))
	waiter, sent := countedQueue(t, srv)
	mustHold(t, ctx, holder, "moved", "a")
	mustQueue(t, ctx, middle, "moved", "m")
	r := mustQueue(t, ctx, waiter, "moved", "w")
	if rev := elsewhere(t, ctx, admin); rev <= r.Seen {
		t.Fatalf("the write elsewhere at revision %d, not after Enqueue's %d", rev, r.Seen)
	}
	es := entries(t, admin, "moved")
	if len(es) != 3 {
		t.Fatalf("etcd holds %v, want the holder's and two waiters' keys", es)
	}
	ranges, txns := sent.get(rangeMethod), sent.get(txnMethod)

	ch := waitTurnInBackground(ctx, waiter, "moved", "w", r)
	lockmwtest.Eventually(t, 10*time.Second, "WaitTurn's read of the lock's keys (etcd's revision moved after Enqueue)", func() bool {
		return sent.get(rangeMethod) == ranges+1
	})
	noTurnYet(t, ch, "the holder holds")
	if err := holder.Release(ctx, "moved", "a"); err != nil {
		t.Fatal(err)
	}
	lockmwtest.Eventually(t, 10*time.Second, "the holder's key deleted", func() bool { return len(entries(t, admin, "moved")) == 2 })
	if err := middle.Release(ctx, "moved", "m"); err != nil {
		t.Fatal(err)
	}
	got := turnWithin(t, ch)
	if !got.r.Acquired || got.r.Fence != uint64(es[2].rev) {
		t.Fatalf("WaitTurn after the keys below went: %+v; want the hand-over at fence %d (the waiter's key)", got.r, es[2].rev)
	}
	if n, m := sent.get(rangeMethod)-ranges, sent.get(txnMethod)-txns; n != 1 || m != 0 {
		t.Errorf("WaitTurn sent %d reads and %d transactions, want 1 read and none", n, m)
	}
}

// When nothing was written between Enqueue and WaitTurn, the watch starts
// at Enqueue's revision, and WaitTurn reads nothing: Enqueue's read is
// the state it starts from.
func TestWaitTurnReadsNothingWhenEtcdStayed(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := bg(t)
	holder := newQueue(t, srv.Client(t))
	waiter, sent := countedQueue(t, srv)
	mustHold(t, ctx, holder, "stayed", "a")
	r := mustQueue(t, ctx, waiter, "stayed", "w")
	ranges := sent.get(rangeMethod)
	before := watchers(t, srv)

	wctx, cancel := context.WithCancel(ctx)
	ch := waitTurnInBackground(wctx, waiter, "stayed", "w", r)
	lockmwtest.Eventually(t, 10*time.Second, "WaitTurn's watch", func() bool { return watchers(t, srv) == before+1 })
	// Nothing is written, so the watch's revision is Enqueue's, whenever
	// etcd reports it; ending the wait rather than releasing writes nothing.
	cancel()
	if got := <-ch; got.err == nil || got.r.Acquired {
		t.Fatalf("WaitTurn after its context ended: %+v, %v", got.r, got.err)
	}
	if n := sent.get(rangeMethod) - ranges; n != 0 {
		t.Errorf("WaitTurn sent %d reads, want none: etcd's revision had not moved since Enqueue", n)
	}
}

// A release between the waiter's Enqueue and its WaitTurn, which the watch
// cannot see, is found by WaitTurn's read: no key below the waiter's, so
// the lock is the waiter's at once, at its key's create revision.
func TestWaitTurnReadsTheReleaseBeforeItsWatch(t *testing.T) {
	srv := etcdtest.Start(t)
	admin := srv.Client(t)
	ctx := bg(t)
	holder := newQueue(t, srv.Client(t))
	waiter, sent := countedQueue(t, srv)
	mustHold(t, ctx, holder, "gone", "a")
	r := mustQueue(t, ctx, waiter, "gone", "w")
	if err := holder.Release(ctx, "gone", "a"); err != nil {
		t.Fatal(err)
	}
	es := entries(t, admin, "gone")
	if len(es) != 1 {
		t.Fatalf("etcd holds %v, want the waiter's key alone", es)
	}
	ranges, txns := sent.get(rangeMethod), sent.get(txnMethod)
	got := turnWithin(t, waitTurnInBackground(ctx, waiter, "gone", "w", r))
	if !got.r.Acquired || got.r.Fence != uint64(es[0].rev) || got.r.ValidFrom.IsZero() {
		t.Fatalf("WaitTurn after the holder released: %+v; want the hand-over at fence %d (the waiter's key)", got.r, es[0].rev)
	}
	if n, m := sent.get(rangeMethod)-ranges, sent.get(txnMethod)-txns; n != 1 || m != 0 {
		t.Errorf("WaitTurn sent %d reads and %d transactions, want 1 read and none", n, m)
	}
}

// A waiter whose own key went between its Enqueue and its WaitTurn (its
// etcd lease revoked) learns it from WaitTurn's read: the zero reply, to
// queue again, never the hand-over, though no key is below it either.
func TestWaitTurnReadsItsOwnKeyGone(t *testing.T) {
	srv := etcdtest.Start(t)
	admin := srv.Client(t)
	ctx := bg(t)
	holder := newQueue(t, srv.Client(t))
	waiter, sent := countedQueue(t, srv)
	mustHold(t, ctx, holder, "own", "a")
	r := mustQueue(t, ctx, waiter, "own", "w")
	es := entries(t, admin, "own")
	if len(es) != 2 || es[0].lease == es[1].lease {
		t.Fatalf("etcd holds %v, want the holder's and the waiter's keys, under two leases", es)
	}
	revoke(t, admin, es[1].lease)
	if err := holder.Release(ctx, "own", "a"); err != nil {
		t.Fatal(err)
	}
	ranges := sent.get(rangeMethod)
	got := turnWithin(t, waitTurnInBackground(ctx, waiter, "own", "w", r))
	if got.r != (store.Reply{}) {
		t.Fatalf("WaitTurn after its own key went: %+v; want the zero reply", got.r)
	}
	if n := sent.get(rangeMethod) - ranges; n != 1 {
		t.Errorf("WaitTurn sent %d reads, want 1", n)
	}
}

// Behind a queue longer than the store reads (64 keys), a waiter whose
// predecessor left between its Enqueue and its WaitTurn waits for the
// predecessor its read found, the next key down, and returns (to ask
// Enqueue again) when that one goes.
func TestWaitTurnReadsItsNewPredecessor(t *testing.T) {
	srv := etcdtest.Start(t)
	admin := srv.Client(t)
	ctx := bg(t)
	d := lockDir("long")
	const n = 70
	for i := range n {
		if _, err := admin.Put(ctx, d+"q"+strconv.Itoa(100+i), ""); err != nil {
			t.Fatal(err)
		}
	}
	waiter, sent := countedQueue(t, srv)
	r := mustQueue(t, ctx, waiter, "long", "w")
	if want := d + "q" + strconv.Itoa(100+n-1); r.Predecessor != want {
		t.Fatalf("Enqueue's predecessor %q, want %q", r.Predecessor, want)
	}
	if _, err := admin.Delete(ctx, r.Predecessor); err != nil {
		t.Fatal(err)
	}
	ranges := sent.get(rangeMethod)
	ch := waitTurnInBackground(ctx, waiter, "long", "w", r)
	lockmwtest.Eventually(t, 10*time.Second, "WaitTurn's read of the lock's keys (its predecessor left after Enqueue)", func() bool {
		return sent.get(rangeMethod) == ranges+1
	})
	noTurnYet(t, ch, "the predecessor its read found is there")
	if _, err := admin.Delete(ctx, d+"q100"); err != nil { // the holder
		t.Fatal(err)
	}
	if _, err := admin.Delete(ctx, d+"q"+strconv.Itoa(100+n-2)); err != nil {
		t.Fatal(err)
	}
	if got := turnWithin(t, ch); got.r != (store.Reply{}) {
		t.Fatalf("WaitTurn after its predecessor went, behind a long queue: %+v; want the zero reply (Enqueue again)", got.r)
	}
	if n := sent.get(rangeMethod) - ranges; n != 1 {
		t.Errorf("WaitTurn sent %d reads, want 1", n)
	}
}

// WaitFree, after a write elsewhere since the busy attempt, reads once
// whether the lock was free at its watch's revision: held, it waits for
// the release; released before the watch, it returns at once.
func TestWaitFreeReadsOnceWhenEtcdMovedOn(t *testing.T) {
	srv := etcdtest.Start(t)
	admin := srv.Client(t)
	ctx := bg(t)
	holder := newQueue(t, srv.Client(t))
	waiter, sent := countedQueue(t, srv)
	for _, releasedFirst := range []bool{false, true} {
		mustHold(t, ctx, holder, "free", "a")
		r, err := waiter.Acquire(ctx, "free", "w")
		if err != nil || r.Acquired {
			t.Fatalf("an attempt on the held lock: %+v, %v", r, err)
		}
		elsewhere(t, ctx, admin)
		if releasedFirst {
			if err := holder.Release(ctx, "free", "a"); err != nil {
				t.Fatal(err)
			}
		}
		ranges := sent.get(rangeMethod)
		ch := make(chan error, 1)
		go func() { ch <- waiter.WaitFree(ctx, "free", r.Seen) }()
		if !releasedFirst {
			lockmwtest.Eventually(t, 10*time.Second, "WaitFree's read of the lock's keys", func() bool {
				return sent.get(rangeMethod) == ranges+1
			})
			select {
			case err := <-ch:
				t.Fatalf("WaitFree returned %v while the lock is held", err)
			default:
			}
			if err := holder.Release(ctx, "free", "a"); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("released first %v: WaitFree: %v", releasedFirst, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("released first %v: WaitFree did not return within 10s of the release", releasedFirst)
		}
		if n := sent.get(rangeMethod) - ranges; n != 1 {
			t.Errorf("released first %v: WaitFree sent %d reads, want 1", releasedFirst, n)
		}
	}
}

// watchers is how many watches member m has (etcd's gauge).
func watchers(t testing.TB, m *etcdtest.Server) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, m.Endpoint()+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("reading %s's metrics: %v", m.Name(), err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "etcd_debugging_mvcc_watcher_total "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("etcd_debugging_mvcc_watcher_total %q: %v", v, err)
			}
			return int64(n)
		}
	}
	t.Fatalf("%s's metrics have no etcd_debugging_mvcc_watcher_total", m.Name())
	return 0
}
