package lockmw_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// TestDefaultHandsOverToOneWaiterAcrossLockers queues default-mode waiters
// of twelve Lockers (as twelve processes would) behind a holder of another
// one, and checks that each release wakes exactly one of them, the next in
// arrival order, with no attempt by anyone else: no herd across processes.
func TestDefaultHandsOverToOneWaiterAcrossLockers(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	const key, waiters = "default:order", 12

	// A long TTL keeps the waiters' fallback polls out of the way of the
	// counts below.
	holder := newLocker(t, srv, lockmw.WithTTL(time.Minute))
	first, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// Load the scripts, so that the hand-overs below run them by SHA.
	for _, opts := range [][]lockmw.AcquireOption{nil, {lockmw.Fair()}} {
		warm, err := holder.Acquire(ctx, "warm-up", opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := warm.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	got := make(chan handOver, waiters)
	for i := range waiters {
		l := newLocker(t, srv, lockmw.WithTTL(time.Minute))
		go func() {
			lease, err := l.Acquire(ctx, key)
			got <- handOver{i, lease, err}
		}()
		waitQueueLen(t, admin, key, int64(i+1)) // i lined up before i+1 starts
	}

	release := assertHandOversInOrder(t, first, got, waiters, func(i int) func() bool {
		scripts, sets := scriptCalls(t, srv), commandCalls(t, srv, "set")
		return func() bool {
			// The release: two scripts for the first holder (unlock.lua finds
			// waiters queued and leaves the lock to release.lua), one for the
			// holders that came through the queue. A herd would show here as
			// up to 11 more attempts.
			wantScripts := int64(1)
			if i == 0 {
				wantScripts = 2
			}
			if calls := scriptCalls(t, srv) - scripts; calls != wantScripts {
				t.Fatalf("hand-over %d ran %d scripts, want %d (the release)", i, calls, wantScripts)
			}
			// One SET: the grant's, inside release.lua. Attempts would add theirs.
			if calls := commandCalls(t, srv, "set") - sets; calls != 1 {
				t.Fatalf("hand-over %d ran SET %d times, want 1 (the grant); the lock should go straight to the next waiter", i, calls)
			}
			return false
		}
	})
	if err := release.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := admin.Del(ctx, lockKey("warm-up")+":fence").Err(); err != nil {
		t.Fatal(err)
	}
	assertNoLockState(t, admin, key)
}

// TestReleaserLinesUpAgainWithOneCommand checks the loop of a worker that
// asks for a lock again right after handing it on: its Locker knows that
// others are still queued, so it joins the queue with one RPUSHX instead of
// an attempt that would find the lock held, in default mode as in Fair, and
// it is served after those queued before it.
func TestReleaserLinesUpAgainWithOneCommand(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []lockmw.AcquireOption
	}{{"default", nil}, {"fair", []lockmw.AcquireOption{lockmw.Fair()}}} {
		t.Run(mode.name, func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			ctx := context.Background()
			key := "again:" + mode.name
			const others = 3

			a := newLocker(t, srv, lockmw.WithTTL(time.Minute))
			held, err := a.Acquire(ctx, key, mode.opts...)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan *lockmw.Lease, others)
			for i := range others {
				l := newLocker(t, srv, lockmw.WithTTL(time.Minute))
				go func() {
					lease, err := l.Acquire(ctx, key, mode.opts...)
					if err != nil {
						t.Errorf("waiter %d: %v", i, err)
					}
					got <- lease
				}()
				waitQueueLen(t, admin, key, int64(i+1))
			}

			// Handed to the first waiter; the second is first in line (kept
			// in the lock's value), the third in the queue.
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			holder := <-got
			waitQueueLen(t, admin, key, 1)

			cmds := []string{"rpushx", "rpush", "set", "evalsha"}
			before := map[string]int64{}
			for _, c := range cmds {
				before[c] = commandCalls(t, srv, c)
			}
			again := make(chan *lockmw.Lease, 1)
			go func() {
				lease, err := a.Acquire(ctx, key, mode.opts...)
				if err != nil {
					t.Errorf("again: %v", err)
				}
				again <- lease
			}()
			waitQueueLen(t, admin, key, 2)
			want := map[string]int64{"rpushx": 1, "rpush": 0, "set": 0, "evalsha": 0}
			for _, c := range cmds {
				if n := commandCalls(t, srv, c) - before[c]; n != want[c] {
					t.Errorf("lining up again sent %s %d times, want %d", c, n, want[c])
				}
			}

			// Served in its turn: after the two queued before it.
			last := holder.Fence()
			for range others - 1 {
				if err := holder.Release(ctx); err != nil {
					t.Fatal(err)
				}
				holder = <-got
				select {
				case l := <-again:
					t.Fatalf("the releaser got the lock (fence %d) before a waiter queued ahead of it", l.Fence())
				default:
				}
				if holder.Fence() <= last {
					t.Fatalf("fence %d after %d", holder.Fence(), last)
				}
				last = holder.Fence()
			}
			if err := holder.Release(ctx); err != nil {
				t.Fatal(err)
			}
			var mine *lockmw.Lease
			select {
			case mine = <-again:
			case <-time.After(10 * time.Second):
				t.Fatal("the releaser never got the lock again")
			}
			if mine.Fence() <= last {
				t.Fatalf("fence %d after %d", mine.Fence(), last)
			}
			if err := mine.Release(ctx); err != nil {
				t.Fatal(err)
			}
			assertNoLockState(t, admin, key)
		})
	}
}

