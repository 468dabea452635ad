package lockmw_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/chaos"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// The Redis stores the chaos checker (internal/testkit/chaos, run by
// chaos_test.go) runs against. A store starts a deployment: the storage
// processes, the clients of each Locker slot (some through a toxiproxy proxy,
// so that their links can be slowed or cut), the faults it can inject and a way
// to list what it still holds after the run.

// chaosStores are the stores TestChaos runs against.
var chaosStores = []chaos.Store{
	{
		Name: "redis", Fair: true, Start: startRedisChaos,
		FaultNames: []string{"latency", "cut", "reset", "pause", "scriptflush", "killpubsub", "restart", "counterdel"},
		Package:    "./lockmw/",
	},
	{
		Name: "redlock", Fair: false, Start: startRedlockChaos,
		FaultNames: []string{"latency", "cut", "reset", "pause", "scriptflush", "restart", "counterdel"},
		Package:    "./lockmw/",
	},
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
// starts it again, empty. Fences start over after it (see
// chaos.FaultEnv.DataLoss).
func startRedisChaos(t *testing.T, slots int) *chaos.Deployment {
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
	pickProxy := func(env *chaos.FaultEnv) []*redistest.Proxy {
		i := env.Rand.IntN(len(proxies))
		env.Note("link of slot %d", proxySlot[i])
		return proxies[i : i+1]
	}
	d := &chaos.Deployment{
		NewLocker: func(slot int, opts ...lockmw.Option) (*lockmw.Locker, error) {
			return lockmw.New(clients[slot], append(opts, chaosRetention)...)
		},
		Describe: describeSlot,
		Residue: func(ctx context.Context) ([]chaos.Residue, error) {
			return redisResidue(ctx, admin, "", true)
		},
	}
	d.Faults = []chaos.Fault{
		// Slow replies, pub/sub messages (releases, Fair grants) included.
		chaos.LinkFault("latency", 200*time.Millisecond, 2*time.Second, pickProxy),
		chaos.LinkFault("cut", 50*time.Millisecond, 2*time.Second, pickProxy),
		chaos.LinkFault("reset", 10*time.Millisecond, 500*time.Millisecond, pickProxy),
		{Name: "pause", Run: func(env *chaos.FaultEnv) {
			hold := env.Rand.Duration(20*time.Millisecond, 1500*time.Millisecond)
			env.Note("SIGSTOP for %v", hold)
			srv.Pause(env.T)
			env.Sleep(hold)
			srv.Resume(env.T)
		}},
		{Name: "scriptflush", Run: func(env *chaos.FaultEnv) {
			if err := admin.ScriptFlush(context.Background()).Err(); err != nil {
				env.Note("SCRIPT FLUSH: %v", err)
			}
		}},
		{Name: "counterdel", Run: func(env *chaos.FaultEnv) {
			env.Note("%d fence counters deleted", deleteCounters(env, admin))
		}},
		{Name: "killpubsub", Run: func(env *chaos.FaultEnv) {
			// Drops every subscription connection: releases and Fair grants
			// published until the Lockers resubscribe are lost.
			n, err := admin.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Result()
			env.Note("CLIENT KILL TYPE pubsub: %d killed, err %v", n, err)
		}},
		{Name: "restart", Weight: 1, Exclusive: true, Run: func(env *chaos.FaultEnv) {
			down := env.MaxTTL + time.Second
			env.Note("down for %v", down)
			srv.Kill(env.T)
			time.Sleep(down) // not cut short: see the restart rule above
			env.AllEnded("redis-server down for longer than the longest TTL")
			env.DataLoss(true)
			srv.Restart(env.T)
			env.DataLoss(false)
		}},
	}
	return d
}

// startRedlockChaos starts the "redlock" store: 3 masters,
// lockmw.NewRedlock. A master restarts only after staying down for the
// longest lease TTL plus a margin (the restart delay Redlock needs: a lease
// it granted before has expired everywhere). Its fence counters are gone,
// so fences are not compared across the restart (see dataLoss).
func startRedlockChaos(t *testing.T, slots int) *chaos.Deployment {
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
	pickLinks := func(env *chaos.FaultEnv) []*redistest.Proxy {
		l := links[env.Rand.IntN(len(links))]
		if env.Rand.IntN(3) == 0 {
			env.Note("every proxied link to master %d", l.master)
			var ps []*redistest.Proxy
			for _, o := range links {
				if o.master == l.master {
					ps = append(ps, o.p)
				}
			}
			return ps
		}
		env.Note("link of slot %d to master %d", l.slot, l.master)
		return []*redistest.Proxy{l.p}
	}
	d := &chaos.Deployment{
		NewLocker: func(slot int, opts ...lockmw.Option) (*lockmw.Locker, error) {
			return lockmw.NewRedlock(clients[slot], append(opts, chaosRetention)...)
		},
		Describe: describeSlot,
		Residue: func(ctx context.Context) ([]chaos.Residue, error) {
			var all []chaos.Residue
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
	d.Faults = []chaos.Fault{
		chaos.LinkFault("latency", 200*time.Millisecond, 2*time.Second, pickLinks),
		chaos.LinkFault("cut", 50*time.Millisecond, 2*time.Second, pickLinks),
		chaos.LinkFault("reset", 10*time.Millisecond, 500*time.Millisecond, pickLinks),
		{Name: "pause", Run: func(env *chaos.FaultEnv) {
			// One master (a quorum stays) or two (none does).
			k := 1 + env.Rand.IntN(2)
			first := env.Rand.IntN(n)
			hold := env.Rand.Duration(20*time.Millisecond, 1500*time.Millisecond)
			env.Note("SIGSTOP %d master(s) from %d for %v", k, first, hold)
			for i := range k {
				masters[(first+i)%n].Pause(env.T)
			}
			env.Sleep(hold)
			for i := range k {
				masters[(first+i)%n].Resume(env.T)
			}
		}},
		{Name: "scriptflush", Run: func(env *chaos.FaultEnv) {
			for _, a := range admins {
				if err := a.ScriptFlush(context.Background()).Err(); err != nil {
					env.Note("SCRIPT FLUSH: %v", err)
				}
			}
		}},
		{Name: "counterdel", Run: func(env *chaos.FaultEnv) {
			// On one master, a majority or all of them.
			k := 1 + env.Rand.IntN(n)
			first := env.Rand.IntN(n)
			for i := range k {
				m := (first + i) % n
				env.Note("master %d: %d fence counters deleted", m, deleteCounters(env, admins[m]))
			}
		}},
		{Name: "restart", Weight: 1, Exclusive: true, Run: func(env *chaos.FaultEnv) {
			m := env.Rand.IntN(n)
			down := env.MaxTTL + time.Second
			env.Note("master %d down for %v", m, down)
			masters[m].Kill(env.T)
			time.Sleep(down) // not cut short: the restart delay
			env.DataLoss(true)
			masters[m].Restart(env.T)
			env.DataLoss(false)
		}},
	}
	return d
}

// chaosRetention is the retention of the checker's Lockers: above the
// longest lease TTL (2s), so that queued waiters keep their queue, and
// short enough that counters of keys idle during faults expire and are
// seeded again during the run.
var chaosRetention = lockmw.WithRetention(3 * time.Second)

// deleteCounters deletes each fence counter on c with probability 1/2 (the
// "counterdel" fault: a counter evicted or deleted by hand) and returns how
// many it deleted. Fences must keep rising across it.
func deleteCounters(env *chaos.FaultEnv, c *redis.Client) int {
	ctx := context.Background()
	var keys []string
	iter := c.Scan(ctx, 0, lockmw.DefaultPrefix+"*:fence", 1000).Iterator()
	for iter.Next(ctx) {
		if env.Rand.IntN(2) == 0 {
			keys = append(keys, iter.Val())
		}
	}
	if err := iter.Err(); err != nil {
		env.Note("SCAN: %v", err)
	}
	if len(keys) == 0 {
		return 0
	}
	n, err := c.Del(ctx, keys...).Result()
	if err != nil {
		env.Note("DEL: %v", err)
	}
	return int(n)
}

// redisResidue lists the lock keys, fair queues, fence counters without an
// expiry and (with channels) subscribed channels that one Redis holds under
// lockmw's default prefix.
func redisResidue(ctx context.Context, c *redis.Client, label string, channels bool) ([]chaos.Residue, error) {
	var out []chaos.Residue
	iter := c.Scan(ctx, 0, lockmw.DefaultPrefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		switch {
		case strings.HasSuffix(k, ":fence"):
			// Counters expire with the retention; every write keeps or
			// refreshes their expiry.
			if pttl, err := c.PTTL(ctx, k).Result(); err == nil && pttl == -1 {
				out = append(out, chaos.Residue{What: label + "fence counter without expiry " + k})
			}
		case strings.HasSuffix(k, ":q"):
			n, _ := c.LLen(ctx, k).Result()
			out = append(out, chaos.Residue{What: fmt.Sprintf("%sfair queue %s (%d entries)", label, k, n), Queue: true})
		default:
			pttl, err := c.PTTL(ctx, k).Result()
			if err != nil {
				return nil, err
			}
			if pttl == -2 { // gone since SCAN (go-redis returns PTTL's -2 and -1 as is)
				continue
			}
			out = append(out, chaos.Residue{What: label + "lock key " + k, Lock: true, TTL: pttl})
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
			out = append(out, chaos.Residue{What: label + "subscribed channel " + ch})
		}
	}
	return out, nil
}
