package lockmw_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// The stores the chaos checker (chaos_test.go) runs against. A store starts
// a deployment: the storage processes, the clients of each Locker slot
// (some through a toxiproxy proxy, so that their links can be slowed or
// cut), the faults it can inject and a way to list what it still holds
// after the run. Another store (etcd, ZooKeeper) is one more entry in
// chaosStores; the checker core does not change.

// chaosStore is one kind of storage the checker runs against.
type chaosStore struct {
	name string
	// fair reports whether the store supports lockmw.Fair().
	fair bool
	// start starts a deployment for slots Locker slots.
	start func(t *testing.T, slots int) *chaosDeployment
}

// chaosDeployment is a running store, owned by one test.
type chaosDeployment struct {
	// newLocker returns a new Locker for slot (on that slot's own
	// client(s), which outlive it): called at the start and whenever the
	// checker closes a slot's Locker.
	newLocker func(slot int, opts ...lockmw.Option) (*lockmw.Locker, error)
	// describe names slot's link, e.g. "direct" or "proxied".
	describe func(slot int) string
	// faults are what the checker's fault schedule draws from.
	faults []chaosFault
	// residue lists what the store still holds for lockmw after the run:
	// lock keys (with their remaining TTL), fair queues and subscribed
	// channels. Fence counters are not residue (they never expire).
	residue func(ctx context.Context) ([]chaosResidue, error)
}

// chaosResidue is one thing a store still holds.
type chaosResidue struct {
	what string
	// lock is set for a lock key, with pttl its remaining TTL (negative:
	// no expiry).
	lock bool
	pttl time.Duration
	// queue is set for a fair queue.
	queue bool
}

func (r chaosResidue) String() string {
	if r.lock {
		return fmt.Sprintf("%s (PTTL %v)", r.what, r.pttl)
	}
	return r.what
}

// chaosFault is one kind of fault. run injects it with parameters drawn
// from env.rng, waits (env.sleep), heals it and returns; the checker
// records when each began and ended. Faults of two schedules may overlap
// (one healing a proxy heals the other's toxics on it too, which only
// shortens them), except exclusive ones.
type chaosFault struct {
	name string
	// weight is how often the fault is drawn relative to others (0: 4).
	weight int
	// exclusive faults run alone; others may overlap (the checker runs
	// chaosFaultLoops schedules at once).
	exclusive bool
	run       func(env *chaosFaultEnv)
}

// chaosFaultEnv is what a fault gets from the checker.
type chaosFaultEnv struct {
	t      testing.TB // fails softly: see softTB
	rng    chaosRand
	maxTTL time.Duration
	// sleep waits d, or less when the run is ending; it reports whether
	// the run goes on.
	sleep func(d time.Duration) bool
	// note adds detail to the fault's history entry.
	note func(format string, args ...any)
	// dataLoss brackets a restart that loses stored data: the fence
	// counters start over, so fences are compared only between leases
	// acquired entirely before or entirely after it.
	dataLoss func(begin bool)
	// allEnded reports, as a violation, every lease whose context is still
	// live: called when the store has been unreachable long enough for
	// every lease's validity to be over.
	allEnded func(why string)
}

// softTB turns the Fatalf of redistest helpers called from a fault
// goroutine into Errorf (FailNow must only be called from the test
// goroutine).
type softTB struct{ testing.TB }

func (s softTB) Fatalf(format string, args ...any) { s.Errorf(format, args...) }
func (s softTB) Fatal(args ...any)                 { s.Error(args...) }

// chaosStores are the stores TestChaos runs against.
var chaosStores = []chaosStore{
	{name: "redis", fair: true, start: startRedisChaos},
	{name: "redlock", fair: false, start: startRedlockChaos},
}

