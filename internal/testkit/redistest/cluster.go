//go:build unix

package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// clusterMasters is how many masters StartCluster starts.
	clusterMasters = 3
	// clusterSlots is the number of hash slots of a Redis Cluster.
	clusterSlots = 16384
	// clusterNodeTimeout is cluster-node-timeout, in milliseconds: a node
	// that does not answer pings for this long is suspected (PFAIL).
	clusterNodeTimeout = 1000
	// clusterReadyTimeout bounds how long StartCluster and WaitHealthy wait
	// for every node to report cluster_state:ok and agree on the slots.
	clusterReadyTimeout = 15 * time.Second
	// migrateTimeout is MIGRATE's timeout, in milliseconds.
	migrateTimeout = 5000
)

// Cluster is a Redis Cluster of three masters owned by a test, each a
// redis-server started with --cluster-enabled yes. The slots are split in
// three contiguous ranges (0-5460, 5461-10922, 10923-16383), one per master
// in order. All methods are safe for concurrent use.
type Cluster struct {
	nodes []*clusterNode

	mu    sync.Mutex
	owner [clusterSlots]int8 // index of the master serving each slot
}

// clusterNode is one node of a Cluster.
type clusterNode struct {
	srv      *Server
	id       string // CLUSTER MYID; kept across Restart through nodes.conf
	busPort  int
	replicas []*clusterNode // a master's replicas
}

// WithClusterReplicas gives every master of StartCluster n replicas (cluster
// nodes attached with CLUSTER REPLICATE). StartCluster then also waits until
// each replica's link to its master is up. Start and StartN reject it.
func WithClusterReplicas(n int) Option {
	return func(c *config) { c.clusterReplicas = n }
}

// StartCluster starts a Redis Cluster of three masters on free 127.0.0.1
// ports, concurrently, and returns once every node reports
// cluster_state:ok and every node's CLUSTER SHARDS shows the same assignment.
// The cluster is built with cluster commands only: each node gets its slot
// range with CLUSTER ADDSLOTSRANGE, the first node meets the others with
// CLUSTER MEET, and gossip does the rest. Nothing outside redis-server is
// used.
//
// Each node is a Server as returned by Start (no persistence, its own
// directory, stopped at t.Cleanup), started with --cluster-enabled yes,
// --cluster-node-timeout 1000, --cluster-require-full-coverage no (a node
// that is down or paused makes only its own slots unavailable) and its own
// --cluster-port and nodes.conf. opts apply to every node; WithReplicaOf is
// rejected, WithClusterReplicas adds replicas to every master (they are not
// in Addrs or Masters: see Replicas). A node keeps its identity and its slots across Restart (nodes.conf
// survives in its directory), but not its keys; call WaitHealthy after a
// Restart before relying on the node: a restarted master refuses writes for
// about two seconds.
//
// Redis makes a fresh master wait two seconds after start before it reports
// cluster_state:ok, so StartCluster takes a little over two seconds.
// StartCluster fails the test, with the nodes' output, if the cluster is not
// healthy within 15 seconds.
func StartCluster(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	cfg := config{pickPort: freePort, pickBusPort: freePort, linkTimeout: readyTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.replica {
		t.Fatalf("redistest.StartCluster: WithReplicaOf does not apply to cluster nodes; use WithClusterReplicas")
	}
	if cfg.clusterReplicas < 0 {
		t.Fatalf("redistest.StartCluster: WithClusterReplicas(%d): want n >= 0", cfg.clusterReplicas)
	}
	bin, err := findBinary()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}

	c := &Cluster{nodes: make([]*clusterNode, clusterMasters)}
	newNode := func(extra ...string) *clusterNode {
		s := newServer(t, bin)
		s.extra = append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.Itoa(clusterNodeTimeout),
			"--cluster-port", "", // set by pickPorts for each attempt
			"--cluster-require-full-coverage", "no",
		}, extra...)
		s.extra = append(s.extra, cfg.args...)
		s.linkTimeout = cfg.linkTimeout
		return &clusterNode{srv: s}
	}
	var all []*clusterNode
	for i := range c.nodes {
		var extra []string
		if cfg.clusterReplicas > 0 {
			// Full syncs start at once instead of after 5 seconds.
			extra = []string{"--repl-diskless-sync-delay", "0"}
		}
		c.nodes[i] = newNode(extra...)
		all = append(all, c.nodes[i])
		for range cfg.clusterReplicas {
			r := newNode()
			c.nodes[i].replicas = append(c.nodes[i].replicas, r)
			all = append(all, r)
		}
	}
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, n := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = n.srv.firstStart(n.pickPorts(cfg.pickPort, cfg.pickBusPort))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("redistest: cluster node: %v", err)
	}
	for _, n := range all {
		err := n.do(func(ctx context.Context, rc *redis.Client) error {
			var err error
			n.id, err = rc.ClusterMyID(ctx).Result()
			return err
		})
		if err != nil {
			t.Fatalf("redistest: cluster node %s: CLUSTER MYID: %v\n%s", n.srv.addr, err, n.srv.proc.Tail())
		}
	}

	per := clusterSlots / clusterMasters
	for i, n := range c.nodes {
		lo, hi := i*per, (i+1)*per-1
		if i == len(c.nodes)-1 {
			hi = clusterSlots - 1
		}
		for s := lo; s <= hi; s++ {
			c.owner[s] = int8(i)
		}
		err := n.do(func(ctx context.Context, rc *redis.Client) error {
			return rc.ClusterAddSlotsRange(ctx, lo, hi).Err()
		})
		if err != nil {
			t.Fatalf("redistest: cluster node %s: CLUSTER ADDSLOTSRANGE %d %d: %v\n%s", n.srv.addr, lo, hi, err, n.srv.proc.Tail())
		}
	}
	first := c.nodes[0]
	for _, n := range all[1:] {
		err := first.do(func(ctx context.Context, rc *redis.Client) error {
			return rc.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", n.srv.port, n.busPort).Err()
		})
		if err != nil {
			t.Fatalf("redistest: cluster node %s: CLUSTER MEET %s: %v\n%s", first.srv.addr, n.srv.addr, err, first.srv.proc.Tail())
		}
	}
	for _, m := range c.nodes {
		for _, r := range m.replicas {
			r.replicate(t, m)
		}
	}
	c.WaitHealthy(t)
	return c
}

