//go:build unix

package etcdtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/lockmw/lockmw/internal/testkit/servertest"
)

// Raft timing of every member, fast so that a lost leader is replaced
// within about a second.
const (
	// HeartbeatInterval is the members' --heartbeat-interval.
	HeartbeatInterval = 50 * time.Millisecond
	// ElectionTimeout is the members' --election-timeout.
	ElectionTimeout = 500 * time.Millisecond
)

const (
	// readyTimeout bounds how long Start, Restart, Leader and MoveLeader
	// wait for the state they promise (Pause waits as long, in servertest).
	readyTimeout = 20 * time.Second
	// probeTimeout bounds each status request of the waits.
	probeTimeout = 500 * time.Millisecond
	// pollEvery is how often the waits ask again.
	pollEvery = 20 * time.Millisecond
)

// Option configures the members started by Start and StartCluster.
type Option func(*config)

type config struct {
	args []string
}

// WithArgs appends extra command-line flags to every member, for example
// WithArgs("--quota-backend-bytes=16777216"). They come after the package's
// own flags, so they take precedence, and are used again by Restart.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// Cluster is a set of etcd members started together by StartCluster (or a
// single one, by Start). All methods are safe for concurrent use.
type Cluster struct {
	bin     string
	args    []string
	token   string
	initial string // --initial-cluster, fixed once started
	members []*Server
}

// Server is one etcd member owned by a test. Its ports and data directory
// stay the same for its whole life, across Kill and Restart. All methods
// are safe for concurrent use.
//
// Pause, Resume, Kill and Restart are servertest's Controls, whose
// failures quote every member's output. A paused member's peers elect
// another leader if it led; a killed member's data directory stays, so
// that Restart rejoins its cluster with the data it had written, and
// returns once the member answers and, when a quorum of members is running
// with it, reports a leader (within 20 seconds).
type Server struct {
	servertest.Controls
	c    *Cluster
	name string
	dir  string
	// proc runs the member; its Ready check (waitRestarted) applies to
	// Restart only: StartCluster waits for the members together.
	proc *servertest.Process

	// Set by the first start, read-only afterwards.
	clientPort, peerPort int
	id                   uint64
	probe                *clientv3.Client
	// joined is set once the member has been part of a ready cluster.
	joined atomic.Bool
}

// Start starts a single-member etcd on free 127.0.0.1 ports, with its data
// directory under t.TempDir(), and returns once it has elected itself
// leader. At t.Cleanup its process group is SIGKILLed and waited for. Start
// calls t.Fatalf, with the tail of etcd's output, if etcd is missing or does
// not become ready within 20 seconds; it never skips the test.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	return StartCluster(t, 1, opts...).members[0]
}

// StartCluster starts an n-member etcd cluster, each member with its own
// data directory and its own client and peer ports on 127.0.0.1, and
// returns once every member reports the same leader. It has Start's
// guarantees otherwise.
func StartCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("etcdtest.StartCluster: n = %d, want at least 1", n)
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	bin, err := findBinary()
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	root := t.TempDir()
	c := &Cluster{bin: bin, args: cfg.args, token: "etcdtest-" + randomHex(8)}
	for i := range n {
		name := fmt.Sprintf("m%d", i)
		s := &Server{c: c, name: name, dir: filepath.Join(root, name)}
		s.proc = servertest.New(servertest.Config{
			Name:    "etcd " + name,
			Command: s.command,
			Ports:   func() []int { return []int{s.clientPort, s.peerPort} },
			Ready: func(_ context.Context, r *servertest.Run) error {
				if !s.joined.Load() {
					return nil // StartCluster waits for every member
				}
				return s.waitRestarted(r)
			},
		})
		s.Controls = servertest.NewControls("etcdtest", s.proc, c.tails)
		c.members = append(c.members, s)
	}
	t.Cleanup(func() { c.cleanup(t) })
	if err := servertest.RetryTakenPorts(c.firstStart); err != nil {
		t.Fatalf("etcdtest: starting %d member(s): %v", n, err)
	}
	return c
}

