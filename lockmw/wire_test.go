package lockmw_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// The calls one Locker makes for one lock reach Redis in the order they were
// made, also when they queue together behind busy round trips and the
// server answers NOSCRIPT (its script cache was flushed): the release that
// had to be resent in full still runs before the acquisition that queued
// behind it, which then finds the lock free.
func TestBatchKeepsOrderOfOneLockThroughNoScript(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv)
	admin := srv.Client(t)
	ctx := context.Background()

	lease, err := l.TryAcquire(ctx, "order")
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	// Load the scripts on other keys, then drop them: the release below
	// sends EVALSHA and gets NOSCRIPT.
	if warm, err := l.TryAcquire(ctx, "warm"); err != nil {
		t.Fatalf("TryAcquire warm: %v", err)
	} else if err := warm.Release(ctx); err != nil {
		t.Fatalf("Release warm: %v", err)
	}
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	// With the server stopped, four acquisitions of other locks fill the
	// Locker's round trips; the release and then the acquisition of
	// "order" queue behind them and leave together once the server runs.
	srv.Pause(t)
	paused := true
	defer func() {
		if paused {
			srv.Resume(t)
		}
	}()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s, err := l.TryAcquire(ctx, "filler:"+strconv.Itoa(i)); err == nil {
				_ = s.Release(ctx)
			}
		}()
	}
	time.Sleep(100 * time.Millisecond) // the fillers are on the wire
	released := make(chan error, 1)
	go func() { released <- lease.Release(ctx) }()
	time.Sleep(100 * time.Millisecond) // the release has queued
	acquired := make(chan error, 1)
	var second *lockmw.Lease
	go func() {
		var err error
		second, err = l.TryAcquire(ctx, "order")
		acquired <- err
	}()
	time.Sleep(100 * time.Millisecond) // the acquisition has queued behind it
	srv.Resume(t)
	paused = false

	if err := <-released; err != nil {
		t.Fatalf("Release: %v", err)
	}
	err = <-acquired
	wg.Wait()
	if errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatal("TryAcquire made after Release found the lock still held: it ran before the release, which was resent after NOSCRIPT")
	}
	if err != nil {
		t.Fatalf("TryAcquire after Release: %v", err)
	}
	if err := second.Release(ctx); err != nil {
		t.Fatalf("Release of the second lease: %v", err)
	}
}

// healOnRedial heals p on the first dial after a connection of the client
// was closed, once armed: a command that timed out closes its connection,
// so the client's retry of it goes over a new one, through the healed link.
type healOnRedial struct {
	t      *testing.T
	p      *redistest.Proxy
	armed  atomic.Bool
	closed atomic.Bool // a connection was closed since armed
	dials  atomic.Int32
}

func (h *healOnRedial) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h.closed.Load() && h.armed.CompareAndSwap(true, false) {
			h.dials.Add(1)
			h.p.Heal(h.t)
		}
		c, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &closeNotingConn{Conn: c, h: h}, nil
	}
}

type closeNotingConn struct {
	net.Conn
	h *healOnRedial
}

func (c *closeNotingConn) Close() error {
	if c.h.armed.Load() {
		c.h.closed.Store(true)
	}
	return c.Conn.Close()
}

func (h *healOnRedial) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *healOnRedial) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// retryingLocker returns a Locker on a client with go-redis' default
// retries (MaxRetries 3) that reaches srv through a proxy, with a 300ms
// ReadTimeout and a pool of one connection, and the hook that heals the
// proxy on the next dial once armed.
func retryingLocker(t *testing.T, srv *redistest.Server) (*lockmw.Locker, *redistest.Proxy, *healOnRedial) {
	t.Helper()
	p := redistest.StartProxy(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 300 * time.Millisecond, PoolSize: 1})
	t.Cleanup(func() { _ = client.Close() })
	h := &healOnRedial{t: t, p: p}
	client.AddHook(h)
	return newLockerOn(t, client), p, h
}

