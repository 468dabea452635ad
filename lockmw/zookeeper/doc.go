// Package zookeeper keeps lockmw locks in ZooKeeper: New returns a
// *lockmw.Locker whose leases, watchdog, validity deadlines, nesting,
// waiting and telemetry are lockmw's, and whose locks are ephemeral
// sequential nodes. It lives in its own module
// (github.com/lockmw/lockmw/lockmw/zookeeper), so programs that only
// import lockmw do not build go-zookeeper.
//
// New dials the ensemble itself and owns the connection (one session per
// Locker): go-zookeeper sets its event callback only when connecting and
// keeps the negotiated session timeout private, so the store cannot be
// built on a user's *zk.Conn. Config carries what users need of
// go-zookeeper's options: servers, session timeout, auth, ACL, dialer,
// logger.
//
// # Nodes
//
// A lock on key K with prefix P (lockmw.WithPrefix, default "lockmw:") is
// the parent node R+P+K (R: Config.Root, default "/"; '%', '/', control
// characters and non-ASCII bytes of P and K written %XX), a container node,
// which ZooKeeper deletes once it is empty (a persistent node that
// releases delete on servers without containers). Each acquisition and
// each waiter creates one ephemeral sequential child, "lock-"+token+"-"+
// sequence, whose name carries the lease's token (its data: the Locker's
// lockmw.WithHolderInfo, or none; see Inspecting). The children are a
// queue in sequence order, compared with serial-number arithmetic on the
// 32-bit sequence (which wraps; never as strings or plain integers); names
// that are not lock nodes are ignored. The first holds the lock, and its
// czxid is the fence (Lease.Fence): zxids are 64-bit and totally ordered
// across the ensemble, leader changes and a recreated parent, unlike the
// sequence, which restarts with the parent.
//
// # Validity
//
// ZooKeeper expires a session when its leader has heard of no request or
// ping from the client for the negotiated session timeout T. A follower
// tells the leader of its clients' requests only on the leader's pings
// (every half tick), so a request the client sent at s, answered by a
// follower that then lost the leader, may never reach the leader's tracking;
// the leader then knows of a request of the client's at most T/3 (the
// client's ping interval) plus half a tick before s. So a session confirmed
// by a request sent at s lives until at least s + 2T/3 − a tick, and a
// lease TTL is at most 2T/3 − Config.TickTime: CheckTTL refuses longer ones
// with lockmw.ErrInvalidOption, against the T the server granted (read from
// its connect response on the wire; the server clamps the request to [2,
// 20] ticks by default). Without Config.SessionTimeout the store asks for
// T = 3/2 × (the Locker's TTL + a tick). A lease's deadline is then
// lockmw's: the send time of the last confirmed request + TTL − drift,
// which comes before the server can expire the session.
//
// lockmw's own watchdog proves the session and the nodes alive: each tick
// is one Multi of version checks over the Locker's held nodes, which
// succeeds only while every node exists. A holding nobody asks to renew for
// its TTL (acquired WithoutWatchdog, or lost at its deadline) is deleted
// by the store, so that no node of a live session holds a lock forever.
// The session's changes are followed through go-zookeeper's event callback
// (its event channel drops events when full) and compared by session id:
// on expiry every node of the old session is gone, so every lease of it
// ends with lockmw.ErrLost at the StateExpired event (reason expired,
// wrapping zk.ErrSessionExpired), if its deadline has not ended it
// already; a renewal that finds the session gone first ends it the same
// way. A node of an old session is never treated as held. (An expiry
// comes before the deadline only when the session was closed or expired
// early on the server, e.g. closed by another client knowing its
// password; at the event is then as soon as the client can know.)
//
// # Safety: how a lease becomes live
//
// The invariant: while a lockmw lease with token t is live, t's node N
// exists in the lock's parent and no lock node of the parent has a lower
// sequence. Two live leases would need two nodes each lowest, which cannot
// be. Every way a lease becomes live keeps it:
//
//   - Acquisition and queueing (Acquire, Queue.Enqueue): one Multi writes
//     the session's guard node (its empty data again, at any version: the
//     write fails, as a version check does, once the guard is gone),
//     creates N (ephemeral, sequential) in the session S that the store
//     has now, and then writes the parent's (empty) data again, whose
//     answer is the parent's stat in that transaction, N's creation
//     included: when it counts one child, N is alone, so first, at that
//     transaction's zxid, and the lease is live with no read, dated from
//     the Multi's send time (a request answered in S, below). Otherwise
//     the parent's children are read, in S. The lease is live only when N
//     is among them and no lock node has a lower sequence. N's owner is S: the Multi succeeded only while S's guard
//     existed, and a Multi that go-zookeeper sends on a later session
//     finds that guard deleted by S's expiry (see the lost reply below).
//     ZooKeeper answers a session's requests in order, from a server that
//     has applied the session's earlier writes, so every node created
//     before N (a lower sequence) that still existed is seen; nodes
//     created later have higher sequences, and the parent cannot be
//     deleted while N is in it. So N stays lowest while it exists. N
//     exists until this store deletes it or S expires, not before v + 2T/3
//     − tick (see Validity), v being the send time of that read (of the
//     Multi, when N was alone): ValidFrom, with TTL ≤ 2T/3 − tick. Fence: N's czxid; every earlier
//     holder's node was created before N (it was lower, or deleted before
//     N was created), so its czxid is lower. The Multi's answer carries
//     it: a Multi is one transaction with one zxid, which is N's czxid and
//     the guard's new mzxid, and the guard's write answers with the
//     guard's stat (checked to be S's); the parent's new mzxid is that
//     zxid too. Where Config.ACL does not let the client write the guard
//     (the server refuses the write, and the Multi creates nothing), the
//     Multi checks the guard's version instead, and the fence is the
//     parent's mzxid; where the parent cannot be written either (refused
//     likewise: the Multi then leaves the parent out, and the children are
//     always read), N's stat is read beside the children: its czxid, and
//     its owner S.
//   - Hand-over seen by the waiter (Queue.WaitTurn): N watches the node P
//     just before it. When the last read of the queue in S (Enqueue's
//     above, or WaitTurn's own) found P the only lock node below N, P's
//     deletion (the watch's NodeDeleted event, or its answer that P does
//     not exist; no other event) makes N first: every lower node that
//     still existed was in that read, later nodes have higher sequences,
//     so the nodes below N only go, and P was the last. N is then live
//     from v, the send time of the watch (or of a later read that found
//     P, below): a request answered in S (S is the session before it and
//     at the event), so S lives until
//     v + 2T/3 − tick as under Validity, and N with it; v comes before the
//     hand-over, so the lease's validity ends no later than the holding
//     kept for it.
//     While the last read found other nodes below N, the waiter also
//     watches the node P2 just before P (a data watch, which the server
//     sets only on a node that exists; no herd: a node has two watchers at
//     most), and when P2 goes (any event of its watch, or an answer that
//     it does not exist) it reads the parent's children in S, as Enqueue
//     does (a read that fails reports nothing): N first, it holds the lock from that read; P still
//     just before N, that read is now the last read, and v its send time
//     (it was answered before P's deletion, as it found P); another node
//     just before N, it watches that one. So in a queue the read comes
//     during P's turn, and P's release hands the lock on with no round
//     trip after it.
//     When v would leave less than 3/4 of the TTL, or another node was
//     below N, the waiter reads the parent's children once, in S, exactly
//     the read of Enqueue above, and decides the same way, N live from
//     that read's send time. The fence is N's czxid, known since the
//     create. The Locker makes the lease from this report without an
//     Enqueue (store.Queue). A report is made only while S is the session;
//     a failed read reports nothing (the Locker asks Enqueue); when
//     another node is now just before N, the waiter watches it.
//   - Renewal: one Multi of version checks, sent at s, answered in S: N
//     existed after s, and S was alive then: D = max(D, s + TTL − drift).
//     An answer after S changed is never counted.
//   - A create whose reply is lost is found again by t in the names of the
//     parent's children, and taken only when its ephemeral owner is S and
//     S is still the session (CURATOR-498: a node of another session is
//     deleted, never held); the fence is the czxid of the stat read then.
//     go-zookeeper queues requests across reconnections and sends them on
//     whatever session it has then, also a new one after an expiry: the
//     create's Multi writes (or checks) S's guard node (an ephemeral node
//     of S, created once per session and checked to be S's), which S's
//     expiry deleted, so such a create creates nothing.
//   - Every failure after a create deletes the node (and lockmw's
//     give-back, Release, retries); a single attempt that is not first
//     deletes its node before reporting busy. Release deletes by name,
//     which is t's alone: it never deletes another holder's node.
//
// # Waiting
//
// A waiter's node watches the node just before it (an exists watch), and,
// while others are below that one, the node before that too (a data
// watch): two watchers per node at most, no herd. When the second goes, the waiter reads the
// queue, during its predecessor's turn; when the predecessor is deleted,
// the waiter holds the lock if it was the only node before it at the
// waiter's last read of the queue; else the waiter reads the parent's
// children once: first, it holds the lock; else it watches the node now
// just before it (Safety: Hand-over seen by the waiter). Fair and default waiters queue alike (lockmw's default mode asks
// for a place in the queue once a lock is busy), so a release wakes one
// waiter across all Lockers, and no waiter is overtaken.
//
// # Compatibility
//
// Lock nodes, their names and contents, the queue's order and the watch
// on the predecessor are those of earlier versions of this package, whose
// creates checked the guard's version rather than writing it, and did not
// write the lock's parent; only the guard's and the parent's versions move
// now (their data stay empty), a guard is its session's own, read by no
// other Locker, and no version reads a parent's data or version (the
// parent's child count, which a create reads now, counts every version's
// nodes alike). So Lockers of either version on
// one ensemble queue in one queue: they exclude each other, and a release
// wakes the next waiter whichever version it runs. A Locker given
// lockmw.WithHolderInfo writes it as its lock nodes' data, in their
// create; no version reads a lock node's data for a decision (the data
// watch on the node before the predecessor fetches it and ignores it), and
// it never changes after the create, so no watch fires for it.
//
// # Inspecting
//
// Locker.Inspect syncs its server with the leader (a follower answers
// reads from what it has applied, which may be behind a holding confirmed
// through another server), then reads the lock's parent's children, then
// the first lock node's data and stat: three requests while the lock has
// lock nodes (one after another: go-zookeeper's calls wait for their
// answers, and it has no multi-read), two otherwise. It writes nothing and sets no watch, so no
// lock step waits for it; when the first node goes between the two reads,
// it reads again (up to 4 times). It reports:
//
//   - Held: a lock node exists. The first holds the lock, or is about to
//     (a waiter whose predecessor just went).
//   - Fence: the first node's czxid, Exact (never its sequence). Not held:
//     the parent's pzxid, the zxid of its last child change, AtMost: the
//     last holder's fence is not above it, and the next holder's is above
//     it. Unknown when the parent is gone (a key never used, or idle and
//     deleted by the server).
//   - Since: the first node's ctime, by the server's clock. Exact when
//     the node is its parent's only child and no child changed since its
//     create (the parent's pzxid is the node's czxid): it was first from
//     its creation. Otherwise AtLeast: a holder that waited began holding
//     at its predecessor's deletion, whose time ZooKeeper does not keep.
//   - TTL: Unknown. A holding lives with its session and its holder's
//     renewals, not with a TTL the server keeps.
//   - Waiters: the other lock nodes, Exact (a single attempt's node, which
//     it deletes at once when the lock is busy, counts while it exists).
//     FairWaiters: Unknown: Fair and default waiters queue alike, and no
//     node says its mode.
//   - Holder: the first node's data, Exact, when its Locker was given
//     lockmw.WithHolderInfo (Unknown otherwise). The create writes it as
//     the node's data, in the same request: it is the holding's own (the
//     node's name carries the token), and it ends with the node (released,
//     given up, or deleted with the session). A Locker without it creates
//     its nodes with no data, as before: the same requests and bytes.
//
// Locker.Locks syncs likewise, then reads the root's children
// (Config.Root) in one response, at each page: ZooKeeper has no range read of children, so a page costs
// one read of every name under the root (its length + 4 bytes each; the
// server answers from memory, and go-zookeeper reads responses of any
// size by default). It keeps the names of the prefix's lock parents (names
// that do not unescape as a key, such as session guards and cron records,
// are skipped), sorts them, and resumes after the cursor's name. It then
// inspects those parents in that order, as Inspect does (32 reads in
// flight at most), at most limit + 256 of them, until it has limit locks
// with lock nodes: parents without any (idle containers the server has
// not deleted yet) are not listed, and a page may hold fewer locks than
// limit, even none, with a cursor for the rest. A cursor is versioned
// ("zk1.") and carries the last parent read, with a checksum over it and
// the prefix: any other cursor, or one of another prefix's listing, gives
// lockmw.ErrInvalidOption. Where the root holds many other nodes, give
// the locks a root of their own (Config.Root).
//
// # Compared with zk.Lock
//
// A free lock costs two requests, where zk.Lock sends three: the create
// (a Multi with the guard and the parent, whose answer shows the node
// alone) and the delete; zk.Lock reads the children after its create. A
// contended acquisition costs six, where zk.Lock sends five: the create,
// one read of the children, the two watches, one read when the second
// watched node goes, and the delete. zk.Lock reads the children after
// every wake-up, a round trip between a release and the next holding;
// here the next waiter has read the queue during its predecessor's turn
// and takes the lock at the watch's event, with no round trip.
//
// Six is what a hand-over without a round trip costs: before its
// predecessor goes, the waiter must know that no other node is below it,
// and only a read made after the node before the predecessor went tells
// it. A release that wrote the predecessor's data in its own transaction
// could say "first" without that read, but any client may write a lock
// node's data, so here only a deletion hands the lock on
// (TestWaitTurnOnlyDeletionHandsOver). Nor is the slowest contended wait
// a waiter's own doing: a hand-over is the holder's delete, the server's
// watch event and some tens of microseconds of client time, so a server
// that answers a delete late (a collection pause, its CPU taken by other
// processes) delays every queued waiter at once, here as under zk.Lock.
// A contended wait's 99th percentile is one round of turns plus the
// longest such stall in the run; it compares the two recipes over
// several rounds, not one (make bench takes the median of six, the kinds
// interleaved). A round of turns is also fifteen holds: holds timed by
// time.Sleep lasted 2.89 ms in lockmw's turns and 2.50 ms in zk.Lock's, in
// one process (the Go runtime woke each kind's holders late by a
// different amount), which made lockmw's waits the longer although its
// hand-overs were the shorter (about 0.15 ms idle against 0.5). make
// bench times holds by the kernel's clock (benchsuite.Hold): 2.07 ms for
// both, and lockmw's acquisitions per second 1.10x zk.Lock's.
//
// go-zookeeper's zk.Lock has no context, leaves its node behind when a
// call after the create fails (everyone then waits for the session to
// end), never checks whose session a found protected node belongs to,
// sorts across the sequence's wrap by plain integers, fails on a sibling
// that is not a lock node, and never tells a holder its session expired.
// traps_internal_test.go shows each avoided here; lost_test.go shows a
// cut longer than the session: the lockmw lease has ended when another
// Locker gets the lock, while a zk.Lock holder has no signal at all.
// bench_test.go measures both on one server (make bench), warmed first by
// both: a fresh server's first, slowest collections would otherwise stall
// whichever kind ran first.
//
// # Scheduled jobs
//
// cronlock.NewScheduler given a Locker of this package and no Redis client
// claims the fires of its jobs in ZooKeeper: per job J, the persistent node
// R+P+"%cronfire%"+J holds the highest fire claimed, and R+P+"%cronrun%"+J
// the run last started. A claim is a SetData at the version read (a create
// when there is none): a compare-and-set (internal/fireclaim's Raise loop,
// shared with etcd).
//
// Lifetime: where the servers have TTL nodes (the server property
// zookeeper.extendedTypesEnabled=true; off by default), both records are
// created as TTL nodes, which the server deletes once they have not been
// written for Config.ClaimRetention (default lockmw.DefaultRetention, 24
// h); every claim and run rewrites them. Elsewhere (the store notices the
// server's "unimplemented" answer) they are persistent: one pair of small
// nodes per job, never deleted, since nothing else could delete them
// safely. Safety: a record deleted after the retention no longer refuses
// a claim of a fire at or before the one it recorded, so a fire would run
// twice only if an instance claimed it a whole retention after the last
// claim of the job; claims are made at their fire time and each is
// bounded by the Locker's TTL, so only an instance whose timer fired that
// late could. Orphaned and unsettled claims are not reported across a
// record's expiry either. Keep the retention far above any timer delay
// and above the longest period between a job's fires that should report
// gaps (a job firing less often than the retention starts afresh each
// time, which is safe: every new fire is later than any recorded).
package zookeeper