// TestRoomWaiterFollowsTheLockToAnotherLocker: a Locker's second caller
// waits in its room while its first caller holds the lock (the release
// would hand it over in-process), but a waiter of another Locker lined up
// first, so the release hands the lock there. The room's waiter must then
// line up too, not sleep until the holder's TTL would have run out, and get
// the lock after the other Locker's waiter.
func TestRoomWaiterFollowsTheLockToAnotherLocker(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	const key, ttl = "room:follows", 30 * time.Second

	a := newLocker(t, srv, lockmw.WithTTL(ttl))
	b := newLocker(t, srv, lockmw.WithTTL(ttl))
	held, err := a.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		who   string
		lease *lockmw.Lease
		err   error
		at    time.Time
	}
	got := make(chan result, 2)
	acquire := func(who string, l *lockmw.Locker) {
		lease, err := l.Acquire(ctx, key)
		got <- result{who, lease, err, time.Now()}
	}
	go acquire("b", b)
	waitQueueLen(t, admin, key, 1)
	go acquire("a2", a)
	// a2 waits in a's room, subscribed to the lock's release channel.
	eventually(t, 10*time.Second, func() error {
		n, err := admin.PubSubNumSub(ctx, lockKey(key)+":n").Result()
		if err != nil {
			return err
		}
		if n[lockKey(key)+":n"] != 1 {
			return fmt.Errorf("%d subscribers to the release channel, want 1", n[lockKey(key)+":n"])
		}
		return nil
	})

	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	first := <-got
	if first.err != nil || first.who != "b" {
		t.Fatalf("first after the release: %s (%v), want b, lined up first", first.who, first.err)
	}
	waitQueueLen(t, admin, key, 1) // a2 lined up behind b
	if err := first.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var second result
	select {
	case second = <-got:
	case <-time.After(ttl / 3):
		t.Fatalf("a2 did not get the lock within %v of b's release; it should not wait for the TTL (%v)", ttl/3, ttl)
	}
	if second.err != nil {
		t.Fatal(second.err)
	}
	if second.lease.Fence() <= first.lease.Fence() {
		t.Fatalf("fence %d after %d", second.lease.Fence(), first.lease.Fence())
	}
	t.Logf("a2 got the lock %v after the first release", second.at.Sub(released))
	if err := second.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	assertNoLockState(t, admin, key)
}

