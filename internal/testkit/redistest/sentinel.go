//go:build unix

package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/servertest"
)

// Sentinel timings written into every Sentinel's configuration: a master
// that does not answer for a second is subjectively down, and a failover
// that has not completed after 5 seconds is retried (by then, after twice
// that, 10 seconds).
const (
	sentinelDownAfter       = 1000 // ms, sentinel down-after-milliseconds
	sentinelFailoverTimeout = 5000 // ms, sentinel failover-timeout
	sentinelParallelSyncs   = 1    // sentinel parallel-syncs
)

// Sentinel is one Redis Sentinel process (redis-server CONF --sentinel)
// owned by a test, monitoring one master. Its address is fixed for its whole
// life. It has no Restart: Kill it and start another. All methods are safe
// for concurrent use.
type Sentinel struct {
	srv  *Server
	name string
}

// sentinelSpec is what a Sentinel's configuration file says.
type sentinelSpec struct {
	name   string
	master *Server
	quorum int
	// replicas is how many replicas the master had when the Sentinel was
	// started: the Sentinel must list at least that many before it counts
	// as watching (see waitWatching).
	replicas int
}

// StartSentinel starts a Sentinel on a free 127.0.0.1 port monitoring master
// under masterName, with the given quorum, and returns once it is watching:
// SENTINEL get-master-addr-by-name answers master's address, the Sentinel is
// connected to master (flags "master", no "disconnected") and it lists at
// least as many replicas as master reported connected (INFO replication
// connected_slaves) just before, so that a failover could start at once.
//
// The configuration file, written to the Sentinel's own temporary directory
// because Sentinel rewrites it as it learns about replicas, other Sentinels
// and failovers, says:
//
//	sentinel monitor NAME 127.0.0.1 PORT QUORUM
//	sentinel down-after-milliseconds NAME 1000
//	sentinel failover-timeout NAME 5000
//	sentinel parallel-syncs NAME 1
//
// so a killed master is promoted away from within a few seconds. master
// must be running. The Sentinel is stopped like a Server at t.Cleanup (its
// process group SIGKILLed and reaped, its directory removed). StartSentinel
// fails the test, with the tail of the Sentinel's output, if it cannot be
// started or is not watching within 10 seconds.
func StartSentinel(t testing.TB, masterName string, master *Server, quorum int) *Sentinel {
	t.Helper()
	return StartSentinels(t, 1, masterName, master, quorum)[0]
}

