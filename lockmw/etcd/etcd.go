// Package etcd keeps lockmw locks in etcd: New returns a *lockmw.Locker
// whose leases, watchdog, validity deadlines, nesting, waiting and
// telemetry are lockmw's, and whose locks are etcd keys. It lives in its
// own module (github.com/lockmw/lockmw/lockmw/etcd), so programs that only
// import lockmw do not build the etcd client.
//
// # Keys
//
// A lock on key K with prefix P (lockmw.WithPrefix, default "lockmw:") is
// the directory D = P+K+"/" (with "%" and "/" in P and K escaped as %25 and
// %2F, so that no lock's directory holds another's). Each acquisition,
// and each fair waiter, creates one key in D, D+id+"."+n (id names the
// Locker; n is a slot number the Locker reuses once the slot's last key is
// known to be deleted, so that a lock's directory does not accumulate
// names, which etcd's range scans would visit until compaction), attached
// to an etcd lease, its value empty or the Locker's holder description
// (see Inspecting). The lock is held by the key of D with the lowest
// create revision, and that revision is the holder's fence (Lease.Fence):
// etcd revisions are cluster-wide and strictly rising.
//
// # Leases
//
// The Locker keeps one etcd lease per TTL for all its locks (a lease
// acquired WithoutWatchdog gets a lease of its own, never renewed, so that
// it expires on time). lockmw's own watchdog renews it (KeepAliveOnce, at
// a third of the TTL, in one round trip per tick), and the lease's
// validity counts from when the renewal was sent, minus drift, as for
// Redis: the etcd client's keepalive dates its deadline from the reply,
// which can be late, so it is not used. A lease lost in etcd (expired while
// the Locker could not reach it) deletes its keys; the Locker grants a new
// one for later acquisitions.
//
// etcd lease TTLs are whole seconds, and etcd raises one under its minimum
// (about 2s with the default election timeout) without saying so. So the
// TTL (lockmw.WithTTL, lockmw.WithLeaseTTL) must be a whole number of
// seconds, at least MinTTL: New or Acquire fails with an error matching
// lockmw.ErrInvalidOption otherwise. The default, lockmw.DefaultTTL (10s),
// is fine.
//
// # Safety: how a lease becomes live
//
// The invariant: while a lockmw lease with token t is live, t's key (D+t
// for short) exists and has the lowest create revision in D. Two live
// leases would need two keys each lowest in D, which cannot be. Every way
// a lease
// becomes live keeps it:
//
//   - Acquisition (TryAcquire, also with Fair, and a waiting acquisition's
//     first request on a lock not found busy lately, see Enqueue): one
//     transaction creates D+t only if no key of D exists (a compare on the
//     create revision of the whole range D), so D+t is alone, hence lowest.
//     Keys created later get higher revisions, so it stays lowest while it
//     exists. It exists until this Locker deletes it or its etcd lease
//     expires, not before v + TTL on the leader's clock, v being the send
//     time of the lease's grant or last confirmed renewal (a renewal is
//     confirmed only while the lease lives; leader changes only extend
//     leases); the lease's deadline is v + TTL − drift. Fence: the
//     transaction's revision, the key's create revision. Any earlier
//     holder's key was created before it (it was deleted, with a revision
//     above its creation, before D became empty), so its fence is lower.
//   - Fair (queue): one transaction creates D+t if missing and reads D's
//     keys by create revision; it is acquired only when no key of D has a
//     lower create revision than D+t (read in the same transaction, or, for
//     an entry already queued, its own key and the last key below it read
//     together). Then it is lowest, and stays so as above; ValidFrom is the
//     send time of the last confirmed renewal of D+t's lease (renewed first
//     if older than TTL/3: a renewal confirmed after the read proves the
//     key was still there, as only its lease's expiry or this Locker could
//     remove it). Fence: D+t's create revision. Earlier holders were lower
//     keys of D, all deleted before D+t became lowest; later holders' keys
//     are created, or become lowest, after D+t is gone, with higher
//     revisions, since a key lower than D+t cannot appear while it exists.
//   - Fair (a hand-over seen by the watch): a queued entry's Enqueue reads
//     every key of D below D+t (up to 64; behind a longer queue the entry
//     asks Enqueue again once its predecessor is gone) at a revision S.
//     WaitTurn then watches D's deletions from the etcd member's current
//     revision, R0, which the watch's creation reports (a watch from S+1
//     would be one etcd serves only every 100ms once anything was written
//     after S). When R0 ≤ S, it keeps Enqueue's read, at S; when R0 > S,
//     the changes after S were not watched, and it reads D at R0 instead:
//     D+t (gone: it queues again) and the keys below it (none: D+t is
//     lowest at R0, which is then the R below). Either way it has every
//     key of D below D+t at one revision, and etcd's watch delivers every
//     event of D after it, in revision order, a revision's events in one
//     response (events up to the read's revision are skipped). Once it has
//     delivered the deletion of each of those keys, the last at revision
//     R, and none of D+t, then at R D+t existed and was lowest (no key can
//     be created below an existing one). That is what Enqueue's own read
//     must see, seen at R instead. No other lease is live from R on: a
//     live lease's key is lowest in D, and D+t is lowest from R until it
//     is deleted; a lease live before R had its key lowest then, so below
//     D+t (which existed from its creation on, and a later key is lowest
//     only after it is gone), and that key was deleted by R, after its
//     lease ended. The rest is as above: ValidFrom from the last confirmed
//     renewal of D+t's lease (renewed first, after R, if older than
//     TTL/3); fence D+t's create revision, above every earlier holder's
//     (their keys were below D+t) and below every later one's (created
//     after D+t). The lock passes to the next waiter without its second
//     Enqueue, a round trip through etcd's log (at most a read, served
//     without one, when etcd's revision moved between Enqueue and the
//     watch).
//   - Renewal: KeepAliveOnce of the etcd lease, sent at s, and a read of
//     D+t with the create revision the acquisition saw; both must succeed:
//     D = max(D, s + TTL − drift). A key that existed at the read and whose
//     lease was alive when the renewal arrived lives until s + TTL at least.
//
// Every acquisition, also two of one Locker on one etcd lease, has a key
// name of its own while its key may exist, so acquisitions of one Locker
// exclude each other (10756: two concurrency.Mutex on one session share a
// key and do not). A name is reused only after a definite answer said its
// key was deleted or never created; a request that failed without an
// answer may still have created its key, so its name is quarantined (never
// reused), and the store stops adding keys to that etcd lease, so that the
// lease expires once its holdings end. So a key of an entry's name is the
// entry's own: release deletes it by name (one delete, no transaction),
// never touching a successor's key (etcd issue 22082: Mutex.Unlock deletes
// a name its Session's other acquisitions share), and renewal compares the
// key's create revision with the one the acquisition saw.
//
// A queued waiter whose own key vanished (its lease expired) notices,
// through its watch on its own key or the failing renewal of its lease,
// and queues again, rather than waiting on or acquiring through a key that
// is gone (19597, 11456): acquisition is only ever reported when etcd
// showed the waiter's own key lowest in D at one revision (a read, or the
// watch's deletions up to that revision, its own key's among them if it
// went).
//
// The argument rests on etcd's promise that a lease confirmed by a renewal
// sent at s lives until s + TTL. etcd servers without the fix for etcd
// issue 15247 (etcd PR 16822, in later 3.4 and 3.5 releases) break it: a
// leader that falls behind applying its log (a stalled process, a slow
// disk) may revoke leases after it stepped down, though their holders
// renewed them with the new leader; the holder's key vanishes early and
// another Locker may take the lock while the holder's lease is still
// valid. No client can guard against that: run an etcd with the fix. The
// store is tested on etcd 3.6.16 (the tests, the randomized checker and
// the benchmarks run it). Debian's etcd 3.4.23 revokes such a lease early
// when its leader is paused past the TTL (TestEtcdIssue15247, make
// etcd-15247), as the checker (fault "pause" or "leader") does there.
//
// 3.6.16 narrows the window but does not close it: a leader paused past
// the TTL may still revoke leases renewed through the interim leader, up
// to a TTL early, once it resumes. Moving leadership back to it at once (an
// operator's or a tool's MoveLeader) does that within a few attempts
// (TestEtcdLeaseLeaderMovedBack, LOCKMW_ETCD_LEADER_BACK=1); without the
// move, TestEtcdIssue15247 saw it in 2 of 21 pauses, and the randomized
// checker met it once in 15 minutes and once in a 30-second run after two
// members were paused together, and once in each of two later 15-minute
// runs after the leader alone was paused 2.06s, past a 2s TTL (the keys of
// leases renewed through the interim leader went as it resumed; seed
// 2074985615783479617 replays it about 30s in, not every time). The
// reason, in 3.6.16's source: the guard of PR 16822
// (EtcdServer.ensureLeadership) skips its quorum check while the member's
// raft ticks are recent, and a stalled process ticks again at once when
// it resumes; the lessor of a leader stalled past an election still keeps
// expiry times, finds the leases renewed meanwhile through the new leader
// expired by its own clock, and proposes their revocation, which its raft
// node, stepped down by then, forwards to the new leader. A stall shorter
// than an election timeout elects no one, so no lease is renewed
// elsewhere meanwhile, and a follower's lessor keeps no expiry times: the
// checker stalls leaders only that briefly, and followers as long as it
// likes (chaos_test.go, leaderPauseMax), in make test's short run too.
// Fences still rise, so a store that checks them refuses the earlier
// holder's late writes. Do not move leadership to a
// member that has just resumed from a stall; and choose a TTL above one
// and a half times the longest stall a member may suffer (a GC pause, a
// slow disk, a VM descheduled): the watchdog renews every third of a TTL,
// so while renewals arrive on time a stalled leader's lessor heard each
// lease renewed at most a third of a TTL before the stall, and none
// expires on its clock.
//
// # Waiting
//
// Fair mode (lockmw.Fair): waiters queue by create revision, and each
// waits only for the keys before its own (no herd): its watch of D's
// deletions tells it when it is first, and it takes the lock without
// another request, so a hand-over costs the release, and the waiter's
// watch (its creation and cancellation; and one read of D when etcd's
// revision moved between the waiter's Enqueue and its watch: see Safety).
// Default mode takes a free lock at once (a lock nobody waits on costs one
// transaction to take and one delete to release, what a concurrency.Mutex
// sends); a waiter that finds it busy queues like a Fair one, one per key
// and Locker (the Locker's other waiters wait for it, then try once), so a
// release wakes one waiter across all Lockers rather than every waiting
// one. A default attempt succeeds only on an empty D, so it never passes a
// queued waiter.
//
// # Inspecting
//
// Locker.Inspect and Locker.Locks are plain reads (etcd serves them beside
// writes, from its multi-version store); they write nothing and take part
// in no transaction, and nothing in them is read for safety.
//
// Inspect reads D in one range read: its key of lowest create revision,
// with its value, and the number of D's keys (etcd counts a range's keys
// whatever its limit). The lock is held when D has a key; then:
//
//   - Fence: that key's create revision, the holder's fence (Exact). For a
//     free lock, the revision of the read, which no earlier holder's fence
//     is above and the next holder's is (AtMost).
//   - Waiters: D's other keys, the queue entries (Exact; a key that a
//     request without an answer left behind stands in the queue too, until
//     its lease ends). FairWaiters: Unknown, as a key does not say whether
//     its waiter is Fair.
//   - TTL: what is left of the holder key's etcd lease by the leader's
//     clock, read with TimeToLive, a second request (a member that does
//     not lead forwards it to the leader). etcd answers in whole seconds,
//     cut down, so the store reports the answer plus a second, which what
//     is left is below (AtMost). A lease gone since the read: 0 (AtMost).
//   - Since: Unknown. etcd keeps no time, of a key's creation or anything
//     else, and a client's wall clock is not one lockmw stores.
//   - Holder: the description of the Locker whose key holds
//     (lockmw.WithHolderInfo), Exact; Unknown when it gave none.
//
// A Locker given a description writes it as the value of every key it
// creates ("lockmw-holder/1 " and the description), in the transaction that
// creates the key: no request and no key more. It goes with the key, when
// the holding or queue entry ends or its etcd lease does, and a key name
// reused later gets its value anew when created. Inspect and Locks show the
// value of the holder's key only, never a waiter's. A Locker without a
// description writes the empty value, as every earlier release did; no
// release reads the values for locking (key names and the watch of
// deletions are unchanged), so Lockers with and without descriptions, of
// this release and earlier ones, exclude and wake each other as before.
//
// Locks reads, per page, one range under the prefix, limited to twice the
// page's size, from the key its cursor names (a versioned, checksummed
// encoding of a key under the prefix; anything else gives
// lockmw.ErrInvalidOption), and lists the directories it read whole, up to
// a page; a directory longer than the read (a long queue) is read alone,
// as Inspect reads it. Then it asks TimeToLive once per distinct lease of
// the listed holders' keys (a Locker's locks share a lease), eight at a
// time. etcd keeps keys only for held locks and their waiters (a free lock
// has none), so a listing reads no idle locks; cronlock's records under
// the prefix are skipped. etcd 3.6 still walks the rest of a limited range
// in its in-memory index for each read, to count it (without reading those
// keys; deleted names stay in the index until compaction): work that the
// page's limit does not bound.
//
// # Compared with concurrency.Mutex
//
// The etcd client's concurrency.Mutex has traps that this store avoids,
// each with a test in traps_test.go: two acquisitions of one Locker (one
// etcd lease) exclude each other (etcd issue 10756); release deletes a
// name no other acquisition uses while its key may exist, never a
// successor's key (22082); a fair waiter whose own lease expired queues
// again instead of blocking on a predecessor (19597); an acquisition is
// reported only when etcd showed the caller's own key lowest at one
// revision (a read, or the watch's deletions up to it), under a live lease
// (11456).
//
// A Mutex learns of a lost session only through Session.Done, dated from
// the last keepalive reply; a lockmw lease context ends at its deadline,
// dated from the renewal's send, before etcd can expire the key.
// TestLostNoticedBeforeOthersUnlikeMutex (mutex_lost_test.go) shows both:
// with requests cut and replies slowed to 1.5s, the lockmw lease context
// has ended when another Locker acquires, while another Mutex acquires
// with the first Session.Done still open.
//
// bench_test.go (make bench) measures both on one etcd member in the same
// run: uncontended lock+unlock (each one transaction with an fsync to lock
// and one delete to unlock, so the two are within noise of each other:
// what is left is the Locker's own work, a few percent of a lock+unlock),
// and one key contended by 16 independent Lockers (each its own client)
// holding the lock 2ms, in default mode, Fair and Mutex, reporting
// acquisitions per second, util, wait p99 and etcd requests per
// acquisition; the figures are what make bench prints.
//
// A Mutex waiter hears its predecessor's release late now and then: it
// watches the predecessor's key from the revision of its own read
// (waitDelete's WithRev(resp.Header.Revision)), a revision etcd has
// reached, and etcd 3.6 serves such a watch from its unsynced group, every
// 100ms (watchResyncPeriod in etcd's mvcc package), so a release that
// comes before that pass reaches the waiter up to 100ms late. In make
// bench on 92a04ef its contended hand-off gap p99 was 82.5ms, against
// 2.0ms for lockmw, whose waiters watch from etcd's current revision (see
// WaitTurn).
//
// # Scheduled jobs
//
// cronlock.NewScheduler given a Locker of this package and no Redis
// client claims the fires of its jobs in etcd: per job J, the key
// P+"%cronfire%"+J holds the highest fire claimed and P+"%cronrun%"+J the
// run last started (P and J escaped as above). They hold no '/', so they
// are in no lock's directory, and are under no lease, so they persist. A
// claim is one transaction that puts the new mark only if the record's
// mod revision is still the one whose fire it compared.
package etcd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/internal/store"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MinTTL is the shortest lease TTL the etcd store accepts. TTLs must also
// be whole seconds.
const MinTTL = 2 * time.Second