// replicate makes n a replica of master, retrying while n has not yet
// learned of master through gossip.
func (n *clusterNode) replicate(t testing.TB, master *clusterNode) {
	t.Helper()
	deadline := time.Now().Add(clusterReadyTimeout)
	for {
		err := n.do(func(ctx context.Context, rc *redis.Client) error {
			return rc.ClusterReplicate(ctx, master.id).Err()
		})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: cluster node %s: CLUSTER REPLICATE %s: %v\n%s", n.srv.addr, master.id, err, n.srv.proc.Tail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// do runs fn over a single fresh connection to the node, with 5 second
// timeouts.
func (n *clusterNode) do(fn func(ctx context.Context, c *redis.Client) error) error {
	return oneShot(n.srv.addr, 5*time.Second, fn)
}

// Addrs returns the masters' addresses, "127.0.0.1:PORT", in slot order: the
// first serves slots 0-5460 at start. Use them as redis.ClusterOptions.Addrs.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.srv.addr
	}
	return addrs
}

// Replicas returns the replicas of master i (see WithClusterReplicas).
func (c *Cluster) Replicas(i int) []*Server {
	s := make([]*Server, len(c.nodes[i].replicas))
	for j, r := range c.nodes[i].replicas {
		s[j] = r.srv
	}
	return s
}

// Masters returns the masters' servers, in the order of Addrs, for Pause,
// Resume, Kill, Restart and Info.
func (c *Cluster) Masters() []*Server {
	s := make([]*Server, len(c.nodes))
	for i, n := range c.nodes {
		s[i] = n.srv
	}
	return s
}

// NodeID returns the cluster node id of master i (CLUSTER MYID).
func (c *Cluster) NodeID(i int) string { return c.nodes[i].id }