// firstStart picks ports, starts every member and waits for a leader. On
// failure it stops them all again and reports whether a port was taken.
func (c *Cluster) firstStart() (portTaken bool, err error) {
	ports, err := servertest.FreePorts(2 * len(c.members))
	if err != nil {
		return false, err
	}
	var initial []string
	for i, s := range c.members {
		s.clientPort, s.peerPort = ports[2*i], ports[2*i+1]
		initial = append(initial, s.name+"="+s.peerURL())
		if err := os.RemoveAll(s.dir); err != nil {
			return false, err
		}
		if s.probe != nil {
			_ = s.probe.Close()
		}
		if s.probe, err = newClient([]string{s.Endpoint()}); err != nil {
			return false, err
		}
	}
	c.initial = strings.Join(initial, ",")
	runs := make([]*servertest.Run, len(c.members))
	for i, s := range c.members {
		if runs[i], err = s.proc.Start(); err != nil {
			c.stopAll()
			return false, err
		}
	}
	if err = c.waitAllReady(); err == nil {
		for _, s := range c.members {
			s.joined.Store(true)
		}
		return false, nil
	}
	c.stopAll()
	for i, s := range c.members {
		if strings.Contains(runs[i].Output(), "address already in use") {
			portTaken = true
			s.proc.Logf("--- etcdtest: a port of the cluster was taken, retrying on new ports ---")
		}
	}
	return portTaken, fmt.Errorf("%v\n%s", err, c.tails())
}

func (c *Cluster) stopAll() {
	for _, s := range c.members {
		_ = s.proc.Kill()
	}
}

// waitAllReady waits until every member reports the same leader, and
// checks that the members are the ones started (by name and client URL),
// recording their IDs.
func (c *Cluster) waitAllReady() error {
	deadline := time.Now().Add(readyTimeout)
	var last string
	for {
		_, ids, err := c.agreedLeader(c.members)
		if err == nil {
			err = c.checkMembers(ids)
			if err == nil {
				for i, s := range c.members {
					s.id = ids[i]
				}
				return nil
			}
		}
		last = err.Error()
		for _, s := range c.members {
			if !s.proc.Running() {
				return fmt.Errorf("member %s exited while starting", s.name)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no agreed leader within %v (last: %s)", readyTimeout, last)
		}
		time.Sleep(pollEvery)
	}
}

// checkMembers checks, through the first member, that the cluster's members
// are ours: each name with our client URL and the ID its member reported.
func (c *Cluster) checkMembers(ids []uint64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*probeTimeout)
	defer cancel()
	resp, err := c.members[0].probe.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("member list: %v", err)
	}
	if len(resp.Members) != len(c.members) {
		return fmt.Errorf("member list has %d members, want %d", len(resp.Members), len(c.members))
	}
	for i, s := range c.members {
		found := false
		for _, m := range resp.Members {
			if m.Name == s.name && m.ID == ids[i] && slices.Contains(m.ClientURLs, s.Endpoint()) {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("member list %v has no member %s with ID %x and client URL %s", resp.Members, s.name, ids[i], s.Endpoint())
		}
	}
	return nil
}