// maxBelow is how many keys below its own a queued entry's Enqueue reads:
// up to that many, WaitTurn can tell when the entry becomes first (see
// handOver); behind a longer queue it waits for its predecessor and asks
// Enqueue again.
const maxBelow = 64

// maxTxnOps is etcd's default limit on operations in one transaction
// (--max-txn-ops).
const maxTxnOps = 128

// New returns a Locker keeping its locks in the etcd cluster client talks
// to. Options are lockmw's; the TTL must be a whole number of seconds, at
// least MinTTL (see the package documentation).
//
// The Locker does not own the client: close the client after the Locker.
// Every etcd request of an acquisition is bounded by the lease TTL (an
// answer later than that is worthless) and by ctx; renewals by the TTL.
// An acquisition that ran out that bound fails with lockmw.ErrUnavailable
// naming etcd, the bound, and the client's last connection error (a
// refused dial, say).
//
// New sends etcd one health check, waiting up to the Locker's TTL. It does
// not fail when etcd cannot be reached (a service may start before its
// etcd): it logs one warning (lockmw.WithLogger) naming the endpoints and
// the cause, and the Locker's requests fail with lockmw.ErrUnavailable
// until etcd answers.
func New(client *clientv3.Client, opts ...lockmw.Option) (*lockmw.Locker, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: etcd.New needs a connected client, e.g. clientv3.New(clientv3.Config{Endpoints: []string{\"localhost:2379\"}})", lockmw.ErrNilClient)
	}
	s := newStore(client)
	l, err := lockmw.NewWithStore(store.Inside{Store: s}, opts...)
	if err != nil {
		return nil, err
	}
	s.checkReach()
	return l, nil
}

// etcdStore keeps locks as keys under etcd leases.
type etcdStore struct {
	c *clientv3.Client

	mu     sync.Mutex
	slots  map[time.Duration]*slot     // the shared lease per TTL
	shared map[clientv3.LeaseID]*lease // shared leases that may be alive, for Close
	id     string                      // names this store's keys
	held   map[string]*entry           // by token: keys this store created and has not deleted
	dirs   map[string]*slots           // by lock directory
	closed bool
	// hot records the lock directories this store's waiters found busy
	// lately: Enqueue starts with a plain attempt on the others.
	hot store.Hot
	// logger is the Locker's (store.Logging); lockerTTL the Locker's TTL,
	// the first that CheckTTL accepted: New waits that long for etcd.
	logger    *slog.Logger
	lockerTTL time.Duration
	// value is what the store's keys hold: "" (what every release before
	// holder descriptions wrote), or the Locker's holder description
	// (UseHolderInfo, inspect.go). Set before the first acquisition, then
	// only read.
	value string
}

// slot is the shared lease for one TTL. mu serializes its refresh.
type slot struct {
	mu  sync.Mutex
	cur *lease
}

// lease is one etcd lease. confirmed and retired are guarded by
// etcdStore.mu.
type lease struct {
	id   clientv3.LeaseID
	ttl  time.Duration
	solo bool // granted for one holding WithoutWatchdog; never renewed by the store
	// confirmed is the send time of the last grant or renewal etcd
	// confirmed: the lease lives until confirmed + ttl on etcd's clock.
	confirmed time.Time
	// retired: no new keys go under it (it is gone, or a request that
	// failed without an answer may have left a key under it), so it
	// expires once the holdings on it end.
	retired bool
	gone    bool // etcd said it does not exist
}

// entry is the key of one acquisition or queue entry (by token). Guarded
// by etcdStore.mu.
type entry struct {
	dir  string
	slot int
	name string // D + the store's id + "." + slot
	// lease is the lease the key is (or may be) under; nil before the
	// first request.
	lease *lease
	rev   int64 // the key's create revision; 0 until known
	// quarantined: a request that failed without an answer may have
	// created the key, or a release may not have deleted it: the name is
	// never used again.
	quarantined bool
	// below is what the last Enqueue that found the key queued read: the
	// names of every key of D created before it (all of them, else nil),
	// at revision seen, when the key's create revision was belowRev.
	// WaitTurn watches them go (see handOver).
	below    map[string]struct{}
	seen     int64
	belowRev int64
}

// slots are the key names of one lock in use by this store: a name is
// reused once its key is known to be gone, so that a lock's directory
// keeps few distinct names (etcd scans every name a range ever held, until
// compaction).
type slots struct {
	free  []int
	next  int
	inUse int
}

// errLeaseGone means etcd no longer has a lease: its keys are deleted.
var errLeaseGone = errors.New("etcd lease expired or revoked")

func newStore(c *clientv3.Client) *etcdStore {
	return &etcdStore{
		c:      c,
		slots:  make(map[time.Duration]*slot),
		shared: make(map[clientv3.LeaseID]*lease),
		id:     newID(),
		held:   make(map[string]*entry),
		dirs:   make(map[string]*slots),
	}
}

// CheckTTL accepts whole seconds, at least MinTTL.
func (s *etcdStore) CheckTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl%time.Second != 0 {
		return fmt.Errorf("%w: TTL %v: etcd leases count whole seconds and last at least %v: use a TTL such as %v (lockmw.WithTTL, lockmw.WithLeaseTTL)",
			lockmw.ErrInvalidOption, ttl, MinTTL, max(MinTTL, ttl.Truncate(time.Second)+time.Second))
	}
	s.mu.Lock()
	if s.lockerTTL == 0 {
		s.lockerTTL = ttl
	}
	s.mu.Unlock()
	return nil
}