// StartSentinels starts n Sentinels, concurrently, each with the guarantees
// described for StartSentinel, and returns once every one of them also knows
// the n-1 others (SENTINEL sentinels NAME lists them): Sentinels find each
// other through hello messages on the master, sent every 2 seconds, and a
// Sentinel can only reach a quorum with Sentinels it knows. It fails the
// test if that takes more than 10 seconds.
func StartSentinels(t testing.TB, n int, masterName string, master *Server, quorum int) []*Sentinel {
	t.Helper()
	if n < 1 {
		t.Fatalf("redistest.StartSentinels: n = %d, want at least 1", n)
	}
	if master == nil {
		t.Fatalf("redistest.StartSentinel: nil master")
	}
	if masterName == "" || strings.ContainsFunc(masterName, func(r rune) bool {
		return r <= ' ' || r == '"' || r == '\'' || r == '\\' || r == 0x7f
	}) {
		t.Fatalf("redistest.StartSentinel: master name %q: want a non-empty name without spaces, quotes or control characters", masterName)
	}
	bin, err := findBinary()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	replicas, err := connectedReplicas(master)
	if err != nil {
		t.Fatalf("redistest.StartSentinel: master %s: INFO replication: %v\n%s", master.addr, err, master.proc.Tail())
	}

	sentinels := make([]*Sentinel, n)
	for i := range sentinels {
		srv := newServer(t, bin)
		srv.kind = "sentinel"
		srv.sentinel = &sentinelSpec{name: masterName, master: master, quorum: quorum, replicas: replicas}
		sentinels[i] = &Sentinel{srv: srv, name: masterName}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, s := range sentinels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.srv.firstStart(freePort)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	if n > 1 {
		for _, s := range sentinels {
			s.waitPeers(t, n-1)
		}
	}
	return sentinels
}

// Addr returns the Sentinel's address, "127.0.0.1:PORT", for
// redis.FailoverOptions.SentinelAddrs.
func (s *Sentinel) Addr() string { return s.srv.addr }

// Kill sends SIGKILL to the Sentinel and waits until the process has
// exited, so that when Kill returns its port is closed. Killing a Sentinel
// that is not running does nothing.
func (s *Sentinel) Kill(t testing.TB) {
	t.Helper()
	s.srv.Kill(t)
}

// MasterAddr returns the address of the current master according to this
// Sentinel (SENTINEL get-master-addr-by-name), "IP:PORT". During a failover
// it switches to the promoted replica once the replica has confirmed its
// promotion. MasterAddr fails the test if the Sentinel does not answer
// within 5 seconds.
func (s *Sentinel) MasterAddr(t testing.TB) string {
	t.Helper()
	addr, err := s.srv.sentinel.masterAddr(s.srv.addr)
	if err != nil {
		t.Fatalf("redistest: SENTINEL get-master-addr-by-name %s on %s: %v\n%s", s.name, s.srv.addr, err, s.srv.proc.Tail())
	}
	return addr
}

// Client returns a new go-redis Sentinel client connected to s, closed at
// t.Cleanup, for commands such as SENTINEL FAILOVER or SENTINEL replicas.
func (s *Sentinel) Client(t testing.TB) *redis.SentinelClient {
	t.Helper()
	c := redis.NewSentinelClient(&redis.Options{Addr: s.srv.addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitPeers waits until s knows at least n other Sentinels monitoring its
// master.
func (s *Sentinel) waitPeers(t testing.TB, n int) {
	t.Helper()
	p := s.srv.proc.Run()
	if p == nil || p.Exited() {
		t.Fatalf("redistest: sentinel on %s is not running", s.srv.addr)
	}
	err := s.srv.waitUntil(p, readyTimeout, fmt.Sprintf("%d other sentinels", n),
		func(ctx context.Context, c *redis.Client) (bool, string, error) {
			peers, err := c.Do(ctx, "SENTINEL", "SENTINELS", s.name).Slice()
			if err != nil {
				return false, "", err
			}
			return len(peers) >= n, fmt.Sprintf("%d other sentinels", len(peers)), nil
		})
	if err != nil {
		t.Fatalf("redistest: sentinel on %s: %v\n%s", s.srv.addr, err, s.srv.proc.Tail())
	}
}

// commandLine writes the Sentinel's configuration file for a run on port
// into dir and returns redis-server's arguments.
func (sp *sentinelSpec) commandLine(dir string, port int) ([]string, error) {
	host, mport, err := net.SplitHostPort(sp.master.addr)
	if err != nil {
		return nil, fmt.Errorf("master address %q: %v", sp.master.addr, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "port %d\n", port)
	b.WriteString("bind 127.0.0.1\n")
	b.WriteString("protected-mode no\n")
	b.WriteString("daemonize no\n")
	fmt.Fprintf(&b, "dir %q\n", dir)
	b.WriteString("logfile \"\"\n")
	// notice, not warning as for servers: Sentinel logs its view of the
	// world (+slave, +sentinel, +sdown, +switch-master...) at notice and
	// warning, and failure messages quote it.
	b.WriteString("loglevel notice\n")
	fmt.Fprintf(&b, "sentinel monitor %s %s %s %d\n", sp.name, host, mport, sp.quorum)
	fmt.Fprintf(&b, "sentinel down-after-milliseconds %s %d\n", sp.name, sentinelDownAfter)
	fmt.Fprintf(&b, "sentinel failover-timeout %s %d\n", sp.name, sentinelFailoverTimeout)
	fmt.Fprintf(&b, "sentinel parallel-syncs %s %d\n", sp.name, sentinelParallelSyncs)
	conf := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(conf, []byte(b.String()), 0o600); err != nil {
		return nil, err
	}
	return []string{conf, "--sentinel"}, nil
}

// waitWatching waits until the Sentinel process p (of srv) is watching its
// master, as StartSentinel promises.
func (sp *sentinelSpec) waitWatching(srv *Server, p *servertest.Run) error {
	want := fmt.Sprintf("master %s at %s, connected, with at least %d replicas", sp.name, sp.master.addr, sp.replicas)
	err := srv.waitUntil(p, readyTimeout, want,
		func(ctx context.Context, c *redis.Client) (bool, string, error) {
			addr, err := getMasterAddr(ctx, c, sp.name)
			if err != nil {
				return false, "", err
			}
			m, err := c.Do(ctx, "SENTINEL", "MASTER", sp.name).Slice()
			if err != nil {
				return false, "", err
			}
			fields := pairs(m)
			state := fmt.Sprintf("master at %s, flags %s, %s replicas", addr, fields["flags"], fields["num-slaves"])
			n, _ := strconv.Atoi(fields["num-slaves"])
			return addr == sp.master.addr && fields["flags"] == "master" && n >= sp.replicas, state, nil
		})
	if err != nil {
		return fmt.Errorf("%v\nmaster %s %s", err, sp.master.addr, sp.master.proc.Tail())
	}
	return nil
}

// masterAddr asks the Sentinel at addr for its current master's address.
func (sp *sentinelSpec) masterAddr(addr string) (string, error) {
	var master string
	err := oneShot(addr, 5*time.Second, func(ctx context.Context, c *redis.Client) error {
		var err error
		master, err = getMasterAddr(ctx, c, sp.name)
		return err
	})
	return master, err
}

func getMasterAddr(ctx context.Context, c *redis.Client, name string) (string, error) {
	hp, err := c.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", name).StringSlice()
	if err != nil {
		return "", err
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("SENTINEL get-master-addr-by-name %s answered %q", name, hp)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// pairs turns a flat RESP2 reply [k1 v1 k2 v2 ...] into a map.
func pairs(flat []any) map[string]string {
	m := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		m[fmt.Sprint(flat[i])] = fmt.Sprint(flat[i+1])
	}
	return m
}

// connectedReplicas returns master's INFO replication connected_slaves.
func connectedReplicas(master *Server) (int, error) {
	var n int
	err := oneShot(master.addr, 5*time.Second, func(ctx context.Context, c *redis.Client) error {
		raw, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		n, err = strconv.Atoi(parseInfo(raw)["connected_slaves"])
		return err
	})
	return n, err
}
