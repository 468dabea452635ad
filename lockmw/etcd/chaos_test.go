package etcd_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockmw/lockmw/internal/testkit/chaos"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd"
	"github.com/lockmw/lockmw/lockmw/etcd/internal/etcdtest"
)

// TestChaos runs lockmw's seeded randomized safety checker
// (internal/testkit/chaos) against a three-member etcd cluster. See
// internal/testkit/chaos for what it checks and how to replay a failure:
//
//	go test -race -run '^TestChaos$' .                       # short: 30s
//	go test -race -run '^TestChaos$' . -args -chaos.seed=42 -chaos.duration=30m
//	make chaos CHAOS_DURATION=30m                             # every store
func TestChaos(t *testing.T) {
	chaos.RunStores(t, etcdChaosStore)
}

// etcdChaosStore is the "etcd" store: three members, etcd.New on a client
// of each Locker slot's own. etcd's lease TTLs are whole seconds, at least
// etcd.MinTTL, so the checker draws TTLs of 2–4s.
//
// Every run, the short one of make test too, pauses members, but stalls
// a leader at most leaderPauseMax: etcd 3.6.16, which the tests run, may
// revoke a lease up to a TTL early once a leader stalled past an election
// resumes (etcd.go, Safety; see leaderPauseMax), which no client can see.
// The short run met that once in CI (seed 2996868023016258851) and long
// runs now and then, while the pause fault still stalled leaders for
// seconds; the short run then left pauses out. TestEtcdIssue15247 and
// TestEtcdLeaseLeaderMovedBack show it on purpose. An overlap comes with
// the deletion's revision, whether its lease was still there, and the
// leader changes around it. The "leader" fault does not move leadership
// to a member that resumed lately (resumedLately), which the package
// documentation tells users not to do either. On an etcd without the fix
// for etcd issue 15247 (Debian's 3.4.23, LOCKMW_ETCD=/usr/bin/etcd) moves
// may cause the same early revocation.
var etcdChaosStore = chaos.Store{
	Name: "etcd", Fair: true, Start: startEtcdChaos,
	FaultNames: []string{"latency", "cut", "reset", "pause", "restart", "leader"},
	Timing: chaos.Timing{
		MinTTL:      etcd.MinTTL,
		ShortMinTTL: 3 * time.Second,
		MaxTTL:      4 * time.Second,
		LockerTTL:   etcd.MinTTL,
		TTLStep:     time.Second,
		// A new leader extends every lease by an election timeout, and
		// TimeToLive rounds the remaining TTL up to a second.
		ExpirySlack:   etcdtest.ElectionTimeout + time.Second,
		ShortDuration: 30 * time.Second,
	},
	Dir: "lockmw/etcd", Package: ".",
}

// Keepalive of the chaos clients, so that a client notices a cut link
// (a proxy that black-holes it) and moves to another member; the members
// accept pings that often (etcd refuses pings under 5s apart by default).
const (
	chaosKeepAliveTime    = time.Second
	chaosKeepAliveTimeout = time.Second
)