// dir is the etcd key prefix of the lock k, ending in "/".
func dir(k store.Key) string { return escape(k.Prefix) + escape(k.Name) + "/" }

var escaper = strings.NewReplacer("%", "%25", "/", "%2F")

func escape(s string) string {
	if !strings.ContainsAny(s, "%/") {
		return s
	}
	return escaper.Replace(s)
}

// errClosed is returned by calls after Close.
var errClosed = lockmw.ErrClosed

// clientBound is ctx with its deadline kept on the client: ctx's Done and
// Err end the request at the deadline, but gRPC sends no grpc-timeout
// header, as etcd's own watch contexts do (clientv3's valCtx). The header
// costs a timer on etcd and a header field the client encodes afresh per
// request: about 10 µs of a 700 µs uncontended lock+unlock on the
// development VM. Nothing depends on etcd knowing the bound: etcd cannot
// withdraw a proposal once made, and the Locker treats a request that
// ended at its bound as one whose answer was lost, giving back whatever it
// may have created (the quarantine of its key's name, above), whether or
// not etcd carried it out.
type clientBound struct{ context.Context }

// Deadline reports no deadline, so that gRPC sends none.
func (clientBound) Deadline() (time.Time, bool) { return time.Time{}, false }

// leaseFor returns the lease a new key of ttl goes under: the shared one,
// fresh (confirmed less than ttl/3 ago), or, for a holding that is not
// renewed, a lease of its own.
func (s *etcdStore) leaseFor(ctx context.Context, ttl time.Duration, renewed bool) (*lease, error) {
	if !renewed {
		return s.grant(ctx, ttl, true)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	sl := s.slots[ttl]
	if sl == nil {
		sl = &slot{}
		s.slots[ttl] = sl
	}
	s.mu.Unlock()

	sl.mu.Lock()
	defer sl.mu.Unlock()
	if cur := sl.cur; cur != nil {
		s.mu.Lock()
		fresh := !cur.retired && time.Since(cur.confirmed) < ttl/3
		usable := !cur.retired
		s.mu.Unlock()
		if fresh {
			return cur, nil
		}
		if usable {
			err := s.keepAlive(ctx, cur)
			if err == nil {
				return cur, nil
			}
			if !errors.Is(err, errLeaseGone) {
				return nil, err
			}
		}
	}
	le, err := s.grant(ctx, ttl, false)
	if err != nil {
		return nil, err
	}
	sl.cur = le
	return le, nil
}

// grant asks etcd for a new lease of ttl.
func (s *etcdStore) grant(ctx context.Context, ttl time.Duration, solo bool) (*lease, error) {
	sent := time.Now()
	resp, err := s.c.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return nil, err
	}
	le := &lease{id: resp.ID, ttl: ttl, solo: solo, confirmed: sent}
	if !solo {
		s.mu.Lock()
		for id, old := range s.shared {
			// Not renewed for three TTLs: long expired.
			if old.gone || time.Since(old.confirmed) > 3*old.ttl {
				delete(s.shared, id)
			}
		}
		s.shared[le.id] = le
		s.mu.Unlock()
	}
	return le, nil
}