// Client returns a new go-redis cluster client seeded with Addrs, closed at
// t.Cleanup. Each opt is applied to the options (Addrs already set) before
// the client is created.
func (c *Cluster) Client(t testing.TB, opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	o := &redis.ClusterOptions{Addrs: c.Addrs()}
	for _, f := range opts {
		f(o)
	}
	rc := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

// Slot returns the hash slot of key (CLUSTER KEYSLOT, asked of a running
// master).
func (c *Cluster) Slot(t testing.TB, key string) int {
	t.Helper()
	var slot int64
	var errs []error
	for _, n := range c.nodes {
		err := n.do(func(ctx context.Context, rc *redis.Client) error {
			var err error
			slot, err = rc.ClusterKeySlot(ctx, key).Result()
			return err
		})
		if err == nil {
			return int(slot)
		}
		errs = append(errs, err)
	}
	t.Fatalf("redistest: CLUSTER KEYSLOT %q: no master answered: %v", key, errors.Join(errs...))
	return 0
}

// Owner returns the index (in Masters) of the master serving slot, as
// assigned at start and changed by migrations.
func (c *Cluster) Owner(slot int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int(c.owner[slot])
}

// WaitHealthy waits until every node reports cluster_state:ok, knows all
// the others, and shows in CLUSTER SHARDS exactly the slot assignment the
// Cluster expects (so a replica promoted by a failover makes it fail), and
// until every master has all its replicas connected and in sync. It fails the test, with the nodes' output, after 15
// seconds. Use it after Restart or Resume of a node.
func (c *Cluster) WaitHealthy(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	want := c.ownerRanges()
	c.mu.Unlock()
	deadline := time.Now().Add(clusterReadyTimeout)
	for {
		var problems []string
		for _, n := range c.nodes {
			for _, m := range append([]*clusterNode{n}, n.replicas...) {
				if err := c.checkNode(m, want, len(n.replicas)); err != nil {
					problems = append(problems, fmt.Sprintf("%s: %v", m.srv.addr, err))
				}
			}
		}
		if len(problems) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var tails []string
			for _, n := range c.nodes {
				for _, m := range append([]*clusterNode{n}, n.replicas...) {
					tails = append(tails, fmt.Sprintf("node %s %s", m.srv.addr, m.srv.proc.Tail()))
				}
			}
			t.Fatalf("redistest: cluster not healthy within %v:\n\t%s\n%s", clusterReadyTimeout,
				strings.Join(problems, "\n\t"), strings.Join(tails, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkNode reports what keeps node n from being healthy, or nil. Masters
// must have replicas replicas connected; replicas must have their link up.
func (c *Cluster) checkNode(n *clusterNode, want []string, replicas int) error {
	nodes := len(c.nodes) * (1 + replicas)
	return n.do(func(ctx context.Context, rc *redis.Client) error {
		raw, err := rc.ClusterInfo(ctx).Result()
		if err != nil {
			return err
		}
		info := parseInfo(raw)
		if info["cluster_state"] != "ok" || info["cluster_known_nodes"] != strconv.Itoa(nodes) {
			return fmt.Errorf("cluster_state:%s cluster_known_nodes:%s, want ok and %d", info["cluster_state"], info["cluster_known_nodes"], nodes)
		}
		if replicas > 0 {
			raw, err := rc.Info(ctx, "replication").Result()
			if err != nil {
				return err
			}
			repl := parseInfo(raw)
			switch repl["role"] {
			case "master":
				if repl["connected_slaves"] != strconv.Itoa(replicas) {
					return fmt.Errorf("master with connected_slaves:%s, want %d", repl["connected_slaves"], replicas)
				}
			default:
				if repl["master_link_status"] != "up" {
					return fmt.Errorf("replica with master_link_status:%s", repl["master_link_status"])
				}
			}
		}
		shards, err := rc.ClusterShards(ctx).Result()
		if err != nil {
			return err
		}
		var got []string
		for _, sh := range shards {
			var master *redis.Node
			for i := range sh.Nodes {
				if sh.Nodes[i].Role == "master" {
					master = &sh.Nodes[i]
				}
			}
			if master == nil {
				if len(sh.Slots) > 0 {
					return fmt.Errorf("slots %v have no master", sh.Slots)
				}
				continue
			}
			for _, r := range sh.Slots {
				got = append(got, fmt.Sprintf("%d-%d@%s", r.Start, r.End, net.JoinHostPort(master.IP, strconv.FormatInt(master.Port, 10))))
			}
		}
		if !sameSet(got, want) {
			return fmt.Errorf("CLUSTER SHARDS %v, want %v", got, want)
		}
		return nil
	})
}

// ownerRanges describes c.owner as "lo-hi@addr" ranges. Caller holds c.mu.
func (c *Cluster) ownerRanges() []string {
	var out []string
	lo := 0
	for s := 1; s <= clusterSlots; s++ {
		if s == clusterSlots || c.owner[s] != c.owner[lo] {
			out = append(out, fmt.Sprintf("%d-%d@%s", lo, s-1, c.nodes[c.owner[lo]].srv.addr))
			lo = s
		}
	}
	return out
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := make(map[string]int, len(a))
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		if seen[s] == 0 {
			return false
		}
		seen[s]--
	}
	return true
}

// SlotMigration is a slot being moved from one master to another, as
// redis-cli --cluster reshard does it, step by step so that a test can act
// between the steps: after BeginMigration the slot is MIGRATING on its
// source and IMPORTING on its target (clients get ASK redirections for keys
// the source no longer has), MoveKeys moves the slot's keys with MIGRATE,
// and Finish assigns the slot to the target on every node (clients then get
// MOVED).
type SlotMigration struct {
	c        *Cluster
	slot     int
	from, to *clusterNode
	toIndex  int
	done     bool
}

// BeginMigration starts moving slot to master to (an index in Masters):
// CLUSTER SETSLOT slot IMPORTING on the target, then MIGRATING on the
// current owner. It fails the test if to already owns the slot or a node
// refuses.
func (c *Cluster) BeginMigration(t testing.TB, slot, to int) *SlotMigration {
	t.Helper()
	if slot < 0 || slot >= clusterSlots || to < 0 || to >= len(c.nodes) {
		t.Fatalf("redistest.BeginMigration(%d, %d): slot must be in [0, %d), master in [0, %d)", slot, to, clusterSlots, len(c.nodes))
	}
	from := c.Owner(slot)
	if from == to {
		t.Fatalf("redistest.BeginMigration: master %d already serves slot %d", to, slot)
	}
	m := &SlotMigration{c: c, slot: slot, from: c.nodes[from], to: c.nodes[to], toIndex: to}
	m.setSlot(t, m.to, "IMPORTING", m.from.id)
	m.setSlot(t, m.from, "MIGRATING", m.to.id)
	return m
}

// MoveKeys moves every key of the slot from the source to the target with
// MIGRATE (in batches of 100, each batch atomic on the source), and returns
// how many it moved.
func (m *SlotMigration) MoveKeys(t testing.TB) int {
	t.Helper()
	moved := 0
	for {
		var keys []string
		err := m.from.do(func(ctx context.Context, rc *redis.Client) error {
			var err error
			keys, err = rc.ClusterGetKeysInSlot(ctx, m.slot, 100).Result()
			if err != nil || len(keys) == 0 {
				return err
			}
			args := []any{"MIGRATE", "127.0.0.1", m.to.srv.port, "", 0, migrateTimeout, "KEYS"}
			for _, k := range keys {
				args = append(args, k)
			}
			return rc.Do(ctx, args...).Err()
		})
		if err != nil {
			t.Fatalf("redistest: moving keys of slot %d from %s to %s: %v\n%s", m.slot, m.from.srv.addr, m.to.srv.addr, err, m.from.srv.proc.Tail())
		}
		if len(keys) == 0 {
			return moved
		}
		moved += len(keys)
	}
}

// Finish moves any keys left and assigns the slot to the target: CLUSTER
// SETSLOT slot NODE on the target, the source, and the third master. It
// returns once the cluster is healthy with the new assignment (see
// WaitHealthy).
func (m *SlotMigration) Finish(t testing.TB) {
	t.Helper()
	if m.done {
		t.Fatalf("redistest: migration of slot %d already finished", m.slot)
	}
	m.MoveKeys(t)
	m.setSlot(t, m.to, "NODE", m.to.id)
	m.setSlot(t, m.from, "NODE", m.to.id)
	for _, n := range m.c.nodes {
		if n != m.to && n != m.from {
			m.setSlot(t, n, "NODE", m.to.id)
		}
	}
	m.c.mu.Lock()
	m.c.owner[m.slot] = int8(m.toIndex)
	m.c.mu.Unlock()
	m.done = true
	m.c.WaitHealthy(t)
}

func (m *SlotMigration) setSlot(t testing.TB, n *clusterNode, state, id string) {
	t.Helper()
	err := n.do(func(ctx context.Context, rc *redis.Client) error {
		return rc.Do(ctx, "CLUSTER", "SETSLOT", m.slot, state, id).Err()
	})
	if err != nil {
		t.Fatalf("redistest: %s: CLUSTER SETSLOT %d %s %s: %v\n%s", n.srv.addr, m.slot, state, id, err, n.srv.proc.Tail())
	}
}

// MigrateSlot moves slot, with its keys, to master to: BeginMigration,
// MoveKeys and Finish in one call.
func (c *Cluster) MigrateSlot(t testing.TB, slot, to int) {
	t.Helper()
	c.BeginMigration(t, slot, to).Finish(t)
}

// pickPorts returns a port picker for n's server that also picks a new
// cluster bus port each time: when redis-server fails because either port
// is taken, both are chosen again. It runs in firstStart, before the node
// is shared.
func (n *clusterNode) pickPorts(pickPort, pickBusPort func() (int, error)) func() (int, error) {
	return func() (int, error) {
		port, err := pickPort()
		if err != nil {
			return 0, err
		}
		bus := port
		for bus == port {
			if bus, err = pickBusPort(); err != nil {
				return 0, fmt.Errorf("picking a cluster bus port: %v", err)
			}
		}
		n.busPort = bus
		for i, a := range n.srv.extra {
			if a == "--cluster-port" {
				n.srv.extra[i+1] = strconv.Itoa(bus)
			}
		}
		return port, nil
	}
}