// agreedLeader asks each of members for its status and returns the leader
// ID they all report (non-zero) and their own IDs.
func (c *Cluster) agreedLeader(members []*Server) (uint64, []uint64, error) {
	ids := make([]uint64, len(members))
	leaders := make([]uint64, len(members))
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, s := range members {
		wg.Go(func() {
			st, err := s.status()
			if err != nil {
				errs[i] = fmt.Errorf("member %s: %v", s.name, err)
				return
			}
			ids[i], leaders[i] = st.Header.MemberId, st.Leader
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, nil, err
	}
	for i, s := range members {
		if leaders[i] == 0 {
			return 0, nil, fmt.Errorf("member %s has no leader", s.name)
		}
		if leaders[i] != leaders[0] {
			return 0, nil, fmt.Errorf("members disagree on the leader: %x and %x", leaders[0], leaders[i])
		}
	}
	return leaders[0], ids, nil
}

// status asks the member for its status, bounded by probeTimeout.
func (s *Server) status() (*clientv3.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	return s.probe.Status(ctx, s.Endpoint())
}

// Members returns the cluster's members, in the order they were created.
func (c *Cluster) Members() []*Server { return slices.Clone(c.members) }

// Endpoints returns every member's client URL ("http://127.0.0.1:PORT").
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, s := range c.members {
		eps = append(eps, s.Endpoint())
	}
	return eps
}

// Client returns a new etcd client for every member, closed at t.Cleanup.
// See Server.Client for its defaults and opts.
func (c *Cluster) Client(t testing.TB, opts ...func(*clientv3.Config)) *clientv3.Client {
	t.Helper()
	return clientFor(t, c.Endpoints(), opts)
}

// Leader waits until the running, unpaused members agree on a leader that
// is one of them, and returns it. It calls t.Fatalf if they do not within
// 20 seconds (for example because fewer than a quorum are running).
func (c *Cluster) Leader(t testing.TB) *Server {
	t.Helper()
	s, err := c.waitLeader(nil)
	if err != nil {
		t.Fatalf("etcdtest: Leader: %v\n%s", err, c.tails())
	}
	return s
}

// waitLeader waits until the live members agree on a live leader (one
// accepted by want, when want is set) and returns it.
func (c *Cluster) waitLeader(want func(*Server) bool) (*Server, error) {
	deadline := time.Now().Add(readyTimeout)
	var last string
	for {
		var live []*Server
		for _, s := range c.members {
			if s.proc.Live() {
				live = append(live, s)
			}
		}
		if len(live) == 0 {
			return nil, errors.New("no member is running")
		}
		id, _, err := c.agreedLeader(live)
		if err == nil {
			err = fmt.Errorf("leader %x is not a running member", id)
			for _, s := range live {
				if s.id == id {
					if want == nil || want(s) {
						return s, nil
					}
					err = fmt.Errorf("leader is still %s", s.name)
				}
			}
		}
		last = err.Error()
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no agreed leader within %v (last: %s)", readyTimeout, last)
		}
		time.Sleep(pollEvery)
	}
}

// MoveLeader hands leadership to member to (etcd's MoveLeader, sent to the
// current leader) and returns once the running members agree that to leads.
// It does nothing if to already leads.
func (c *Cluster) MoveLeader(t testing.TB, to *Server) {
	t.Helper()
	if to.c != c {
		t.Fatalf("etcdtest: MoveLeader: %s is not a member of this cluster", to.name)
	}
	deadline := time.Now().Add(readyTimeout)
	for {
		leader, err := c.waitLeader(nil)
		if err != nil {
			t.Fatalf("etcdtest: MoveLeader to %s: %v\n%s", to.name, err, c.tails())
		}
		if leader == to {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = leader.probe.MoveLeader(ctx, to.id)
		cancel()
		if err == nil {
			if _, err = c.waitLeader(func(s *Server) bool { return s == to }); err != nil {
				t.Fatalf("etcdtest: MoveLeader to %s: %v\n%s", to.name, err, c.tails())
			}
			return
		}
		// Leadership may have changed between the two calls: ask again.
		if time.Now().After(deadline) {
			t.Fatalf("etcdtest: MoveLeader from %s to %s: %v\n%s", leader.name, to.name, err, c.tails())
		}
		time.Sleep(pollEvery)
	}
}

// Cluster returns the cluster s belongs to (for Start, a cluster of one).
func (s *Server) Cluster() *Cluster { return s.c }

// Name returns the member's name (m0, m1, ...).
func (s *Server) Name() string { return s.name }

// ID returns the member's ID, as etcd reports it.
func (s *Server) ID() uint64 { return s.id }

// Addr returns the member's client address, "127.0.0.1:PORT", for example
// to put a proxy in front of it.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.clientPort) }

// Endpoint returns the member's client URL, "http://127.0.0.1:PORT".
func (s *Server) Endpoint() string { return "http://" + s.Addr() }

// Endpoints returns the member's client URL alone, as a client's
// Endpoints. Use Cluster.Endpoints for every member.
func (s *Server) Endpoints() []string { return []string{s.Endpoint()} }

// DataDir returns the member's data directory.
func (s *Server) DataDir() string { return s.dir }

func (s *Server) peerURL() string { return "http://127.0.0.1:" + strconv.Itoa(s.peerPort) }

// Client returns a new etcd client for this member alone, closed at
// t.Cleanup. By default it logs nothing and reconnects within 200 ms of the
// member coming back (gRPC's reconnection backoff capped); each opt is
// applied to the configuration (Endpoints already set) before the client is
// created.
func (s *Server) Client(t testing.TB, opts ...func(*clientv3.Config)) *clientv3.Client {
	t.Helper()
	return clientFor(t, s.Endpoints(), opts)
}

// ClientConfig returns the configuration Client starts from, for endpoints
// (for example a proxy's Addr).
func ClientConfig(endpoints ...string) clientv3.Config {
	return clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  20 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   200 * time.Millisecond,
			},
			MinConnectTimeout: time.Second,
		})},
	}
}