// keepAlive renews le once. It returns errLeaseGone when etcd no longer
// has it.
func (s *etcdStore) keepAlive(ctx context.Context, le *lease) error {
	sent := time.Now()
	_, err := s.c.KeepAliveOnce(ctx, le.id)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		le.gone, le.retired = true, true
		return errLeaseGone
	case err != nil:
		return err
	}
	if sent.After(le.confirmed) {
		le.confirmed = sent
	}
	return nil
}

// retire stops new keys going under le.
func (s *etcdStore) retire(le *lease) {
	s.mu.Lock()
	le.retired = true
	s.mu.Unlock()
}

// confirmedOf returns when le was last confirmed.
func (s *etcdStore) confirmedOf(le *lease) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return le.confirmed
}

// remaining is how long a holder's key under the lease id has left at
// least, when the lease is this store's; 0 when unknown.
func (s *etcdStore) remaining(id int64) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if le := s.shared[clientv3.LeaseID(id)]; le != nil && !le.gone {
		return max(time.Until(le.confirmed.Add(le.ttl)), 0)
	}
	return 0
}

// Acquire creates the token's key under a lease only when no key of D
// exists.
func (s *etcdStore) Acquire(ctx context.Context, k store.Key, token string, ttl time.Duration, renewed bool) (store.Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	return s.attempt(ctx, k, token, ttl, renewed)
}