// chaosClient returns a client to addr that gives up quickly (see
// fastFailing), closed at cleanup.
func chaosClient(t testing.TB, addr string) *redis.Client {
	o := &redis.Options{Addr: addr}
	fastFailing(o)
	dialOnce(o)
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// proxiedSlot reports whether slot's links go through a proxy: every other
// slot does, the rest talk to Redis directly.
func proxiedSlot(slot int) bool { return slot%2 == 0 }

func describeSlot(slot int) string {
	if proxiedSlot(slot) {
		return "proxied"
	}
	return "direct"
}

// startRedisChaos starts the "redis" store: one redis-server, lockmw.New.
//
// Restart rule. A restart of a single Redis without persistence forgets
// every lock, so a lease still valid across it would share the lock with
// whoever takes it next. The restart fault therefore kills the server,
// keeps it down for the longest lease TTL plus a margin (every lease's
// validity deadline, counted from its last confirmed renewal, has passed:
// the checker asserts that every lease context has ended), and only then
// starts it again, empty. Fences start over after it (see dataLoss).
func startRedisChaos(t *testing.T, slots int) *chaosDeployment {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	clients := make([]*redis.Client, slots)
	var proxies []*redistest.Proxy
	var proxySlot []int
	for i := range slots {
		addr := srv.Addr()
		if proxiedSlot(i) {
			p := redistest.StartProxy(t, srv.Addr())
			proxies = append(proxies, p)
			proxySlot = append(proxySlot, i)
			addr = p.Addr()
		}
		clients[i] = chaosClient(t, addr)
	}
	pickProxy := func(env *chaosFaultEnv) *redistest.Proxy {
		i := env.rng.IntN(len(proxies))
		env.note("link of slot %d", proxySlot[i])
		return proxies[i]
	}
	d := &chaosDeployment{
		newLocker: func(slot int, opts ...lockmw.Option) (*lockmw.Locker, error) {
			return lockmw.New(clients[slot], opts...)
		},
		describe: describeSlot,
		residue: func(ctx context.Context) ([]chaosResidue, error) {
			return redisResidue(ctx, admin, "", true)
		},
	}
	d.faults = []chaosFault{
		{name: "latency", run: func(env *chaosFaultEnv) {
			// Slow replies, pub/sub messages (releases, Fair grants) included.
			p := pickProxy(env)
			lat, hold := env.rng.Duration(5*time.Millisecond, 400*time.Millisecond), env.rng.Duration(200*time.Millisecond, 2*time.Second)
			env.note("+%v for %v", lat, hold)
			p.AddLatency(env.t, lat)
			env.sleep(hold)
			p.Heal(env.t)
		}},
		{name: "cut", run: func(env *chaosFaultEnv) {
			p := pickProxy(env)
			hold := env.rng.Duration(50*time.Millisecond, 2*time.Second)
			env.note("for %v", hold)
			p.Cut(env.t)
			env.sleep(hold)
			p.Heal(env.t)
		}},
		{name: "reset", run: func(env *chaosFaultEnv) {
			p := pickProxy(env)
			hold := env.rng.Duration(10*time.Millisecond, 500*time.Millisecond)
			env.note("for %v", hold)
			p.ResetConnections(env.t)
			env.sleep(hold)
			p.Heal(env.t)
		}},
		{name: "pause", run: func(env *chaosFaultEnv) {
			hold := env.rng.Duration(20*time.Millisecond, 1500*time.Millisecond)
			env.note("SIGSTOP for %v", hold)
			srv.Pause(env.t)
			env.sleep(hold)
			srv.Resume(env.t)
		}},
		{name: "scriptflush", run: func(env *chaosFaultEnv) {
			if err := admin.ScriptFlush(context.Background()).Err(); err != nil {
				env.note("SCRIPT FLUSH: %v", err)
			}
		}},
		{name: "killpubsub", run: func(env *chaosFaultEnv) {
			// Drops every subscription connection: releases and Fair grants
			// published until the Lockers resubscribe are lost.
			n, err := admin.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Result()
			env.note("CLIENT KILL TYPE pubsub: %d killed, err %v", n, err)
		}},
		{name: "restart", weight: 1, exclusive: true, run: func(env *chaosFaultEnv) {
			down := env.maxTTL + time.Second
			env.note("down for %v", down)
			srv.Kill(env.t)
			time.Sleep(down) // not cut short: see the restart rule above
			env.allEnded("redis-server down for longer than the longest TTL")
			env.dataLoss(true)
			srv.Restart(env.t)
			env.dataLoss(false)
		}},
	}
	return d
}

// startRedlockChaos starts the "redlock" store: 3 masters,
// lockmw.NewRedlock. A master restarts only after staying down for the
// longest lease TTL plus a margin (the restart delay Redlock needs: a lease
// it granted before has expired everywhere). Its fence counters are gone,
// so fences are not compared across the restart (see dataLoss).
func startRedlockChaos(t *testing.T, slots int) *chaosDeployment {
	const n = 3
	masters := redistest.StartN(t, n)
	admins := make([]*redis.Client, n)
	for i, m := range masters {
		admins[i] = m.Client(t)
	}
	type link struct {
		slot, master int
		p            *redistest.Proxy
	}
	var links []link
	clients := make([][]redis.UniversalClient, slots)
	for s := range slots {
		clients[s] = make([]redis.UniversalClient, n)
		for m, srv := range masters {
			addr := srv.Addr()
			if proxiedSlot(s) {
				p := redistest.StartProxy(t, srv.Addr())
				links = append(links, link{s, m, p})
				addr = p.Addr()
			}
			clients[s][m] = chaosClient(t, addr)
		}
	}
	// pickLinks returns the proxied links of one slot to one master, or
	// of every proxied slot to one master.
	pickLinks := func(env *chaosFaultEnv) []*redistest.Proxy {
		l := links[env.rng.IntN(len(links))]
		if env.rng.IntN(3) == 0 {
			env.note("every proxied link to master %d", l.master)
			var ps []*redistest.Proxy
			for _, o := range links {
				if o.master == l.master {
					ps = append(ps, o.p)
				}
			}
			return ps
		}
		env.note("link of slot %d to master %d", l.slot, l.master)
		return []*redistest.Proxy{l.p}
	}
	linkFault := func(name string, min, max time.Duration, inject func(p *redistest.Proxy, env *chaosFaultEnv)) chaosFault {
		return chaosFault{name: name, run: func(env *chaosFaultEnv) {
			ps := pickLinks(env)
			hold := env.rng.Duration(min, max)
			env.note("for %v", hold)
			for _, p := range ps {
				inject(p, env)
			}
			env.sleep(hold)
			for _, p := range ps {
				p.Heal(env.t)
			}
		}}
	}
	d := &chaosDeployment{
		newLocker: func(slot int, opts ...lockmw.Option) (*lockmw.Locker, error) {
			return lockmw.NewRedlock(clients[slot], opts...)
		},
		describe: describeSlot,
		residue: func(ctx context.Context) ([]chaosResidue, error) {
			var all []chaosResidue
			for i, a := range admins {
				r, err := redisResidue(ctx, a, fmt.Sprintf("master %d: ", i), false)
				if err != nil {
					return nil, err
				}
				all = append(all, r...)
			}
			return all, nil
		},
	}
	d.faults = []chaosFault{
		linkFault("latency", 200*time.Millisecond, 2*time.Second, func(p *redistest.Proxy, env *chaosFaultEnv) {
			lat := env.rng.Duration(5*time.Millisecond, 400*time.Millisecond)
			env.note("+%v", lat)
			p.AddLatency(env.t, lat)
		}),
		linkFault("cut", 50*time.Millisecond, 2*time.Second, func(p *redistest.Proxy, env *chaosFaultEnv) { p.Cut(env.t) }),
		linkFault("reset", 10*time.Millisecond, 500*time.Millisecond, func(p *redistest.Proxy, env *chaosFaultEnv) { p.ResetConnections(env.t) }),
		{name: "pause", run: func(env *chaosFaultEnv) {
			// One master (a quorum stays) or two (none does).
			k := 1 + env.rng.IntN(2)
			first := env.rng.IntN(n)
			hold := env.rng.Duration(20*time.Millisecond, 1500*time.Millisecond)
			env.note("SIGSTOP %d master(s) from %d for %v", k, first, hold)
			for i := range k {
				masters[(first+i)%n].Pause(env.t)
			}
			env.sleep(hold)
			for i := range k {
				masters[(first+i)%n].Resume(env.t)
			}
		}},
		{name: "scriptflush", run: func(env *chaosFaultEnv) {
			for _, a := range admins {
				if err := a.ScriptFlush(context.Background()).Err(); err != nil {
					env.note("SCRIPT FLUSH: %v", err)
				}
			}
		}},
		{name: "restart", weight: 1, exclusive: true, run: func(env *chaosFaultEnv) {
			m := env.rng.IntN(n)
			down := env.maxTTL + time.Second
			env.note("master %d down for %v", m, down)
			masters[m].Kill(env.t)
			time.Sleep(down) // not cut short: the restart delay
			env.dataLoss(true)
			masters[m].Restart(env.t)
			env.dataLoss(false)
		}},
	}
	return d
}

// redisResidue lists the lock keys, fair queues and (with channels)
// subscribed channels that one Redis holds under lockmw's default prefix.
func redisResidue(ctx context.Context, c *redis.Client, label string, channels bool) ([]chaosResidue, error) {
	var out []chaosResidue
	iter := c.Scan(ctx, 0, lockmw.DefaultPrefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		switch {
		case strings.HasSuffix(k, ":fence"):
		case strings.HasSuffix(k, ":q"):
			n, _ := c.LLen(ctx, k).Result()
			out = append(out, chaosResidue{what: fmt.Sprintf("%sfair queue %s (%d entries)", label, k, n), queue: true})
		default:
			pttl, err := c.PTTL(ctx, k).Result()
			if err != nil {
				return nil, err
			}
			if pttl == -2 { // gone since SCAN (go-redis returns PTTL's -2 and -1 as is)
				continue
			}
			out = append(out, chaosResidue{what: label + "lock key " + k, lock: true, pttl: pttl})
		}
	}
	if err := iter.Err(); err != nil {
		return nil, err
	}
	if channels {
		chans, err := c.PubSubChannels(ctx, "*").Result()
		if err != nil {
			return nil, err
		}
		for _, ch := range chans {
			out = append(out, chaosResidue{what: label + "subscribed channel " + ch})
		}
	}
	return out, nil
}