// startEtcdChaos starts the etcd deployment. Faults:
//
//   - latency, cut, reset: on a proxied slot's link to one member, or to
//     every member (the slot is cut off);
//   - pause: SIGSTOP one member (a quorum stays) or two (none does); a
//     pause of the leader, or of a member that does not say it is not
//     the leader, lasts at most leaderPauseMax (leaderPauseLimit);
//   - restart: SIGKILL one member, or now and then all three, keep them
//     down a while and restart them (etcd persists its data: nothing is
//     lost, and fences keep rising across it);
//   - leader: hand leadership to another member (MoveLeader), one that
//     has not resumed from a pause lately (resumedLately).
//
// restart and leader run alone (the harness waits for a leader among
// running members); pauses and link faults of the two schedules overlap.
func startEtcdChaos(t *testing.T, slots int) *chaos.Deployment {
	c := etcdtest.StartCluster(t, 3, etcdtest.WithArgs("--grpc-keepalive-min-time="+chaosKeepAliveTime.String()))
	members := c.Members()
	keepAlive := func(cfg *clientv3.Config) {
		cfg.DialKeepAliveTime = chaosKeepAliveTime
		cfg.DialKeepAliveTimeout = chaosKeepAliveTimeout
	}
	admin := c.Client(t)
	var links []chaos.Link
	clients := make([]*clientv3.Client, slots)
	for s := range slots {
		if !chaos.Proxied(s) {
			clients[s] = c.Client(t, keepAlive)
			continue
		}
		var eps []string
		for _, srv := range members {
			p := etcdtest.StartProxy(t, srv)
			links = append(links, chaos.Link{Slot: s, Server: srv.Name(), Proxy: p})
			eps = append(eps, p.Addr())
		}
		clients[s] = c.Client(t, keepAlive, func(cfg *clientv3.Config) { cfg.Endpoints = eps })
	}
	pickLinks := chaos.PickSlotLinks(links)
	status := memberStatus(t, members)
	resumed := &resumeTimes{at: make(map[string]time.Time)}
	tracked := make([]trackedMember, len(members))
	for i, m := range members {
		tracked[i] = trackedMember{m, resumed}
	}
	var names []string
	for _, m := range members {
		names = append(names, m.Name())
	}
	d := &chaos.Deployment{
		NewLocker: func(slot int, opts ...lockmw.Option) (*lockmw.Locker, error) {
			return etcd.New(clients[slot], opts...)
		},
		Describe: chaos.DescribeSlot,
		Residue:  func(ctx context.Context) ([]chaos.Residue, error) { return etcdResidue(ctx, admin) },
		Events:   startEtcdRecorder(t, c, admin, status),
	}
	d.Faults = []chaos.Fault{
		chaos.LinkFault("latency", 200*time.Millisecond, 3*time.Second, pickLinks),
		// Up to longer than the longest TTL: the slot's leases are lost.
		chaos.LinkFault("cut", 50*time.Millisecond, 6*time.Second, pickLinks),
		chaos.LinkFault("reset", 10*time.Millisecond, 500*time.Millisecond, pickLinks),
		chaos.PauseMembersLimited(tracked, names, leaderPauseLimit(members, status)),
		chaos.RestartMembers(members, names, func(env *chaos.FaultEnv, victims []*etcdtest.Server) {
			var wg sync.WaitGroup
			for _, m := range victims {
				wg.Go(func() { m.Restart(env.T) })
			}
			wg.Wait()
		}),
		{Name: "leader", Weight: 2, Exclusive: true, Run: func(env *chaos.FaultEnv) {
			old := c.Leader(env.T)
			var to []*etcdtest.Server
			for _, m := range members {
				if m != old && !resumed.lately(m.Name()) {
					to = append(to, m)
				}
			}
			if len(to) == 0 {
				env.Note("none from %s: the other members resumed from a pause less than %v ago", old.Name(), resumedLately)
				return
			}
			m := to[env.Rand.IntN(len(to))]
			env.Note("from %s to %s", old.Name(), m.Name())
			c.MoveLeader(env.T, m)
		}},
	}
	return d
}

// leaderPauseMax is the longest the checker stalls an etcd leader: half
// an election timeout, so that the other members hold no election while
// it is stalled.
//
// A longer stall tests etcd's lease bookkeeping, not lockmw. In etcd
// 3.6.16 only the leader's lessor keeps expiry times (a follower's leases
// never expire on it), and it goes on keeping them through a stall. A
// leader stalled past an election resumes thinking it leads: its lessor
// finds the leases whose holders renewed with the new leader meanwhile
// expired by its own clock, and its revocation passes the guard etcd added
// for issue 15247 (EtcdServer.ensureLeadership skips its quorum check
// while the member's ticks run, and they run again at once after
// SIGCONT); its raft node, stepped down by then, forwards the revocation
// to the new leader, which commits it. Leases then go up to a TTL before
// their holders' deadlines, which no client can see or prevent (etcd.go,
// Safety). Every overlap the long runs met fits it (seeds
// 3480899015656988636 and 7226592142518276230): leases renewed through an
// interim leader went as a member stalled for 2.4–2.7 s resumed. Two
// members paused together, one of them the leader, do it too: the third
// and the first to resume elect at once. A stall shorter than an election
// timeout leaves the leader leading: a lease that expires on its clock
// meanwhile was renewed nowhere else, so its holder's deadline, counted
// from a renewal's send time, has passed too. Followers' stalls, however long,
// and elections after a leader is killed or moved stay in the run.
const leaderPauseMax = etcdtest.ElectionTimeout / 2