// attempt is Acquire within ctx, which bounds it.
func (s *etcdStore) attempt(ctx context.Context, k store.Key, token string, ttl time.Duration, renewed bool) (store.Reply, error) {
	d := dir(k)
	e, err := s.newEntry(d, token)
	if err != nil {
		return store.Reply{}, err
	}
	for try := 0; ; try++ {
		le, err := s.leaseFor(ctx, ttl, renewed)
		if err != nil {
			s.dropEntry(token, e, true)
			return store.Reply{}, err
		}
		resp, err := s.c.Txn(clientBound{ctx}).
			If(clientv3.Compare(clientv3.CreateRevision(d), "=", 0).WithPrefix()).
			Then(clientv3.OpPut(e.name, s.value, clientv3.WithLease(le.id))).
			Else(clientv3.OpGet(d, clientv3.WithFirstCreate()...)).
			Commit()
		if err != nil {
			s.retire(le)
			if errors.Is(err, rpctypes.ErrLeaseNotFound) && try == 0 {
				continue // the lease expired unseen: a new one
			}
			// The key may have been created: the entry stays, for the
			// Locker's give-back, and its name is never used again.
			s.mu.Lock()
			e.lease, e.quarantined = le, true
			s.mu.Unlock()
			return store.Reply{}, err
		}
		if !resp.Succeeded {
			s.dropEntry(token, e, true)
			r := store.Reply{Seen: resp.Header.Revision}
			if rr := resp.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
				r.HolderTTL = s.remaining(rr.Kvs[0].Lease)
			}
			return r, nil
		}
		rev := resp.Header.Revision
		s.mu.Lock()
		e.lease, e.rev = le, rev
		from := le.confirmed
		s.mu.Unlock()
		return store.Reply{Acquired: true, Fence: uint64(rev), ValidFrom: from}, nil
	}
}

// Release deletes the token's key by its name.
//
// The name is the entry's alone while a key of that name may exist (a
// slot is reused only once its key is known to be gone, and a name a
// request may have left behind is never reused: newEntry, dropEntry), so
// a key of that name is the entry's own, and deleting it ends token's
// holding or takes token out of the queue, and nothing else: no compare
// of the create revision is needed, and a transaction would cost etcd more
// than the delete. (concurrency.Mutex's names are shared by the
// acquisitions of one Session: etcd issues 10756, 22082.)
func (s *etcdStore) Release(ctx context.Context, k store.Key, token string) (store.Ownership, error) {
	s.mu.Lock()
	e := s.held[token]
	var rev int64
	if e != nil {
		rev = e.rev
	}
	s.mu.Unlock()
	if e == nil {
		return store.Missing, nil // no key was ever sent for token, or it is gone
	}
	resp, err := s.c.Delete(clientBound{ctx}, e.name)
	if err != nil {
		if rev != 0 {
			// The key may stay; no new key joins it under its lease,
			// which then expires once the Locker's holdings on it end,
			// and its name is not used again. (Without a create revision,
			// a request that failed without an answer may have created
			// the key: the name is quarantined already.)
			s.mu.Lock()
			e.quarantined = true
			s.mu.Unlock()
			s.retire(e.lease)
		}
		return 0, err
	}
	s.dropEntry(token, e, false)
	if resp.Deleted > 0 {
		return store.Owned, nil
	}
	return store.Missing, nil
}

// Renew renews each request's etcd lease once (KeepAliveOnce, one per
// distinct lease) and reads the requests' keys (one transaction per 128),
// all at once.
func (s *etcdStore) Renew(ctx context.Context, reqs []store.RenewRequest) []store.RenewResult {
	res := make([]store.RenewResult, len(reqs))
	type ref struct {
		name  string
		rev   int64
		lease *lease
	}
	refs := make([]*ref, len(reqs))
	leaseErr := make(map[*lease]error) // written once every renewal is in
	var leases []*lease
	s.mu.Lock()
	for i, r := range reqs {
		if e := s.held[r.Token]; e != nil && e.rev != 0 {
			refs[i] = &ref{name: e.name, rev: e.rev, lease: e.lease}
			if _, seen := leaseErr[e.lease]; !seen {
				leaseErr[e.lease] = nil
				leases = append(leases, e.lease)
			}
		}
	}
	s.mu.Unlock()

	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		rev = make([]int64, len(reqs)) // create revision found; 0: missing
		// readErr is per request: the read of its chunk failed.
		readErr = make([]error, len(reqs))
	)
	for _, le := range leases {
		wg.Go(func() {
			err := s.keepAlive(ctx, le)
			mu.Lock()
			leaseErr[le] = err
			mu.Unlock()
		})
	}
	for lo := 0; lo < len(reqs); lo += maxTxnOps {
		hi := min(lo+maxTxnOps, len(reqs))
		wg.Go(func() {
			var ops []clientv3.Op
			var idx []int
			for i := lo; i < hi; i++ {
				if refs[i] != nil {
					ops = append(ops, clientv3.OpGet(refs[i].name, clientv3.WithKeysOnly()))
					idx = append(idx, i)
				}
			}
			if len(ops) == 0 {
				return
			}
			resp, err := s.c.Txn(ctx).Then(ops...).Commit()
			for j, i := range idx {
				if err != nil {
					readErr[i] = err
					continue
				}
				if rr := resp.Responses[j].GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
					rev[i] = rr.Kvs[0].CreateRevision
				}
			}
		})
	}
	wg.Wait()

	for i, r := range refs {
		switch {
		case r == nil:
			res[i].Ownership = store.Missing
		case errors.Is(leaseErr[r.lease], errLeaseGone):
			res[i].Ownership = store.Missing
		case leaseErr[r.lease] != nil:
			res[i].Err = leaseErr[r.lease]
		case readErr[i] != nil:
			res[i].Err = readErr[i]
		case rev[i] == r.rev:
			res[i].Ownership = store.Owned
		case rev[i] == 0:
			res[i].Ownership = store.Missing
		default:
			res[i].Ownership = store.Taken
		}
	}
	return res
}

