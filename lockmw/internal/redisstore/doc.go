// Package redisstore keeps lockmw's locks in Redis: Store on one
// deployment (a standalone server, a Sentinel-managed primary, or a
// Cluster), made by lockmw.New, and Redlock on a quorum of independent
// masters, made by lockmw.NewRedlock. Both sit behind the store boundary
// of package lockmw/internal/store: the Locker acquires, releases and
// renews through store.Store, and finds their extras by type assertion.
// Both wait their own way (store.Waits): the Locker hands every Acquire's
// wait and every release to the store's policy, which makes and ends
// leases through the Locker's store.Host. Store's policy (grantPolicy:
// rooms.go, wait_default.go, wait_fair.go, lineup.go, release.go,
// handover.go) hands the lock to a waiter in the release's own step and
// keeps a fair queue; Redlock's (wakePolicy, wait_wake.go) wakes waiters
// one at a time from a queue on the first master. The steps each policy
// takes on its store are in steps.go. They share the wire
// protocol: the Lua scripts (scripts/ and scripts.go), the key names
// (keys.go), the pub/sub subscriber, the batcher (batch.go), and the guard
// against go-redis sending a write twice (noretry.go).
//
// The package is internal to this repository. A store is made with New or
// NewRedlock, asked for its policy (Policy) and bound to its Locker once
// with Bind (Config: the Locker's id, prefix and options), before the
// Locker's first request.
//
// Package lockmw's documentation holds what a user of any store needs,
// and the few Redis limits a Redis user must know (client settings, the
// restart-delay rule, the counters' clock assumption, eviction,
// WithWaitReplicas). This package's documentation holds how the Redis
// stores work and why they are safe:
//
//   - here: waiting and hand-overs (the lock's queue, grant and release
//     channels, Fair order), Redis Cluster, the keys, performance, and
//     the measurements behind the client settings;
//   - safety.go: how a lease becomes live on Store (acquisition, renewal,
//     transfer, Fair grant, early hand-over), the wire order, fence
//     counters, failover, restarts and network faults, waiting for
//     replicas;
//   - redlock_safety.go: Redlock (how it acquires and waits, its safety,
//     Redlock fences, how it is tested, upgrading a Redlock fleet).
//
// # Client settings
//
// The client settings of lockmw's documentation (Redis: client settings),
// measured. go-redis repeats a read whose reply timed out up to
// MaxRetries times (3 by default) and redials a refused connection up to DialerRetries times
// (5, 100ms apart), so with its defaults an outage is reported only after
// several timeouts (2.3–3.4s with 300ms timeouts). With those settings
// it is reported after at most about one timeout: measured through ginlock
// with 300ms timeouts, a killed Redis was answered in under 1ms (0.9s with
// only the timeouts set), a paused one in 0.3s (an acquisition of a key
// whose failed attempt is being given back also waits for that give-back).
// PipelinePoolSize -1 makes go-redis (9.23) run pipelines on its main pool:
// with a pool of their own (its default), a pipeline (one server's
// acquisitions are one) whose new connection of that pool cannot be set up
// is run a second time on the main pool, so every acquisition after the
// first on a paused Redis took two timeouts (measured: 0.30s, then
// 0.60-0.90s each; with -1, 0.30-0.36s each). Concurrent calls share that
// one timeout: calls for a node queued behind a round trip that got no
// answer within the client's timeout fail with it, with ErrUnavailable,
// without being sent (so they took nothing), rather than each waiting out
// a timeout of its own after it; a timeout that the caller's own context
// deadline cut short, or a slow reply within the timeout, fails nobody
// else. Right after a killed Redis is back, each pool of go-redis can
// still fail its commands at once with its last dial error for up to a
// second; lockmw sends a script refused that way once more through the
// pipeline pool. Why lockmw never lets go-redis re-send its writes:
// safety.go, Failover, restarts and network faults (Writes are sent once);
// the warning New and NewRedlock log about the settings: clientcheck.go.
//
// # Waiting and hand-overs
//
// On Store (lockmw.New), waiting goes as follows (Redlock's waiters are
// described in redlock_safety.go).
//
//   - Across processes (both modes): a waiter whose lock is held by another
//     Locker lines up in the lock's queue in Redis (prefix+"{K}:q", in the
//     lock's hash slot), in default mode as with Fair. The holder's release
//     hands the lock straight to the first entry whose Locker still
//     listens, and only that waiter is told, on its Locker's grant channel:
//     a release wakes one waiter, not one per process, and the lock is
//     never free while others are queued. A Locker whose release just
//     handed the lock on with others still queued knows the lock is
//     contended: its next Acquire of it (within a second) queues with one
//     RPUSHX instead of an attempt. A lock nobody waits on costs no queue
//     bookkeeping, and an attempt on a free lock takes it at once, unless
//     waiters are queued (see Fair order). Grant
//     channels stay subscribed for 2s after their last waiter, so a worker
//     that asks again sends no SUBSCRIBE. While a Cluster slot is being
//     moved Redis refuses the queue's script; a default-mode waiter then
//     waits as within a process.
//   - Default mode, within a process: a failed attempt returns the holder's
//     remaining TTL. While the lock is held by the Locker's own lease, its
//     waiters subscribe to the lock's release channel (prefix+"{K}:n"; one
//     subscription connection per Locker, shared by every key and waiter)
//     and wait for a release or for that TTL. Waiters of one key queue in
//     arrival order and only the first retries. A release by a lease of the
//     same Locker transfers the lock to its first waiter in the same script
//     (no message, no retry), unless waiters of other Lockers wait too:
//     queued ones are served first, and if others listen for releases the
//     lock is freed for all to try. A lease that came by such a transfer
//     carries a fence reserved for its successor, so its release lets the
//     next local waiter start at once, while the transfer is on the wire
//     (an early hand-over; its validity is bounded as described in
//     safety.go, How a lease becomes live, it is not renewed until Redis
//     confirms the transfer, and its release waits for that answer),
//     provided that waiter is known to have arrived before every waiter
//     queued in Redis (see Fair order). If Redis answers that the lock was
//     gone, the lease ends at once with ErrLost.
//   - Fair: waiters join the queue in Redis whatever their Locker. A release
//     hands the lock to the first entry whose Locker still listens (PUBLISH
//     reports how many listeners got the message, so an entry of a process
//     that died is skipped at once), and only that waiter is told. A hand-
//     over also moves the entry now first in line into the new holder's
//     value (token+entry), so the holder's Locker knows who is next without
//     another command: when that waiter is its own, the release starts it
//     at once (an early hand-over, as above) and the release script
//     confirms it. A grant message that arrives late is checked against the
//     fence counter the waiter's last attempt saw, and ignored if it was
//     made before. A first-in-line waiter that gives up is replaced there by
//     the next entry; one whose holder dies with it finds itself in neither
//     place when it polls, and queues again. TryAcquire with Fair takes a
//     free lock only when nobody is queued.
//   - Fair order: a Fair waiter is never overtaken by a waiter that
//     arrived after it (that called Acquire once the Fair waiter's entry
//     was in the queue), whatever that waiter's mode or Locker.
//     Hand-overs in Redis serve the queue in order (grant.lua), and a
//     release that would keep the lock in its Locker or free it
//     (transfer.lua, unlock.lua) gives way to the queue instead: queuing
//     marks the holder's value, and the mark passes to every later holder
//     until the queue is served. An early hand-over is decided before
//     Redis is asked, so it goes only to a waiter known to have arrived
//     before every fair waiter queued by then: one that, after it arrived,
//     found the lock unmarked and no queue (one round trip, made once by
//     the first waiter of a Locker's room), or that was already waiting
//     when the transfer that gave the releaser the lock found none. Fair
//     waiters that queued after it keep their places and are served when
//     it releases. A lock that is free while waiters are queued (its
//     holder's key expired, or a grant went unclaimed) goes to the first
//     live waiter, whatever the mode or Locker of the attempt that finds it
//     free: a plain attempt's pipeline also asks EXISTS of the queue, and
//     if it took the lock with waiters queued, its follow-up round trip
//     (yield.lua) hands the lock on as a release would, and the attempt
//     reports the lock busy (acquire.lua, on Cluster and with WAIT, and
//     fair.lua do the same in one script). Only if no queued waiter still
//     listens does the attempt keep the lock. An uncontended attempt pays
//     one EXISTS in its round trip. The one exception is on Cluster while
//     the lock's slot is being migrated: Redis refuses a script whose keys
//     are not all on the node asked (TRYAGAIN), and the queue key usually
//     does not exist, so attempts then go without the queue check
//     (acquire_moving.lua), and one may take a lock whose holder's key
//     expired ahead of the queued waiters until the migration ends.
//   - A lost message costs latency, never liveness: queued waiters also
//     check the lock when the holder's TTL would run out.
//
// # Redis Cluster
//
// Pass a *redis.ClusterClient to New; nothing else changes.
//
//   - One slot per lock: the keys of a lock share the hash tag {K} (a key
//     K that starts with '}' has a tag of its own, section Keys), so
//     they live on one master and one script acts on them atomically.
//     Different locks spread over all masters.
//   - Renewals are batched per master: the watchdog's pipeline is split by
//     go-redis per master, so N leases over 3 masters cost 3 round trips
//     per tick (tested: 30 leases, 10 per master, renewed in batches of
//     exactly 10).
//   - Release notifications use sharded pub/sub (SPUBLISH, SSUBSCRIBE) on
//     the lock's master, one subscription connection per master (tested:
//     a waiter on each of 3 masters wakes on the release, not at the
//     holder's 30s TTL).
//   - Restarted or new masters answer NOSCRIPT: scripts are resent in full,
//     in one more round trip. Locks held on a master that restarted without
//     persistence are gone; their leases end with ErrLost.
//   - Resharding: renewals (one key) follow MOVED and ASK through go-redis.
//     While a slot is being migrated, Redis refuses a script that names
//     several keys of the slot with TRYAGAIN until they are all on one
//     master; lockmw retries such a call with a short backoff for up to 1s,
//     for at most a quarter of the lease TTL when it acquires a lease or
//     transfers one to a waiter of the same Locker, and never past the
//     validity deadline of a lease it releases or hands over. The retries
//     keep the call's place in the lock's lane. A waiter whose SSUBSCRIBE is
//     never confirmed (the old node answers MOVED) stops waiting for the
//     confirmation after 1s or at its WithWait deadline and relies on its
//     timers. A slot moves in milliseconds, so users see nothing: tested by
//     migrating the slot of a lock while it is held and renewed and four
//     other Lockers try to take it (no error but ErrNotAcquired, never two
//     holders, fences keep increasing, the holder keeps its lease through
//     the ASK and MOVED phases). A slot left half-migrated makes
//     acquisitions of its locks fail with ErrUnavailable until an operator
//     finishes it (redis-cli --cluster fix).
//   - What Cluster does not add: a master's failover to its replica has the
//     same asynchronous-replication window as Sentinel (safety.go,
//     Failover, restarts and network faults). cluster-require-full-coverage
//     no keeps the locks of healthy masters working while another master is
//     down.
//
// # Keys
//
// A lock on key K (1 to MaxKeyLen bytes) uses prefix+"{K}" (the owner
// token, with the lease's expiry), prefix+"{K}:fence" (the fencing
// counter), prefix+"{K}:q" (the wait queue, only while waiters queue),
// prefix+"{K}:i" (the holder's description, only for a Locker given
// WithHolderInfo, expiring with the lock: inspect.go), and the channels prefix+"{K}:n" (releases) and prefix+"{K}:g:ID" (hand-overs
// to the waiters of the Locker with id ID). All share the hash tag {K}, so
// they live in one Cluster slot. On a Cluster, a key K that starts with '}'
// ("}", "}x", "}{a}") would give the empty tag "{}", with which Redis
// hashes each whole name to a slot of its own and refuses the scripts
// (CROSSSLOT; releases before this naming could not lock such a key on a
// Cluster): its names are prefix+"#{H}{K}" and the same suffixes, H being
// the CRC-32 (IEEE) of K in 8 hex digits, the hash tag. No other lock's
// name starts with prefix+"#", so old and new Lockers agree on every name
// either can use. A prefix that holds a '{' sets the tag of every name by
// itself and keeps the plain names. One Redis and Redlock keep the plain
// names for every key (they have no slots), and they never share a
// keyspace with a Cluster; every Locker of a Cluster must reach it through
// a *redis.ClusterClient (a ClusterClient given ClusterSlots of its own,
// which may route to servers that are not a Cluster, keeps the plain
// names). The lock key expires with its lease's TTL;
// the counter and the queue expire once the lock has been idle for the
// retention (WithRetention, default a day; every acquisition, hand-over
// and queued waiter refreshes it), so a lock that nobody uses leaves no key
// behind, also when its holder or a waiter died. A counter that expired is
// seeded from the server clock when it is next drawn from, so fences keep
// rising (safety.go, Fence counters).
// WithPermanentFences keeps the counters forever instead (one small key per
// distinct lock name), counting from 1. naming, in keys.go, argues why no
// two locks share a name and why old and new releases agree;
// TestLockKeys and TestClusterNames pin both.
//
// Eviction: a Redis whose maxmemory-policy is not noeviction can evict a
// held lock's key (allkeys-*, and volatile-* too: lock keys always have
// an expiry, counters and queues do now), and then a second holder gets
// the lock while the first still works; no client can make that safe.
// New and NewRedlock read maxmemory-policy (CONFIG GET; a server that
// refuses it is skipped; eviction.go) and log one warning naming the
// servers that may evict. Give locks a Redis with noeviction, or a Redis of their own. A
// counter evicted anyway is seeded again like an expired one.
//
// Upgrading from a version whose counters never expire: counters written
// by it (small, no expiry) are seeded from the clock and given the
// retention at their first draw by the new version, and the old version's
// INCR keeps working on them; but an old version that finds a counter the
// new version let expire starts it at 1. So finish the rolling upgrade
// within the retention of starting it (or give the new version, for the
// upgrade, a retention longer than the rollout). Lockers sharing a prefix
// must agree on WithPermanentFences.
//
// # Performance
//
// make bench runs the Go benchmarks against a redis-server it starts and
// prints the figures (the README quotes none: they are the machine's).
// Definitions:
//
//   - util: the share of wall time some contender was inside the critical
//     section (a 2ms hold); gap: from one holder's Release call to the next
//     holder's Acquire return; jain: Jain's index over acquisitions per
//     contender; wait p99: the 99th percentile of Acquire's duration;
//     cmds/acq: INFO stats total_commands_processed per acquisition, which
//     counts the commands scripts run as well as the scripts.
//   - The contended figures describe the steady state: contenders make 128
//     acquisitions before measuring starts.
//   - BenchmarkContendedProcesses runs each contender as a separate process
//     (the test binary re-executed) with its own client and Locker, so no
//     hand-off stays inside a Locker. Each run warms up for 1s and measures
//     the acquisitions granted in a fixed 1s window (-lockmw.xwarmup,
//     -lockmw.xwindow), whatever b.N is; the modes take turns, six runs
//     each, and the medians over them follow the result lines
//     (benchsuite.Interleave). On Linux the processes time-stamp
//     their holds on CLOCK_MONOTONIC, one clock for every process of the
//     machine, so their intervals compare without an offset.
//   - BenchmarkContendedLockers gives each of 16 goroutines of one process
//     a Locker and client of its own: no hand-off stays inside a Locker,
//     but waking a waiter costs a goroutine switch rather than a process
//     switch. It sits between the other two shapes.
//
// Why the figures are what they are. The uncontended path beats the raw
// floor (SET NX PX, then a compare-and-delete EVALSHA) by sharing round
// trips: an acquisition is SET NX PX, INCR, PEXPIRE (the counter's
// retention), PTTL and EXISTS of the queue in one pipeline (Redis runs them
// for well under half the cost of a script; a counter found missing costs a
// seed script in a second round trip, a free lock with waiters queued the
// hand-over to them, see Fair order), a lock taken
// without Fair is released by a short script, and the calls of concurrent
// goroutines leave together: up to 4 pipelines of a Locker are on the wire
// at once, later calls queue and leave together in the next one (about 5
// calls per pipeline at 32 goroutines), and a pipeline holds at most one
// call per lock, so the calls for one lock never overtake each other (a
// script resent after NOSCRIPT still runs before the lock's next call). A
// call that finds a round trip free goes out at once. On the development VM
// a round trip after 2ms of idleness takes about 100µs (15–20µs back to
// back), so a hand-off that waited for Redis would leave the lock idle that
// long: both modes let the next waiter of the same Locker start while the
// hand-over is on the wire. Across processes a release hands the lock to
// one queued waiter: 8 commands per acquisition in either mode (RPUSHX to
// line up; the counter's PEXPIRE and the release script's GET, LPOP, SET,
// INCRBY, PUBLISH), in FIFO order, so jain is 1.000 and wait p99 about 16
// holds. util is bounded by how fast another process can be told: a ring of
// processes that does nothing but pass a turn with one PUBLISH is the
// ceiling, and lockmw's hand-off comes within 3–5% of it.
//
// Where a hand-over's time goes across processes (16 processes, 2ms holds,
// the 2-core development VM, medians from CLOCK_MONOTONIC stamps in the
// processes): from the holder's Release call to its script leaving, 8–11µs
// of Go; the release script in Redis, which has idled for a hold since the
// last one, 35–40µs (8µs back to back; a PUBLISH alone costs 2µs idle, an
// empty script 10µs, each redis.call about 4µs); then Redis's writes and
// the waiter process's wake-up, which the PUBLISH ring pays too; then from
// the waiter's subscription goroutine reading the grant to its Acquire
// returning, about 22µs of Go (the grant's routing 6µs, the hop to the
// waiting goroutine 3µs, the lease 5µs, leaving the wait and its telemetry
// 7µs). Redis writes the output of one event-loop turn last-queued first:
// with the PEXPIRE sent just before the script (granter.go, releaseFirst),
// the grant message is queued before the releaser's reply and written
// first, so the waiter's process wakes before the releaser's. Measured in
// 28 interleaved pairs of runs (each against raw SET NX polling in the
// same run), that lowered the gap's median by about a tenth and raised util
// by 1–2%; util stayed 2–5% below raw polling's on that loaded machine.
//
// The same split timed on Redis's clock too (TIME at the start and end of
// release.lua, against the processes' wall clocks; the VM shared with
// other work, load 4–8, medians): from the release's pipeline leaving to
// the script starting, 65–87µs (Redis waking after its idle hold, reading,
// the PEXPIRE); the script, 21–31µs; from its end to the waiter's process
// reading the grant, 75–113µs (Redis's writes, the waiter's process
// waking); then 35–50µs of Go to Acquire's return. The two wake-ups are
// the ring's too. What the ring does not pay is the script and lockmw's Go
// on both sides: about 70µs of median gap (199µs against 131µs on a quiet
// run), the 2–4% of util between the two. Raw SET NX polling comes close to
// the ring because its pollers keep Redis busy (33 commands per
// acquisition): the next poll finds a Redis that need not wake, and the
// hand-off pays no script. Within the script little is to be had: entering
// it costs 10–17µs cold, and each distinct command it calls 5–10µs
// (repeated ones about 1µs, SLOWLOG), and the five of a hand-over (GET,
// LPOP, SET, INCRBY, PUBLISH) are each needed; owner_parts with
// string.find instead of string.match changed nothing measurable (1,800
// interleaved calls of each, idle 2ms before each). Nor did reading the subscription connection
// in the subscriber's own goroutine instead of through go-redis's Channel
// (one goroutine hop and one wake of its health check fewer per grant):
// the waiter's Go time fell, util did not move (median ratio 1.00 over 12
// interleaved pairs against raw polling, 0.99 over 6 pairs run side by
// side), so it is not done. Nor does the releaser's own next request (its
// RPUSHX, sent as the waiter wakes) hold the waiter back measurably:
// workers that slept 1ms after each release before asking again moved util
// by nothing (median ratio 0.99 over 8 pairs).
//
// Redlock needs two such hops (the wake,
// then an attempt on a majority), and asks only the first majority, which
// keeps it at 22 commands across 5 masters (19 before counters expired:
// each master's draw refreshes the counter's expiry).
//
// Cluster (BenchmarkClusterLockUnlock: uncontended TryAcquire+Release over
// keys spread on 3 local masters sharing one 2-core VM): 9,000–9,700 ops/s
// with 1 goroutine, 37,900–42,400 with 32 (down to 8,700 on a saturated
// machine: three redis-servers and the client on two cores). Redlock over
// 5 local masters (go test -run '^$' -bench Redlock ./lockmw/): 5,200–5,900
// ops/s with 1 goroutine and 24,900–25,900 with 32; most of the CPU goes to
// the five redis-servers running the scripts. An earlier run on the same
// machine (about 5,700 and 19,000–20,000; down to about 4,000 and 10,000
// while other work shared the CPU) measured redsync v4 at about 2,500 and
// 5,300. Each lock+unlock is two rounds to the masters (the fence round is
// skipped when the counters agree, the normal case).
package redisstore
