package zookeeper_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockmw/lockmw/internal/testkit/chaos"
	"github.com/lockmw/lockmw/internal/testkit/zktest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/zookeeper"
)

// TestChaos runs lockmw's seeded randomized safety checker
// (internal/testkit/chaos) against a three-server ZooKeeper ensemble:
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
	var links []chaos.Link
	addrs := make([][]string, slots)
	for s := range slots {
		if !chaos.Proxied(s) {
			addrs[s] = e.Addrs()
			continue
		}
		for i, srv := range servers {
			p := zktest.StartProxy(t, srv)
			links = append(links, chaos.Link{Slot: s, Server: "server " + strconv.Itoa(i+1), Proxy: p})
			addrs[s] = append(addrs[s], p.Addr())
		}
	}
	pickLinks := chaos.PickSlotLinks(links)
	var names []string
	for i := range servers {
		names = append(names, "server "+strconv.Itoa(i+1))
	}
	d := &chaos.Deployment{
		NewLocker: func(slot int, opts ...lockmw.Option) (*lockmw.Locker, error) {
			cfg := config(addrs[slot]...)
			cfg.SessionTimeout = chaosSession
			cfg.ConnectTimeout = time.Second // a slot may be cut off: no wait
			return zookeeper.New(cfg, opts...)
		},
		Describe: chaos.DescribeSlot,
		Residue:  func(ctx context.Context) ([]chaos.Residue, error) { return zkResidue(adm) },
	}
	d.Faults = []chaos.Fault{
		chaos.LinkFault("latency", 200*time.Millisecond, 3*time.Second, pickLinks),
		// Up to longer than the session: the slot's session expires.
		chaos.LinkFault("cut", 50*time.Millisecond, 6*time.Second, pickLinks),
		chaos.LinkFault("reset", 10*time.Millisecond, 500*time.Millisecond, pickLinks),
		chaos.PauseMembers(servers, names),
		chaos.RestartMembers(servers, names, func(env *chaos.FaultEnv, victims []*zktest.Server) {
			for _, s := range victims {
				s.Restart(env.T, false)
			}
			e.Leader(env.T)
		}),
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