// Enqueue creates the token's key if it is missing and says whether it is
// the lowest key of D, or which key is just below it.
//
// A token's first Enqueue on a lock that no waiter of this store found
// busy lately (store.Hot) is a plain attempt first (attempt, the
// transaction of Acquire and TryAcquire): it creates the key only in an
// empty D, where the queued transaction would have taken the lock as well,
// and reads nothing back, which costs etcd less; on a busy D it writes
// nothing, and the token queues in a second request. A lock found busy
// (by that attempt, or by an Enqueue that queued) goes straight to the
// queue for a second (store.HotFor), so a contended lock's waiters send
// one request, not two. A holding without the watchdog (!renewed) queues
// at once: its attempt would grant an etcd lease of its own that a failed
// attempt would waste.
func (s *etcdStore) Enqueue(ctx context.Context, k store.Key, token string, ttl time.Duration, renewed bool) (store.Reply, error) {
	// ctx is bounded by the TTL already: the Locker bounds each Enqueue.
	d := dir(k)
	s.mu.Lock()
	e := s.held[token]
	s.mu.Unlock()
	if e == nil && renewed && !s.hot.BusyLately(d) {
		r, err := s.attempt(ctx, k, token, ttl, renewed)
		if err != nil || r.Acquired {
			return r, err
		}
		s.hot.Busy(d)
	}
	r, err := s.enqueue(ctx, d, e, token, ttl, renewed)
	if err == nil && !r.Acquired {
		s.hot.Busy(d)
	}
	return r, err
}

// enqueue is Enqueue's queued request: e is token's entry, nil when it has
// none yet.
func (s *etcdStore) enqueue(ctx context.Context, d string, e *entry, token string, ttl time.Duration, renewed bool) (store.Reply, error) {
	if e == nil {
		var err error
		if e, err = s.newEntry(d, token); err != nil {
			return store.Reply{}, err
		}
	}
	for try := 0; ; try++ {
		if try == 4 {
			return store.Reply{}, errors.New("etcd: the queue kept changing under the request; try again")
		}
		s.mu.Lock()
		le, rev := e.lease, e.rev
		if le != nil && le.gone {
			le = nil
		}
		s.mu.Unlock()
		if le == nil {
			var err error
			if le, err = s.leaseFor(ctx, ttl, renewed); err != nil {
				s.mu.Lock()
				unsent := rev == 0 && !e.quarantined
				s.mu.Unlock()
				if unsent {
					s.dropEntry(token, e, true)
				}
				return store.Reply{}, err
			}
		}
		elseOps := []clientv3.Op{clientv3.OpGet(e.name)}
		if rev != 0 {
			// The keys below the entry's, newest first (etcd fetches them
			// all to sort them, whatever the limit).
			elseOps = append(elseOps, clientv3.OpGet(d, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
				clientv3.WithMaxCreateRev(rev-1), clientv3.WithLimit(maxBelow)))
		}
		resp, err := s.c.Txn(clientBound{ctx}).
			If(clientv3.Compare(clientv3.CreateRevision(e.name), "=", 0)).
			Then(clientv3.OpPut(e.name, s.value, clientv3.WithLease(le.id)),
				clientv3.OpGet(d, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(maxBelow+1))).
			Else(elseOps...).
			Commit()
		if err != nil {
			s.retire(le)
			s.mu.Lock()
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				le.gone = true
				s.mu.Unlock()
				continue
			}
			e.quarantined = true // the key may have been created
			if e.lease == nil {
				e.lease = le
			}
			s.mu.Unlock()
			return store.Reply{}, err
		}
		if resp.Succeeded {
			// Queued now: the key is the newest of D.
			rev := resp.Header.Revision
			s.mu.Lock()
			e.lease, e.rev = le, rev
			from := le.confirmed
			s.mu.Unlock()
			rr := resp.Responses[1].GetResponseRange()
			if len(rr.Kvs) < 2 {
				return store.Reply{Acquired: true, Fence: uint64(rev), ValidFrom: from}, nil
			}
			// The first key is the entry's own: the newest of D.
			s.noteBelow(e, rev, rev, rr.Kvs[1:], rr.More)
			return store.Reply{Predecessor: string(rr.Kvs[1].Key), Seen: rev}, nil
		}
		own := resp.Responses[0].GetResponseRange().Kvs[0]
		if own.CreateRevision != rev {
			// Created by an earlier request whose answer was lost: record
			// it and ask again.
			s.mu.Lock()
			e.rev = own.CreateRevision
			if sh := s.shared[clientv3.LeaseID(own.Lease)]; sh != nil {
				e.lease = sh
			} else if e.lease == nil {
				e.lease = le
			}
			s.mu.Unlock()
			continue
		}
		if below := resp.Responses[1].GetResponseRange(); len(below.Kvs) > 0 {
			s.noteBelow(e, rev, resp.Header.Revision, below.Kvs, below.More)
			return store.Reply{Predecessor: string(below.Kvs[0].Key), Seen: resp.Header.Revision}, nil
		}
		// First: the lock is token's. Date it from a renewal of its lease
		// confirmed after the read, if the last one is not recent.
		s.mu.Lock()
		le = e.lease
		s.mu.Unlock()
		if time.Since(s.confirmedOf(le)) >= ttl/3 {
			if err := s.keepAlive(ctx, le); errors.Is(err, errLeaseGone) {
				continue // the key went with its lease: queue anew
			} else if err != nil {
				return store.Reply{}, err
			}
		}
		return store.Reply{Acquired: true, Fence: uint64(rev), ValidFrom: s.confirmedOf(le)}, nil
	}
}

