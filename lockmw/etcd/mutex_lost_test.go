package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd/internal/etcdtest"
)

// A holder whose requests stop reaching etcd, while replies to the
// requests etcd did get come back slowly (1.5 s), loses its lock when etcd
// expires its lease, a TTL after the last renewal arrived. lockmw's lease
// context ends before that (its deadline counts from when the renewal was
// sent), so it ends before another Locker acquires. concurrency.Mutex's
// Session dates its deadline from the last keepalive reply, so its Done()
// is still open when another Mutex has acquired the lock: the holder is
// not told in time.
//
// lockmw's side is checked on every attempt. The Mutex's side depends on
// etcd expiring the lease promptly, which a loaded machine can delay (a
// single member may even hold an election) past the Session's own late
// deadline; it must show in one of three attempts.
func TestLostNoticedBeforeOthersUnlikeMutex(t *testing.T) {
	for attempt := 1; ; attempt++ {
		if lostNoticedBeforeOthers(t, attempt) {
			return
		}
		if attempt == 3 {
			t.Fatal("concurrency.Mutex's Session reported the loss before another Mutex acquired, in 3 attempts: the trap this test shows is gone")
		}
	}
}

// lostNoticedBeforeOthers runs the scenario once on a fresh etcd member,
// failing t if lockmw's lease context was live when another Locker
// acquired; it reports whether the first Session was still live when
// another Mutex acquired.
func lostNoticedBeforeOthers(t *testing.T, attempt int) bool {
	srv := etcdtest.Start(t)
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(api, "mutex-lost", "127.0.0.1:0", srv.Addr())
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	toxic := func(name, stream, kind, attrs string) {
		t.Helper()
		spec := fmt.Sprintf(`{"name": %q, "type": %q, "stream": %q, "toxicity": 1, "attributes": %s}`, name, kind, stream, attrs)
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
			t.Fatal(err)
		}
	}
	viaProxy := func(c *clientv3.Config) { c.Endpoints = []string{p.Listen} }
	const ttl = 3 * time.Second
	ctx := bg(t)

	holder := newLocker(t, srv.Client(t, viaProxy), lockmw.WithTTL(ttl))
	lease, err := holder.Acquire(ctx, "lost")
	if err != nil {
		t.Fatal(err)
	}
	session, err := concurrency.NewSession(srv.Client(t, viaProxy), concurrency.WithTTL(int(ttl/time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	if err := concurrency.NewMutex(session, "/mutex/lost").Lock(ctx); err != nil {
		t.Fatal(err)
	}

	toxic("slow-replies", "downstream", "latency", `{"latency": 1500}`)
	// Both keep their locks alive on their own schedules (a third of the
	// TTL), which nothing outside shows: a whole TTL lets each renew at
	// least once with the slow replies.
	time.Sleep(ttl)
	if err := lease.Context().Err(); err != nil {
		t.Fatalf("slow replies alone ended the lease: %v", context.Cause(lease.Context()))
	}
	toxic("no-requests", "upstream", "timeout", `{"timeout": 0}`)

	// Others, with a direct link, wait for the locks.
	other := newLocker(t, srv.Client(t), lockmw.WithTTL(ttl))
	direct, err := concurrency.NewSession(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	mutexGot := make(chan bool, 1) // whether the first Session was still live then
	go func() {
		if err := concurrency.NewMutex(direct, "/mutex/lost").Lock(ctx); err != nil {
			t.Error(err)
			mutexGot <- false
			return
		}
		select {
		case <-session.Done():
			mutexGot <- false
		default:
			mutexGot <- true
		}
	}()
	next, err := other.Acquire(ctx, "lost")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Context().Done():
	default:
		t.Fatal("another Locker acquired the lock while the cut-off holder's lease context was live")
	}
	if cause := context.Cause(lease.Context()); !errors.Is(cause, lockmw.ErrLost) {
		t.Fatalf("cause %v, want ErrLost", cause)
	}
	_ = next.Release(ctx)
	if stillLive := <-mutexGot; !stillLive {
		t.Logf("attempt %d: concurrency.Mutex's Session reported the loss before another Mutex acquired", attempt)
		return false
	}
	t.Logf("attempt %d: concurrency.Mutex: another Mutex acquired the lock while the first holder's Session.Done() was still open", attempt)
	return true
}
