package zookeeper

import (
	"context"
	"errors"
	"io"
	"log"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockmw/lockmw/internal/testkit/zktest"
	"github.com/lockmw/lockmw/lockmw"
)

// The traps of go-zookeeper's zk.Lock and of a ZooKeeper lock written
// naively, each shown avoided by the store on a real server.

// testLocker returns a Locker on servers and its store, closed at cleanup.
func testLocker(t *testing.T, servers []string, opts ...lockmw.Option) (*lockmw.Locker, *zkStore) {
	t.Helper()
	cfg := Config{Servers: servers, TickTime: zktest.TickTime, ConnectTimeout: 20 * time.Second}
	l, s, err := newLocker(cfg, append([]lockmw.Option{lockmw.WithTTL(time.Second)}, opts...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, s
}

// adminConn is a plain go-zookeeper connection, closed at cleanup.
func adminConn(t *testing.T, addrs ...string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect(addrs, 30*time.Second, zk.WithLogger(log.New(io.Discard, "", 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	waitUntil(t, 20*time.Second, "admin session", func() bool { return c.State() == zk.StateHasSession })
	return c
}

func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// children lists p's children (nil when p does not exist).
func children(t *testing.T, c *zk.Conn, p string) []string {
	t.Helper()
	ch, _, err := c.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func parentOfKey(key string) string { return "/" + lockmw.DefaultPrefix + key }

// zk.Lock leaves its node when a call after the create fails, so everyone
// blocks until the session ends. Here the read after the create fails (an
// injected error; the lock is held, so that the create's answer does not
// show the node alone and the read is needed); the acquisition fails, and
// the node goes at once.
func TestNoOrphanNodeAfterFailedCall(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	adm := adminConn(t, srv.Addr())
	l, s := testLocker(t, []string{srv.Addr()})
	other, _ := testLocker(t, []string{srv.Addr()})
	var failed atomic.Bool
	s.hook = func(op, p string, err error) error {
		if op == "children" && strings.HasSuffix(p, ":orphan") && failed.CompareAndSwap(false, true) {
			return errors.New("injected: the read after the create failed")
		}
		return err
	}
	ctx := context.Background()
	held, err := other.TryAcquire(ctx, "orphan")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, "orphan"); !errors.Is(err, lockmw.ErrUnavailable) {
		t.Fatalf("TryAcquire with its read failing: %v, want ErrUnavailable", err)
	}
	if !failed.Load() {
		t.Fatal("the injected failure never ran")
	}
	waitUntil(t, 5*time.Second, "the failed acquisition's node deleted", func() bool {
		return len(children(t, adm, parentOfKey("orphan"))) == 1
	})
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lease, err := other.TryAcquire(ctx, "orphan")
	if err != nil {
		t.Fatalf("another Locker after the failed acquisition: %v", err)
	}
	_ = lease.Release(ctx)
}

// A create whose reply is lost (the connection drops after the server
// applied it) is found again by the token in the node's name, checked to
// be this session's: the acquisition succeeds with that one node.
func TestLostCreateReplyFoundAgain(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	adm := adminConn(t, srv.Addr())
	l, s := testLocker(t, []string{srv.Addr()})
	var lost atomic.Bool
	s.hook = func(op, p string, err error) error {
		if op == "create" && strings.Contains(p, ":lostreply/lock-") && err == nil && lost.CompareAndSwap(false, true) {
			return zk.ErrConnectionClosed // applied, but the reply is lost
		}
		return err
	}
	ctx := context.Background()
	lease, err := l.TryAcquire(ctx, "lostreply")
	if err != nil {
		t.Fatalf("TryAcquire whose create reply was lost: %v", err)
	}
	if !lost.Load() {
		t.Fatal("no create reply was lost")
	}
	nodes := children(t, adm, parentOfKey("lostreply"))
	if len(nodes) != 1 {
		t.Fatalf("nodes %q, want exactly the one created", nodes)
	}
	_, stat, err := adm.Exists(parentOfKey("lostreply") + "/" + nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	if lease.Fence() != uint64(stat.Czxid) {
		t.Errorf("fence %d, want the node's czxid %d", lease.Fence(), stat.Czxid)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "released", func() bool { return len(children(t, adm, parentOfKey("lostreply"))) == 0 })
}

// CURATOR-498: a node found by the token after a lost reply is taken only
// when its ephemeral owner is this session. Here a node carrying the token
// belongs to another session: the store deletes it and fails, and never
// holds the lock through it.
func TestFoundNodeOfAnotherSessionNotTaken(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	adm := adminConn(t, srv.Addr())
	l, s := testLocker(t, []string{srv.Addr()})
	parent := parentOfKey("curator498")
	var planted atomic.Bool
	s.hook = func(op, p string, err error) error {
		if op == "create" && strings.HasPrefix(p, parent+"/lock-") && err == nil && planted.CompareAndSwap(false, true) {
			// The store's own node vanishes and one carrying its token
			// appears, owned by another session: as if the create had
			// gone out on a later session. The foreign node comes first:
			// the parent is a container node, which the server deletes
			// once it is empty (every ContainerCheck), so deleting first
			// let the parent go before the create on a loaded machine.
			foreign, err := adm.Create(p, nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
			if err != nil {
				t.Errorf("planting the foreign node: %v", err)
			}
			for _, c := range children(t, adm, parent) {
				if parent+"/"+c != foreign {
					_ = adm.Delete(parent+"/"+c, -1)
				}
			}
			return zk.ErrConnectionClosed
		}
		return err
	}
	ctx := context.Background()
	if lease, err := l.TryAcquire(ctx, "curator498"); err == nil {
		t.Fatalf("acquired through another session's node (fence %d)", lease.Fence())
	}
	waitUntil(t, 5*time.Second, "the foreign node deleted", func() bool { return len(children(t, adm, parent)) == 0 })
}

// After an expiry, go-zookeeper opens a new session and sends requests it
// had queued on it. A create meant for the old session must create
// nothing in the new one: its Multi checks the old session's guard node,
// which the expiry deleted. The session's expiry is also seen by the event
// callback even though nobody reads go-zookeeper's event channel (full
// after six events: it drops the rest).
func TestNoCreateInNewSessionAfterExpiry(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	adm := adminConn(t, srv.Addr())
	proxy := zktest.StartProxy(t, srv)
	l, s := testLocker(t, []string{proxy.Addr()})
	ctx := context.Background()
	// Fill go-zookeeper's event channel: each reset is four events.
	for range 3 {
		proxy.ResetConnections(t)
		waitUntil(t, 20*time.Second, "disconnected", func() bool { return s.conn.State() != zk.StateHasSession })
		proxy.Heal(t)
		waitUntil(t, 20*time.Second, "reconnected", func() bool { return s.conn.State() == zk.StateHasSession })
	}
	lease, err := l.Acquire(ctx, "expiry")
	if err != nil {
		t.Fatal(err)
	}
	old := s.tr.now()
	guard := "/lockmw%session%" + strings.ToLower(strconvHex(old.id))
	if ok, _, err := adm.Exists(guard); err != nil || !ok {
		t.Fatalf("the session's guard node %s: exists %v, %v", guard, ok, err)
	}
	before := s.tr.expirations()
	proxy.Cut(t)
	waitUntil(t, 30*time.Second, "the session expired on the server", func() bool {
		ok, _, err := adm.Exists(guard)
		return err == nil && !ok
	})
	select {
	case <-lease.Context().Done():
	default:
		t.Fatal("the session expired on the server while the lease was live")
	}
	if !errors.Is(context.Cause(lease.Context()), lockmw.ErrLost) {
		t.Fatalf("lease ended with %v, want ErrLost", context.Cause(lease.Context()))
	}
	proxy.Heal(t)
	waitUntil(t, 30*time.Second, "a new session", func() bool { return s.tr.now().id != 0 && s.tr.now().id != old.id })
	if n := s.tr.expirations() - before; n != 1 {
		t.Fatalf("the store saw %d expirations of the cut session, want 1", n)
	}
	// A create of the old session, sent now on the new one.
	_, err = s.createIn(ctx, parentOfKey("stale"), "00000000000000000000000000000000", old)
	if !errors.Is(err, errSessionChanged) {
		t.Fatalf("create of the old session on the new one: %v, want errSessionChanged", err)
	}
	if nodes := children(t, adm, parentOfKey("stale")); len(nodes) != 0 {
		t.Fatalf("the old session's create made %q in the new session", nodes)
	}
	if nodes := children(t, adm, parentOfKey("expiry")); len(nodes) != 0 {
		t.Fatalf("the lost holding was created again: %q", nodes)
	}
	if err := lease.Release(ctx); !errors.Is(err, lockmw.ErrLost) {
		t.Fatalf("Release of the lost lease: %v, want ErrLost", err)
	}
	// The Locker goes on in its new session.
	next, err := l.TryAcquire(ctx, "expiry")
	if err != nil {
		t.Fatalf("TryAcquire in the new session: %v", err)
	}
	_ = next.Release(ctx)
}

func strconvHex(id int64) string {
	const digits = "0123456789abcdef"
	if id == 0 {
		return "0"
	}
	u := uint64(id)
	var b []byte
	for u > 0 {
		b = append(b, digits[u&15])
		u >>= 4
	}
	slices.Reverse(b)
	return string(b)
}

// Entries are ordered by a wrap-aware compare of the 32-bit sequence, never
// as strings or plain integers: across the wrap, "-2147483648" comes after
// "2147483647". Hand-named nodes on both sides of the wrap on a real server,
// with non-lock siblings the store ignores.
func TestSequenceWrapAndSiblings(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	adm := adminConn(t, srv.Addr())
	_, s := testLocker(t, []string{srv.Addr()})
	parent := parentOfKey("wrap")
	acl := zk.WorldACL(zk.PermAll)
	if _, err := adm.Create(parent, nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range children(t, adm, parent) {
			_ = adm.Delete(parent+"/"+c, -1)
		}
		_ = adm.Delete(parent, -1)
	})
	a, b := strings.Repeat("a", 32), strings.Repeat("b", 32)
	for _, name := range []string{"lock-" + a + "-2147483646", "lock-" + b + "-2147483647", "readme", "lock-x", "lock-" + a + "-notanumber"} {
		if _, err := adm.Create(parent+"/"+name, nil, 0, acl); err != nil {
			t.Fatal(err)
		}
	}
	// The store's own node, after the wrap.
	ctx := context.Background()
	st := s.tr.now()
	own := "lock-" + strings.Repeat("c", 32) + "--2147483648"
	if _, err := s.conn.Create(parent+"/"+own, nil, zk.FlagEphemeral, acl); err != nil {
		t.Fatal(err)
	}
	e := &entry{token: strings.Repeat("c", 32), parent: parent, name: own, sess: st}
	pos, err := s.position(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	if want := "lock-" + b + "-2147483647"; pos.pred != want {
		t.Fatalf("predecessor of %s: %q, want %q (string or plain integer order would make it first)", own, pos.pred, want)
	}
	// The unit-level order across the wrap, and siblings ignored.
	names := []string{"readme", "lock-" + a + "-2147483646", "lock-" + b + "-2147483647", own, "lock-" + strings.Repeat("d", 32) + "--2147483647"}
	first, _ := parseNode("lock-" + a + "-2147483646")
	if p, n := predecessor(names, first); p != "" || n != 0 {
		t.Errorf("the oldest node has predecessor %q, %d nodes before it", p, n)
	}
	last, _ := parseNode(names[4])
	if p, n := predecessor(names, last); p != own || n != 3 {
		t.Errorf("predecessor of %s: %q with %d nodes before it, want %q with 3", names[4], p, n, own)
	}
}

// Between an expiry and the next session, CheckTTL still judges TTLs by
// the timeout last granted (it once saw 0 and refused every TTL).
func TestCheckTTLBetweenSessions(t *testing.T) {
	s := newStore(Config{Servers: []string{"unused:1"}, TickTime: zktest.TickTime}, "/")
	s.conn = &zk.Conn{}
	s.tr.handshake(42, 3*time.Second, nil)
	s.tr.event(zk.Event{Type: zk.EventSession, State: zk.StateHasSession})
	s.tr.event(zk.Event{Type: zk.EventSession, State: zk.StateExpired})
	if st := s.tr.now(); st.id != 0 {
		t.Fatalf("session %x after the expiry, want none", st.id)
	}
	if err := s.CheckTTL(time.Second); err != nil {
		t.Fatalf("CheckTTL(1s) between sessions of 3s: %v", err)
	}
	if err := s.CheckTTL(3 * time.Second); !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Fatalf("CheckTTL(3s) between sessions of 3s: %v, want ErrInvalidOption", err)
	}
}