// WaitTurn watches D for the deletion of token's own key and of the keys
// below it, renewing the own key's lease meanwhile. When it knows every
// key below token's, it waits until they are all deleted and reports the
// hand-over (see handOver); else it returns once the predecessor is
// deleted, for the Locker to ask Enqueue again.
//
// The watch starts at the member's current revision, not at r.Seen+1: etcd
// puts a watch whose start revision is not above its store's revision in
// its unsynced group, served only every 100ms (watchResyncPeriod in
// etcd's mvcc package), so a watch from r.Seen+1 after any write since
// Enqueue's read (common under contention) would learn of its
// predecessor's deletion up to 100ms late. The watch's creation
// (WithCreatedNotify) reports the revision R0 after which it delivers
// every event. When R0 is not above r.Seen, the keys below token's are
// what Enqueue read at r.Seen. Otherwise the changes of (r.Seen, R0] were
// not watched, and WaitTurn reads D once at R0 (readTurn).
func (s *etcdStore) WaitTurn(ctx context.Context, k store.Key, token string, ttl time.Duration, r store.Reply) (store.Reply, error) {
	d := dir(k)
	s.mu.Lock()
	e := s.held[token]
	var (
		le    *lease
		rev   int64
		below map[string]struct{} // nil: not all known; wait for the predecessor
	)
	if e != nil {
		le, rev = e.lease, e.rev
		if e.below != nil && e.belowRev == rev && e.seen == r.Seen {
			below = maps.Clone(e.below)
		}
	}
	s.mu.Unlock()
	if le == nil {
		return store.Reply{}, nil // not queued: Enqueue again
	}
	pred := r.Predecessor
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := s.c.Watch(wctx, d, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	// from is the revision the state WaitTurn knows (below, pred) was read
	// at: events up to it are in that state already. -1 until the watch's
	// creation is reported.
	from := int64(-1)
	tick := time.NewTicker(max(ttl/6, 100*time.Millisecond))
	defer tick.Stop()
	for {
		if time.Since(s.confirmedOf(le)) >= ttl/3 {
			if err := s.keepAlive(ctx, le); errors.Is(err, errLeaseGone) {
				return store.Reply{}, nil // the entry went with its lease: queue anew
			}
		}
		select {
		case <-ctx.Done():
			return store.Reply{}, ctx.Err()
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil || wr.Canceled {
				if ctx.Err() != nil {
					return store.Reply{}, ctx.Err()
				}
				return store.Reply{}, nil // compacted, or no leader: ask again
			}
			if wr.Created {
				r0 := wr.Header.Revision
				if r0 <= r.Seen {
					// Nothing written since Enqueue's read (or a member
					// behind the one that served it): the watch delivers
					// every event after r.Seen, and the state at r.Seen is
					// Enqueue's read.
					from = r.Seen
					continue
				}
				t, err := s.readTurn(ctx, d, e.name, rev, r0, ttl)
				switch {
				case err != nil || !t.own:
					return store.Reply{}, nil // in doubt, or the entry went: ask again
				case t.first:
					return s.handOver(ctx, le, rev, ttl), nil
				}
				from, below, pred = r0, t.below, t.pred
				continue
			}
			if from < 0 {
				return store.Reply{}, nil // events before the creation: ask again
			}
			// A response holds every event of its revisions (no
			// WithFragment), so the own key's deletion in the revision that
			// deleted the last key below is seen here.
			own, predGone := false, false
			for _, ev := range wr.Events {
				if ev.Type != mvccpb.DELETE || ev.Kv.ModRevision <= from {
					continue
				}
				switch key := string(ev.Kv.Key); {
				case key == e.name:
					own = true
				case below != nil:
					delete(below, key)
				case key == pred:
					predGone = true
				}
			}
			switch {
			case own:
				return store.Reply{}, nil // the entry went (its lease expired): queue anew
			case below != nil && len(below) == 0:
				return s.handOver(ctx, le, rev, ttl), nil
			case predGone:
				return store.Reply{}, nil
			}
		case <-tick.C:
		}
	}
}

// turn is what readTurn found at its revision: whether the own key
// existed (own); if so, whether no key of D was below it (first), else
// the keys below it (below; nil when there were more than maxBelow) and
// the highest of them (pred).
type turn struct {
	own, first bool
	below      map[string]struct{}
	pred       string
}

// readTurn reads D at revision r0: the own key (name, create revision
// rev) and the keys created before it, newest first, up to maxBelow of
// them, as Enqueue reads them. The read is linearizable, so the member
// that serves it has applied r0 (which the member of the watch had); a
// compacted r0 fails the read.
func (s *etcdStore) readTurn(ctx context.Context, d, name string, rev, r0 int64, ttl time.Duration) (turn, error) {
	ctx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	resp, err := s.c.Get(clientBound{ctx}, d, clientv3.WithPrefix(), clientv3.WithRev(r0),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
		clientv3.WithMaxCreateRev(rev), clientv3.WithLimit(maxBelow+1))
	if err != nil {
		return turn{}, err
	}
	var t turn
	var kvs []*mvccpb.KeyValue
	for _, kv := range resp.Kvs {
		switch {
		case kv.CreateRevision == rev && string(kv.Key) == name:
			t.own = true
		case kv.CreateRevision < rev:
			kvs = append(kvs, kv)
		}
	}
	switch {
	case !t.own:
		return t, nil
	case len(kvs) == 0 && !resp.More:
		t.first = true
		return t, nil
	case len(kvs) == 0:
		// Only keys of the own key's revision came back (one transaction
		// creating several keys of D, which no Locker sends): not known.
		return turn{}, errors.New("etcd: the keys below the entry's were not read")
	}
	t.pred = string(kvs[0].Key)
	if !resp.More {
		t.below = make(map[string]struct{}, len(kvs))
		for _, kv := range kvs {
			t.below[string(kv.Key)] = struct{}{}
		}
	}
	return t, nil
}

// handOver is WaitTurn's reply when etcd showed, at one revision R,
// token's key (create revision rev, under le) in D and no key of D below
// it: the lock is token's. R is either the revision of the last deletion,
// among the events WaitTurn watched after a read (Enqueue's at r.Seen, or
// readTurn's at R0), of the keys that read found below token's, token's
// own key not deleted up to it; or R0 itself, when readTurn found no key
// below token's.
//
// Safety (the package documentation, "Fair (queue)": a hand-over seen by
// the watch). The watch delivers every event of D after the read's
// revision, in order, a revision's events together; the read found every
// key of D below token's key then (else WaitTurn does not hand over, but
// waits for the predecessor and asks Enqueue). No key can be created below
// an existing one, whose create revision is lower than every later one, so
// the keys below token's key after the read are among those it found, and
// once their deletions are seen, at R, token's key existed with create
// revision rev and was lowest in D. That is the state Enqueue's own read
// must see to report the lock acquired, seen at R instead of at an
// Enqueue's revision, and the rest is Enqueue's. No other lease of the lock
// can be live from R: a live lease's key exists and is lowest in D, and
// token's key is lowest from R until deleted (keys created later are
// above it); every lease that was live before R had its key lowest in D
// then, hence below token's (token's key existed from rev on, and a key
// created after it is lowest only once it is gone), and so deleted by R,
// after that lease ended (a Locker deletes its key after its lease ends;
// etcd expires it only after the lease's deadline). The fence is rev, above
// every earlier holder's (their keys were below token's) and below every
// later one's (a key below token's, deleted by R, never comes back: a name
// created anew gets a revision above R). ValidFrom is the send time of the
// last confirmed renewal of le, renewed first if older than TTL/3: token's
// key, there at R, stays until le expires or this Locker deletes it, and le
// lives until that send time + TTL. Any doubt (le known gone, a renewal
// that fails) gives the zero reply: Enqueue then reads etcd.
func (s *etcdStore) handOver(ctx context.Context, le *lease, rev int64, ttl time.Duration) store.Reply {
	s.mu.Lock()
	gone := le.gone
	s.mu.Unlock()
	if gone {
		return store.Reply{}
	}
	if time.Since(s.confirmedOf(le)) >= ttl/3 {
		if err := s.keepAlive(ctx, le); err != nil {
			return store.Reply{}
		}
	}
	return store.Reply{Acquired: true, Fence: uint64(rev), ValidFrom: s.confirmedOf(le)}
}

// noteBelow records, for WaitTurn, the keys below e's key (create revision
// rev) that an Enqueue read at revision seen; more: the read was cut at
// maxBelow, so not all are known.
func (s *etcdStore) noteBelow(e *entry, rev, seen int64, kvs []*mvccpb.KeyValue, more bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.below, e.belowRev, e.seen = nil, rev, seen
	if more {
		return
	}
	e.below = make(map[string]struct{}, len(kvs))
	for _, kv := range kvs {
		e.below[string(kv.Key)] = struct{}{}
	}
}

// Leave deletes token's entry.
func (s *etcdStore) Leave(ctx context.Context, k store.Key, token string) error {
	_, err := s.Release(ctx, k, token)
	return err
}

// WaitFree watches D for a deletion after seen (Reply.Seen of a busy
// attempt). (The Locker does not call it today: the store is a queue, so
// its waiters queue, and a TryAcquire does not wait.)
//
// As in WaitTurn, the watch starts at the member's current revision R0
// (a watch from seen+1 would be served late, every 100ms, after any write
// since the attempt). When R0 is above seen, the deletions of (seen, R0]
// were not watched: WaitFree counts D's keys at R0, and returns at once
// if there were none (the lock was free then); else the lock was held at
// R0, and it waits for a deletion after R0.
func (s *etcdStore) WaitFree(ctx context.Context, k store.Key, seen int64) error {
	d := dir(k)
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := s.c.Watch(wctx, d, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case wr, ok := <-wch:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !ok || wr.Err() != nil || wr.Canceled || len(wr.Events) > 0 {
				return nil
			}
			if r0 := wr.Header.Revision; wr.Created && r0 > seen {
				resp, err := s.c.Get(ctx, d, clientv3.WithPrefix(), clientv3.WithRev(r0), clientv3.WithCountOnly())
				switch {
				case ctx.Err() != nil:
					return ctx.Err()
				case err != nil:
					return err
				case resp.Count == 0:
					return nil
				}
			}
		}
	}
}