// memberStatus returns a Maintenance client (for Status) of each member,
// on a connection to that member alone.
func memberStatus(t *testing.T, members []*etcdtest.Server) []pb.MaintenanceClient {
	status := make([]pb.MaintenanceClient, len(members))
	for i, m := range members {
		status[i] = pb.NewMaintenanceClient(m.Client(t).ActiveConnection())
	}
	return status
}

// leaderPauseLimit returns the pause fault's limit: leaderPauseMax when one
// of the members drawn says it leads, or does not answer within 200ms
// (a member paused by the other schedule may lead), none otherwise.
// status holds each member's Maintenance client (memberStatus).
func leaderPauseLimit(members []*etcdtest.Server, status []pb.MaintenanceClient) func(*chaos.FaultEnv, []int) (time.Duration, string) {
	return func(env *chaos.FaultEnv, victims []int) (time.Duration, string) {
		for _, i := range victims {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			st, err := status[i].Status(ctx, &pb.StatusRequest{})
			cancel()
			switch {
			case err != nil:
				return leaderPauseMax, fmt.Sprintf("%s may lead (Status: %v)", members[i].Name(), err)
			case st.Leader == st.Header.GetMemberId():
				return leaderPauseMax, members[i].Name() + " leads"
			}
		}
		return 0, ""
	}
}

// resumedLately is how long after a member resumes from a pause the
// "leader" fault does not move leadership to it: etcd 3.6.16 may revoke a
// lease up to a TTL early once a member paused past the TTL leads again
// (etcd.go, Safety, which tells users not to move leadership to a member
// just resumed from a stall), so within the longest TTL the checker draws
// and an election timeout, a move there would test etcd's early
// revocation, which no client can see, rather than lockmw. (Such moves
// made an overlap in a 15-minute run in stop 43 and another at seed
// 3480899015656988636: a member resumed after 2.6 s and was made leader
// at once.) Since the pause fault stalls a leader only briefly
// (leaderPauseMax), a resumed member was a follower, and a move to it is
// safe; the rule stays, as the advice to users does.
const resumedLately = 4*time.Second + etcdtest.ElectionTimeout

// resumeTimes records when each member last resumed from a pause.
type resumeTimes struct {
	mu sync.Mutex
	at map[string]time.Time
}

// lately reports whether member name resumed less than resumedLately ago.
func (r *resumeTimes) lately(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.at[name]
	return ok && time.Since(at) < resumedLately
}

// trackedMember is a member whose resumptions are recorded.
type trackedMember struct {
	*etcdtest.Server
	resumed *resumeTimes
}

// Resume resumes the member and records when.
func (m trackedMember) Resume(t testing.TB) {
	m.Server.Resume(t)
	m.resumed.mu.Lock()
	m.resumed.at[m.Name()] = time.Now()
	m.resumed.mu.Unlock()
}