// TestHandOverRefreshesTheCounterBeforeTheScript checks the order of a
// release that hands the lock to a waiter of another Locker, on one server:
// the fence counter's PEXPIRE goes just before the release script, in the
// same pipeline, and not inside it (release.lua's ARGV[8]), so that Redis,
// which writes a turn's output last-queued first, writes the waiter's grant
// message before the releaser's reply (doc.go in redisstore, Performance).
// The hand-over sends no more commands than before: one PEXPIRE of the
// counter. Read with MONITOR, which tags a script's commands "lua".
func TestHandOverRefreshesTheCounterBeforeTheScript(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	const key = "handover:order"

	a, b, c := newLocker(t, srv), newLocker(t, srv), newLocker(t, srv)
	first, err := a.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lease *lockmw.Lease
		err   error
	}
	gotB, gotC := make(chan result, 1), make(chan result, 1)
	go func() {
		lease, err := b.Acquire(ctx, key)
		gotB <- result{lease, err}
	}()
	waitQueueLen(t, admin, key, 1)
	go func() {
		lease, err := c.Acquire(ctx, key)
		gotC <- result{lease, err}
	}()
	waitQueueLen(t, admin, key, 2)

	// a's release grants b the lock, and the grant names c as next.
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rb := <-gotB
	if rb.err != nil {
		t.Fatal(rb.err)
	}

	lines := monitor(t, srv.Addr())
	eventually(t, 5*time.Second, func() error { // MONITOR is on once it shows a command
		admin.Echo(ctx, "monitor-on")
		for {
			select {
			case l := <-lines:
				if strings.Contains(l, `"monitor-on"`) {
					return nil
				}
			default:
				return errors.New("MONITOR shows no command yet")
			}
		}
	})
	// b's release hands the lock to c.
	if err := rb.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rc := <-gotC
	if rc.err != nil {
		t.Fatal(rc.err)
	}
	if err := rc.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	admin.Echo(ctx, "monitor-end") // the end of what MONITOR shows of the hand-over
	var seen []string
	for done := false; !done; {
		select {
		case l := <-lines:
			if strings.Contains(l, `"monitor-end"`) {
				done = true
				break
			}
			seen = append(seen, l)
		case <-time.After(5 * time.Second):
			t.Fatalf("MONITOR did not show the closing ECHO; it showed:\n%s", strings.Join(seen, "\n"))
		}
	}

	// The first PEXPIRE of the counter, and the command after it.
	counter := `"` + fenceKey(key) + `"`
	for i, l := range seen {
		if !strings.Contains(strings.ToLower(l), `"pexpire" `+counter) {
			continue
		}
		if strings.Contains(l, "lua]") {
			t.Fatalf("b's release refreshed the counter inside the release script, after its grant message was queued behind the releaser's reply:\n%s", strings.Join(seen, "\n"))
		}
		if i+1 >= len(seen) || !strings.Contains(strings.ToLower(seen[i+1]), `"evalsha"`) || client(seen[i+1]) != client(l) {
			t.Fatalf("the counter's PEXPIRE is not followed by the release script from the same client:\n%s", strings.Join(seen, "\n"))
		}
		n := 0
		for _, l := range seen {
			if strings.Contains(strings.ToLower(l), `"pexpire" `+counter) {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("the hand-over sent %d PEXPIREs of the counter, want 1:\n%s", n, strings.Join(seen, "\n"))
		}
		return
	}
	t.Fatalf("no PEXPIRE of the counter in b's hand-over:\n%s", strings.Join(seen, "\n"))
}

// monitor sends MONITOR to the Redis at addr on a connection of its own
// and returns the lines it shows, until the test ends (go-redis's
// Monitor reads its connection while the pool may touch it: a data race).
func monitor(t *testing.T, addr string) <-chan string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := conn.Write([]byte("*1\r\n$7\r\nMONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1000)
	go func() {
		r := bufio.NewReader(conn)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return // the connection closed with the test
			}
			l = strings.TrimSuffix(strings.TrimPrefix(l, "+"), "\r\n")
			if l == "OK" {
				continue
			}
			select {
			case lines <- l:
			default: // nobody reads so many: the test has failed or ended
			}
		}
	}()
	return lines
}

// client is the client field of a MONITOR line ("[0 127.0.0.1:5000]", or
// "[0 lua]" for a script's commands).
func client(line string) string {
	i, j := strings.Index(line, "["), strings.Index(line, "]")
	if i < 0 || j < i {
		return ""
	}
	return line[i:j]
}