// A write whose reply is slower than the client's ReadTimeout has run in
// Redis all the same. go-redis retries such a command (MaxRetries), and
// the second run of a lockmw script or acquisition answers for the state
// the first one left: a release that succeeded reported as lost, an
// acquisition that succeeded reported as busy while its token holds the
// lock. lockmw's writes are never sent twice: the caller learns that
// Redis could not be told (ErrUnavailable), not something false.
func TestClientRetryDoesNotReplayWrites(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()

	t.Run("release", func(t *testing.T) {
		l, p, h := retryingLocker(t, srv)
		warm, err := l.TryAcquire(ctx, "replay:warm") // the release script is loaded
		if err != nil {
			t.Fatal(err)
		}
		if err := warm.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lease, err := l.TryAcquire(ctx, "replay:release", lockmw.WithoutWatchdog(), lockmw.WithLeaseTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		// The reply is held back past ReadTimeout; the retry's dial
		// heals the link.
		p.AddLatency(t, 2*time.Second)
		h.armed.Store(true)
		err = lease.Release(ctx)
		t.Logf("Release = %v (redials: %d)", err, h.dials.Load())
		if errors.Is(err, lockmw.ErrLost) {
			t.Fatalf("Release = %v: the client replayed the release script, whose first run had released the lock", err)
		}
		if err != nil && !errors.Is(err, lockmw.ErrUnavailable) {
			t.Fatalf("Release = %v, want nil or ErrUnavailable", err)
		}
		if n := admin.Exists(ctx, lockKey("replay:release")).Val(); n != 0 {
			t.Fatalf("lock key still exists after Release")
		}
	})

	t.Run("acquire", func(t *testing.T) {
		l, p, h := retryingLocker(t, srv)
		warm, err := l.TryAcquire(ctx, "replay:warm") // one connection in the pool
		if err != nil {
			t.Fatal(err)
		}
		if err := warm.Release(ctx); err != nil {
			t.Fatal(err)
		}
		p.AddLatency(t, 2*time.Second)
		h.armed.Store(true)
		lease, err := l.TryAcquire(ctx, "replay:acquire", lockmw.WithLeaseTTL(time.Minute))
		t.Logf("TryAcquire = %v (redials: %d)", err, h.dials.Load())
		if lease != nil {
			_ = lease.Release(ctx)
		}
		if errors.Is(err, lockmw.ErrNotAcquired) {
			held, _ := admin.Get(ctx, lockKey("replay:acquire")).Result()
			t.Fatalf("TryAcquire = %v, but the lock is held by %q, the token of this very attempt: the client replayed the acquisition", err, held)
		}
		if err != nil && !errors.Is(err, lockmw.ErrUnavailable) {
			t.Fatalf("TryAcquire = %v, want a lease or ErrUnavailable", err)
		}
		if err != nil {
			// An attempt that may have taken the lock gives it back, as
			// soon as Redis answers again: well before its one-minute TTL.
			eventually(t, 10*time.Second, func() error {
				if held, err := admin.Get(ctx, lockKey("replay:acquire")).Result(); err != redis.Nil {
					return fmt.Errorf("after TryAcquire failed, the lock is held by %q (GET: %v): the attempt's token was not given back", held, err)
				}
				return nil
			})
		}
	})
}

// tryAgains sums the TRYAGAIN replies the cluster's masters have sent.
func tryAgains(t *testing.T, c *redistest.Cluster) int {
	t.Helper()
	total := 0
	for _, m := range c.Masters() {
		stat := m.Info(t, "errorstats")["errorstat_TRYAGAIN"] // "count=N"
		if n, ok := strings.CutPrefix(stat, "count="); ok {
			v, err := strconv.Atoi(n)
			if err != nil {
				t.Fatalf("errorstat_TRYAGAIN %q", stat)
			}
			total += v
		}
	}
	return total
}

// While a lock's slot is half-migrated, its release is refused (TRYAGAIN)
// and retried, but never past the lease's validity deadline: once that has
// passed, the lease's token may be gone and the lock taken by another, and
// a waiter started early under that validity has stopped. Observed at
// Redis: once the lock key has expired there, no attempt of the release
// reaches the cluster any more.
func TestClusterReleaseRetriesEndWithinValidity(t *testing.T) {
	c := redistest.StartCluster(t)
	l := newLockerOn(t, c.Client(t))
	ctx := context.Background()
	const key = "patience"
	lease, err := l.TryAcquire(ctx, key, lockmw.WithLeaseTTL(500*time.Millisecond), lockmw.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	slot := c.Slot(t, lockKey(key))
	owner := c.Masters()[c.Owner(slot)].Client(t)
	m := c.BeginMigration(t, slot, (c.Owner(slot)+1)%3)
	defer m.Finish(t)

	released := make(chan error, 1)
	go func() { released <- lease.Release(ctx) }()
	// Wait until the lock has expired in Redis (the source answers ASK for
	// a key it no longer has).
	for {
		n, err := owner.Exists(ctx, lockKey(key)).Result()
		if err == nil && n == 1 {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if _, ask := redis.IsAskError(err); err != nil && !ask {
			t.Fatalf("EXISTS on the source: %v", err)
		}
		break
	}
	before := tryAgains(t, c)
	var rerr error
	select {
	case rerr = <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("Release still running after 10s")
	}
	if after := tryAgains(t, c); after != before {
		t.Errorf("the release was retried %d times after the lock had expired in Redis: past the lease's validity deadline", after-before)
	}
	if !errors.Is(rerr, lockmw.ErrUnavailable) {
		t.Errorf("Release through a stalled migration = %v, want ErrUnavailable", rerr)
	}
}

// A release that hands the lock early to a waiter of the same Locker keeps
// its place ahead of that waiter's own calls while the lock's slot is
// being moved: the transfer, refused with TRYAGAIN, is retried in its
// round trip, so the new holder's release, made meanwhile, runs after it.
// Retried from outside, the release could run first, find the old
// holder's token (ErrLost for a lease that was never lost) and leave the
// transfer to install a token nobody owns, holding the lock for a TTL.
func TestClusterEarlyHandOverKeepsOrderWhileSlotMoves(t *testing.T) {
	c := redistest.StartCluster(t)
	l := newLockerOn(t, c.Client(t))
	direct := c.Client(t)
	ctx := context.Background()
	for round := range 4 {
		key := "early-move:" + strconv.Itoa(round)
		// A lease that came by a transfer carries a reserved fence: its
		// release hands the lock over early.
		first, err := l.TryAcquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		acquire := func() chan *lockmw.Lease {
			ch := make(chan *lockmw.Lease, 1)
			go func() {
				s, err := l.Acquire(ctx, key, lockmw.WithWait(10*time.Second))
				if err != nil {
					t.Errorf("Acquire: %v", err)
				}
				ch <- s
			}()
			time.Sleep(50 * time.Millisecond) // waiting in the Locker's room
			return ch
		}
		next := acquire()
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		holder := <-next
		if holder == nil {
			t.FailNow()
		}
		next = acquire()

		slot := c.Slot(t, lockKey(key))
		m := c.BeginMigration(t, slot, (c.Owner(slot)+1)%3)
		released := make(chan error, 1)
		go func() { released <- holder.Release(ctx) }()
		early := <-next // started before the transfer got through
		if early == nil {
			t.FailNow()
		}
		releasedEarly := make(chan error, 1)
		go func() { releasedEarly <- early.Release(ctx) }()
		time.Sleep(20 * time.Millisecond) // both on their way
		m.Finish(t)

		if err := <-released; err != nil {
			t.Fatalf("round %d: Release of the holder: %v", round, err)
		}
		if err := <-releasedEarly; err != nil {
			t.Errorf("round %d: Release of the lease handed over early = %v, want nil: it ran before the transfer", round, err)
		}
		if v, err := direct.Get(ctx, lockKey(key)).Result(); err != redis.Nil {
			t.Fatalf("round %d: after both releases the lock is held (%q, %v): the transfer ran after the new holder's release", round, v, err)
		}
	}
}

// A lock handed early to a waiter of the same Locker (its release starts
// the waiter before Redis confirms the transfer) must reach the waiter only
// once the transfer has its place in the lock's lane: else the waiter's own
// release can reach Redis first, find the old holder's token (ErrLost for a
// lease that was never lost), and the transfer then installs a token
// nobody owns, holding the lock for a TTL. The race is narrow (the
// releasing goroutine, between waking the waiter and queueing the
// transfer), so it is run many times.
func TestEarlyHandOverWaiterCallsFollowTransfer(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv)
	direct := srv.Client(t)
	ctx := context.Background()
	const rounds = 400
	bad := 0
	for round := range rounds {
		key := "early-order:" + strconv.Itoa(round)
		first, err := l.TryAcquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		acquire := func() chan *lockmw.Lease {
			ch := make(chan *lockmw.Lease, 1)
			go func() {
				s, err := l.Acquire(ctx, key, lockmw.WithWait(10*time.Second))
				if err != nil {
					t.Errorf("Acquire: %v", err)
				}
				ch <- s
			}()
			time.Sleep(2 * time.Millisecond) // waiting in the Locker's room
			return ch
		}
		next := acquire()
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		holder := <-next // came by a transfer: its release hands over early
		if holder == nil {
			t.FailNow()
		}
		next = acquire()
		released := make(chan error, 1)
		go func() { released <- holder.Release(ctx) }()
		early := <-next
		if early == nil {
			t.FailNow()
		}
		earlyErr := early.Release(ctx)
		if err := <-released; err != nil {
			t.Fatalf("round %d: Release of the holder: %v", round, err)
		}
		held, getErr := direct.Get(ctx, lockKey(key)).Result()
		if earlyErr != nil || getErr != redis.Nil {
			bad++
			if bad == 1 {
				t.Errorf("round %d: the early holder's Release = %v, and the lock is then held by %q (GET: %v); want nil and a free lock: its release overtook the transfer", round, earlyErr, held, getErr)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d rounds went out of order", bad, rounds)
	}
}

// Under Redlock, too, the calls for one lock reach each master in order
// when the master has forgotten a script (restarted, SCRIPT FLUSH) that a
// call queued behind the first needs no resend for: the release, resent in
// full, runs before the acquisition queued behind it, which then finds
// the lock free.
func TestRedlockKeepsOrderOfOneLockThroughNoScript(t *testing.T) {
	masters := redistest.StartN(t, 3)
	clients := redlockClients(t, masters)
	l, err := lockmw.NewRedlock(clients)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()

	lease, err := l.TryAcquire(ctx, "order")
	if err != nil {
		t.Fatal(err)
	}
	// Drop the scripts, then load the acquire script only (a lock taken
	// and kept): the release below answers NOSCRIPT, the acquisition after
	// it does not.
	for _, c := range clients {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	other, err := l.TryAcquire(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Release(ctx) }()

	// With the masters stopped, an acquisition of another lock is on the
	// wire; the release and then the acquisition of "order" queue behind
	// it and leave together once the masters run.
	for _, m := range masters {
		m.Pause(t)
	}
	paused := true
	defer func() {
		if paused {
			for _, m := range masters {
				m.Resume(t)
			}
		}
	}()
	filled := make(chan struct{})
	go func() {
		defer close(filled)
		if s, err := l.TryAcquire(ctx, "filler"); err == nil {
			_ = s.Release(ctx)
		}
	}()
	time.Sleep(100 * time.Millisecond)
	released := make(chan error, 1)
	go func() { released <- lease.Release(ctx) }()
	time.Sleep(100 * time.Millisecond)
	acquired := make(chan error, 1)
	var second *lockmw.Lease
	go func() {
		var err error
		second, err = l.TryAcquire(ctx, "order")
		acquired <- err
	}()
	time.Sleep(100 * time.Millisecond)
	for _, m := range masters {
		m.Resume(t)
	}
	paused = false

	if err := <-released; err != nil {
		t.Fatalf("Release: %v", err)
	}
	err = <-acquired
	<-filled
	if errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatal("TryAcquire made after Release found the lock still held: it ran before the release, which was resent after NOSCRIPT")
	}
	if err != nil {
		t.Fatalf("TryAcquire after Release: %v", err)
	}
	if err := second.Release(ctx); err != nil {
		t.Fatalf("Release of the second lease: %v", err)
	}
}

// On a Cluster, the client retries a timed-out command twice over: the
// node's client (MaxRetries) and the cluster client's own loop
// (MaxRedirects). An acquisition script that ran but whose reply came too
// late is not sent again either way: the caller learns ErrUnavailable, not
// "busy" while its own token holds the lock, and the lock is given back.
func TestClusterClientRetryDoesNotReplayAcquire(t *testing.T) {
	c := redistest.StartCluster(t)
	ctx := context.Background()
	key := clusterKeys(t, c, 1)[0][0] // a lock on master 0
	p := redistest.StartProxy(t, c.Masters()[0].Addr())
	h := &healOnRedial{t: t, p: p}
	client := c.Client(t, func(o *redis.ClusterOptions) {
		o.ReadTimeout = 300 * time.Millisecond
		o.PoolSize = 1
		// Connections to master 0 go through the proxy.
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == c.Masters()[0].Addr() {
				addr = p.Addr()
			}
			if h.closed.Load() && h.armed.CompareAndSwap(true, false) {
				h.dials.Add(1)
				p.Heal(t)
			}
			var d net.Dialer
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &closeNotingConn{Conn: conn, h: h}, nil
		}
	})
	l := newLockerOn(t, client)
	warm, err := l.TryAcquire(ctx, key) // the acquire script is loaded, a connection open
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p.AddLatency(t, 2*time.Second)
	h.armed.Store(true)
	lease, err := l.TryAcquire(ctx, key, lockmw.WithLeaseTTL(time.Minute))
	t.Logf("TryAcquire = %v (redials: %d)", err, h.dials.Load())
	if lease != nil {
		_ = lease.Release(ctx)
	}
	direct := c.Masters()[0].Client(t)
	if errors.Is(err, lockmw.ErrNotAcquired) {
		held, _ := direct.Get(ctx, lockKey(key)).Result()
		t.Fatalf("TryAcquire = %v, but the lock is held by %q, the token of this very attempt: the client replayed the acquisition", err, held)
	}
	if err != nil && !errors.Is(err, lockmw.ErrUnavailable) {
		t.Fatalf("TryAcquire = %v, want a lease or ErrUnavailable", err)
	}
	if err != nil {
		// The Locker gives back what the attempt may hold as soon as Redis
		// answers again: well before its one-minute TTL.
		eventually(t, 10*time.Second, func() error {
			if held, err := direct.Get(ctx, lockKey(key)).Result(); err != redis.Nil {
				return fmt.Errorf("after TryAcquire failed, the lock is held by %q (GET: %v): the attempt's token was not given back", held, err)
			}
			return nil
		})
	}
}