// etcdResidue lists the keys etcd holds under lockmw's default prefix,
// each with its lease's remaining TTL (none: no expiry), and the leases
// still granted. Waiters' keys are lock keys too (etcd keeps a fair queue
// in the lock's directory).
func etcdResidue(ctx context.Context, admin *clientv3.Client) ([]chaos.Residue, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := admin.Get(ctx, lockmw.DefaultPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var out []chaos.Residue
	for _, kv := range resp.Kvs {
		r := chaos.Residue{What: "lock key " + string(kv.Key), Lock: true, TTL: -1}
		if kv.Lease != 0 {
			ttl, err := admin.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
			if err != nil {
				return nil, err
			}
			if ttl.TTL < 0 {
				continue // the lease and its keys have gone since the Get
			}
			r.What += fmt.Sprintf(" on lease %x", kv.Lease)
			r.TTL = time.Duration(ttl.TTL) * time.Second
		}
		out = append(out, r)
	}
	leases, err := admin.Leases(ctx)
	if err != nil {
		return nil, err
	}
	for _, l := range leases.Leases {
		ttl, err := admin.TimeToLive(ctx, l.ID)
		if err != nil {
			return nil, err
		}
		if ttl.TTL < 0 {
			continue
		}
		out = append(out, chaos.Residue{What: fmt.Sprintf("lease %x (granted TTL %ds)", l.ID, ttl.GrantedTTL), Lock: true, TTL: time.Duration(ttl.TTL) * time.Second})
	}
	return out, nil
}

// etcdRecorderCap is how many events startEtcdRecorder keeps (the newest).
const etcdRecorderCap = 20000

// startEtcdRecorder records, until t's cleanup, what etcd does that the
// checker cannot see: every deletion under lockmw's prefix (with the
// revision, the key's create revision, its lease and whether that lease
// was still there just after: see leaseState) and every change of
// leader or term a member reports (polled every 50ms; a paused member does
// not answer). It returns the recorded events, for the report around a
// violation.
func startEtcdRecorder(t *testing.T, c *etcdtest.Cluster, admin *clientv3.Client, status []pb.MaintenanceClient) func() []chaos.Event {
	var mu sync.Mutex
	var evs []chaos.Event
	add := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		evs = append(evs, chaos.Event{At: time.Now(), What: fmt.Sprintf(format, args...)})
		if len(evs) > etcdRecorderCap {
			evs = append(evs[:0], evs[len(evs)-etcdRecorderCap/2:]...)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	wg.Go(func() {
		var next int64
		for ctx.Err() == nil {
			opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithFilterPut()}
			if next > 0 {
				opts = append(opts, clientv3.WithRev(next))
			}
			for wr := range admin.Watch(ctx, lockmw.DefaultPrefix, opts...) {
				if wr.Err() != nil {
					break
				}
				for _, ev := range wr.Events {
					if ev.Type != mvccpb.DELETE {
						continue
					}
					if p := ev.PrevKv; p != nil {
						add("etcd rev %d: %s deleted (created at rev %d, lease %x: %s)", ev.Kv.ModRevision, ev.Kv.Key, p.CreateRevision, p.Lease, leaseState(ctx, admin, p.Lease))
					} else {
						add("etcd rev %d: %s deleted", ev.Kv.ModRevision, ev.Kv.Key)
					}
				}
				next = wr.Header.Revision + 1
			}
		}
	})
	for i, m := range c.Members() {
		mc := status[i]
		wg.Go(func() {
			var lead, term uint64
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				sctx, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
				st, err := mc.Status(sctx, &pb.StatusRequest{})
				scancel()
				if err != nil {
					continue
				}
				if st.Leader != lead || st.RaftTerm != term {
					lead, term = st.Leader, st.RaftTerm
					add("%s reports leader %s, term %d", m.Name(), memberName(c, lead), term)
				}
			}
		})
	}
	return func() []chaos.Event {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(evs)
	}
}

// leaseState tells whether etcd still has lease id, asked right after one
// of its keys was deleted: a lease gone by then took its keys with it
// (revoked or expired), one still there saw the key deleted by a request.
func leaseState(ctx context.Context, admin *clientv3.Client, id int64) string {
	if id == 0 {
		return "no lease"
	}
	ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	resp, err := admin.TimeToLive(ctx, clientv3.LeaseID(id))
	switch {
	case err != nil:
		return "lease state unknown: " + err.Error()
	case resp.TTL < 0:
		return "lease gone"
	default:
		return fmt.Sprintf("lease still there, TTL %ds", resp.TTL)
	}
}

// memberName names the member with ID id ("none" for 0).
func memberName(c *etcdtest.Cluster, id uint64) string {
	if id == 0 {
		return "none"
	}
	for _, m := range c.Members() {
		if m.ID() == id {
			return m.Name()
		}
	}
	return fmt.Sprintf("%x", id)
}