// Name is the store's name in the Locker's messages.
func (s *etcdStore) Name() string { return "etcd" }

// Close revokes the store's shared leases, deleting whatever keys are
// left under them (queue entries being given up, keys of failed requests),
// within a second.
func (s *etcdStore) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var ids []clientv3.LeaseID
	for id, le := range s.shared {
		if !le.gone {
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(ids))
	for i, id := range ids {
		wg.Go(func() {
			if _, err := s.c.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// newEntry records a new key name of lock directory d for token.
func (s *etcdStore) newEntry(d, token string) (*entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	if e := s.held[token]; e != nil {
		return e, nil
	}
	sl := s.dirs[d]
	if sl == nil {
		sl = &slots{}
		s.dirs[d] = sl
	}
	n := sl.next
	if len(sl.free) > 0 {
		n = sl.free[len(sl.free)-1]
		sl.free = sl.free[:len(sl.free)-1]
	} else {
		sl.next++
	}
	sl.inUse++
	e := &entry{dir: d, slot: n, name: d + s.id + "." + strconv.Itoa(n)}
	s.held[token] = e
	return e, nil
}

// dropEntry forgets token's entry e, whose key is known to be gone (or,
// with never, was never sent): its name is free again unless quarantined.
func (s *etcdStore) dropEntry(token string, e *entry, never bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[token] == e {
		delete(s.held, token)
	}
	if e.quarantined && !never {
		return
	}
	sl := s.dirs[e.dir]
	if sl == nil {
		return
	}
	sl.free = append(sl.free, e.slot)
	if sl.inUse--; sl.inUse == 0 {
		delete(s.dirs, e.dir)
	}
}

// newID returns 8 random bytes in hex: a store's name in its keys.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
