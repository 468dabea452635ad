package zookeeper_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockmw/lockmw/internal/chaos"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/zookeeper"
	"github.com/lockmw/lockmw/lockmw/zookeeper/internal/zktest"
)

// TestChaos runs lockmw's seeded randomized safety checker
// (internal/chaos) against a three-server ZooKeeper ensemble:
//
//	go test -run '^TestChaos$' .                       # short: 30s
//	go test -run '^TestChaos$' . -args -chaos.seed=42 -chaos.duration=30m
//
// It runs without the race detector (make test and make chaos run it so):
// go-zookeeper v1.0.4 itself races on its last zxid between its receive
// loop and the watch re-registration after a reconnect (go-zookeeper/zk
// pull request 35, not merged), which the checker's faults reach within
// minutes, and a -race binary then fails on the client, not on lockmw.
// Every other test of this module runs with -race.
func TestChaos(t *testing.T) {
	if raceDetector {
		t.Skip("built with -race: go-zookeeper v1.0.4 races on its own last zxid after reconnects; make test runs TestChaos without -race")
	}
	chaos.RunStores(t, zkChaosStore)
}

// chaosSession is every chaos Locker's session timeout: it keeps the
// longest TTL drawn (2s ≤ 2/3 × 3.3s − a tick).
const chaosSession = 3300 * time.Millisecond

var zkChaosStore = chaos.Store{
	Name: "zookeeper", Fair: true, Start: startZkChaos,
	FaultNames: []string{"latency", "cut", "reset", "pause", "restart", "leader"},
	Timing: chaos.Timing{
		MaxTTL: 2 * time.Second,
		// A node of a Locker cut off from the ensemble lives until its
		// session expires.
		ExpirySlack:   chaosSession + time.Second,
		ShortDuration: 30 * time.Second,
	},
	Dir: "lockmw/zookeeper", Package: ".",
}

// startZkChaos starts the ensemble. Faults: latency, cut and reset on a
// proxied slot's link to one server or to all (the slot is cut off: its
// session expires when the cut outlasts it); pause one or two servers;
// restart one or all (ZooKeeper persists sessions and nodes); leader:
// kill the leader and restart it once another leads.
func startZkChaos(t *testing.T, slots int) *chaos.Deployment {
	e := zktest.StartEnsemble(t, 3)
	servers := e.Servers()
	adm := admin(t, e.Addrs()...)
	type link struct {
		slot, server int
		p            *zktest.Proxy
	}
	var links []link
	addrs := make([][]string, slots)
	for s := range slots {
		if s%2 == 1 {
			addrs[s] = e.Addrs()
			continue
		}
		for i, srv := range servers {
			p := zktest.StartProxy(t, srv)
			links = append(links, link{s, i, p})
			addrs[s] = append(addrs[s], p.Addr())
		}
	}
	pickLinks := func(env *chaos.FaultEnv) []*zktest.Proxy {
		l := links[env.Rand.IntN(len(links))]
		if env.Rand.IntN(3) == 0 {
			env.Note("every link of slot %d", l.slot)
			var ps []*zktest.Proxy
			for _, o := range links {
				if o.slot == l.slot {
					ps = append(ps, o.p)
				}
			}
			return ps
		}
		env.Note("link of slot %d to server %d", l.slot, l.server+1)
		return []*zktest.Proxy{l.p}
	}
	linkFault := func(name string, min, max time.Duration, inject func(p *zktest.Proxy, env *chaos.FaultEnv)) chaos.Fault {
		return chaos.Fault{Name: name, Run: func(env *chaos.FaultEnv) {
			ps := pickLinks(env)
			hold := env.Rand.Duration(min, max)
			env.Note("for %v", hold)
			for _, p := range ps {
				inject(p, env)
			}
			env.Sleep(hold)
			for _, p := range ps {
				p.Heal(env.T)
			}
		}}
	}
	d := &chaos.Deployment{
		NewLocker: func(slot int, opts ...lockmw.Option) (*lockmw.Locker, error) {
			cfg := config(addrs[slot]...)
			cfg.SessionTimeout = chaosSession
			cfg.ConnectTimeout = time.Second // a slot may be cut off: no wait
			return zookeeper.New(cfg, opts...)
		},
		Describe: func(slot int) string {
			if slot%2 == 0 {
				return "proxied"
			}
			return "direct"
		},
		Residue: func(ctx context.Context) ([]chaos.Residue, error) { return zkResidue(adm) },
	}
	d.Faults = []chaos.Fault{
		linkFault("latency", 200*time.Millisecond, 3*time.Second, func(p *zktest.Proxy, env *chaos.FaultEnv) {
			lat := env.Rand.Duration(5*time.Millisecond, 400*time.Millisecond)
			env.Note("+%v", lat)
			p.AddLatency(env.T, lat)
		}),
		// Up to longer than the session: the slot's session expires.
		linkFault("cut", 50*time.Millisecond, 6*time.Second, func(p *zktest.Proxy, env *chaos.FaultEnv) { p.Cut(env.T) }),
		linkFault("reset", 10*time.Millisecond, 500*time.Millisecond, func(p *zktest.Proxy, env *chaos.FaultEnv) { p.ResetConnections(env.T) }),
		{Name: "pause", Run: func(env *chaos.FaultEnv) {
			k := 1 + env.Rand.IntN(2)
			first := env.Rand.IntN(len(servers))
			hold := env.Rand.Duration(20*time.Millisecond, 3*time.Second)
			env.Note("SIGSTOP %d server(s) from %d for %v", k, first+1, hold)
			for i := range k {
				servers[(first+i)%len(servers)].Pause(env.T)
			}
			env.Sleep(hold)
			for i := range k {
				servers[(first+i)%len(servers)].Resume(env.T)
			}
		}},
		{Name: "restart", Weight: 2, Exclusive: true, Run: func(env *chaos.FaultEnv) {
			down := env.Rand.Duration(0, 3*time.Second)
			victims := []*zktest.Server{servers[env.Rand.IntN(len(servers))]}
			if env.Rand.IntN(4) == 0 {
				victims = servers
			}
			env.Note("SIGKILL %d server(s), down for %v", len(victims), down)
			for _, s := range victims {
				s.Kill(env.T)
			}
			time.Sleep(down) // not cut short: the servers must run for the checks after
			for _, s := range victims {
				s.Restart(env.T, false)
			}
			e.Leader(env.T)
		}},
		{Name: "leader", Weight: 2, Exclusive: true, Run: func(env *chaos.FaultEnv) {
			old := e.Leader(env.T)
			env.Note("SIGKILL the leader %s", old.Addr())
			old.Kill(env.T)
			e.Leader(env.T)
			old.Restart(env.T, true)
		}},
	}
	return d
}

// zkResidue lists lockmw's lock parents at the root and their children;
// each goes within the session timeout at most.
func zkResidue(adm *zk.Conn) ([]chaos.Residue, error) {
	top, _, err := adm.Children("/")
	if err != nil {
		return nil, err
	}
	var out []chaos.Residue
	for _, p := range top {
		if !strings.HasPrefix(p, lockmw.DefaultPrefix) {
			continue
		}
		children, _, err := adm.Children("/" + p)
		if err == zk.ErrNoNode {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, chaos.Residue{What: "lock parent /" + p, Lock: true, TTL: chaosSession})
		for _, c := range children {
			out = append(out, chaos.Residue{What: "lock node /" + p + "/" + c, Lock: true, TTL: chaosSession})
		}
	}
	return out, nil
}