func clientFor(t testing.TB, endpoints []string, opts []func(*clientv3.Config)) *clientv3.Client {
	t.Helper()
	cfg := ClientConfig(endpoints...)
	for _, f := range opts {
		f(&cfg)
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("etcdtest: client for %v: %v", endpoints, err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func newClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(ClientConfig(endpoints...))
}

// waitRestarted waits until the member answers with its own ID and, if a
// quorum is live, reports a leader.
func (s *Server) waitRestarted(p *servertest.Run) error {
	deadline := time.Now().Add(readyTimeout)
	var last string
	for {
		if p.Exited() {
			return fmt.Errorf("exited while restarting (%v)", p.Err())
		}
		live := 0
		for _, m := range s.c.members {
			if m.proc.Live() {
				live++
			}
		}
		quorum := live > len(s.c.members)/2
		st, err := s.status()
		switch {
		case err != nil:
			last = err.Error()
		case st.Header.MemberId != s.id:
			last = fmt.Sprintf("answered by member %x, not %x", st.Header.MemberId, s.id)
		case quorum && st.Leader == 0:
			last = "no leader yet"
		default:
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %v (last: %s)", readyTimeout, last)
		}
		time.Sleep(pollEvery)
	}
}

// command returns the member's command line.
func (s *Server) command() (servertest.Command, error) {
	if err := os.MkdirAll(filepath.Dir(s.dir), 0o700); err != nil {
		return servertest.Command{}, err
	}
	args := []string{
		"--name", s.name,
		"--data-dir", s.dir,
		"--listen-client-urls", s.Endpoint(),
		"--advertise-client-urls", s.Endpoint(),
		"--listen-peer-urls", s.peerURL(),
		"--initial-advertise-peer-urls", s.peerURL(),
		"--initial-cluster", s.c.initial,
		"--initial-cluster-state", "new",
		"--initial-cluster-token", s.c.token,
		"--heartbeat-interval", strconv.Itoa(int(HeartbeatInterval / time.Millisecond)),
		"--election-timeout", strconv.Itoa(int(ElectionTimeout / time.Millisecond)),
		"--snapshot-count", "10000",
		"--logger", "zap",
		"--log-outputs", "stderr",
		"--log-level", "warn",
	}
	args = append(args, s.c.args...)
	return servertest.Command{Path: s.c.bin, Args: args, Env: etcdEnv()}, nil
}

// etcdEnv is the test's environment without ETCD_* variables, which etcd
// reads as flags.
func etcdEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") {
			env = append(env, kv)
		}
	}
	return env
}

// cleanup is registered with t.Cleanup by StartCluster.
func (c *Cluster) cleanup(t testing.TB) {
	for _, s := range c.members {
		if p := s.proc.Run(); p != nil && p.Exited() {
			t.Logf("etcdtest: member %s had exited before cleanup (%v)\n%s", s.name, p.Err(), s.proc.Tail())
		}
		if err := s.proc.Stop(); err != nil {
			t.Errorf("etcdtest: stopping %s: %v\n%s", s.name, err, s.proc.Tail())
		}
		if s.probe != nil {
			_ = s.probe.Close()
		}
	}
}

// tails quotes every member's latest output.
func (c *Cluster) tails() string {
	procs := make([]*servertest.Process, len(c.members))
	for i, s := range c.members {
		procs[i] = s.proc
	}
	return servertest.Tails(procs...)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
