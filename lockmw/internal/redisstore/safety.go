// This file holds no code: it is the safety argument of Store, the Redis
// store of lockmw.New, moved beside the code it argues about. Package
// lockmw's documentation (Safety: how a lease becomes live) makes the
// argument for every store and leaves to each store why its lock is held
// for one token at a time and why its fences rise; this is that part for
// Store, with the ways only Store makes a lease live (transfer, Fair
// grant, early hand-over), what Redis' replication and faults do to it, and
// what WithWaitReplicas adds. Redlock's is in redlock_safety.go; how Store
// waits and hands over, in doc.go.
//
// # How a lease becomes live
//
// Store keeps the invariant of lockmw's Safety with its lock key:
// while a lease with token t is live, the lock key (prefix+"{K}") holds t.
// Two live leases would need the key to hold two tokens at once, which it
// cannot. Only lockmw's compare-and-act scripts
// (lockmw/internal/redisstore/scripts/*.lua) write the key, and each acts
// for the token that is there (renew, release, transfer, grant); an
// acquisition writes only a missing key. So a token, once set with PX p by
// a request sent at time s (our monotonic clock), stays until its owner's
// script replaces it, or at least until s + p on Redis' clock, which is no
// earlier than s + p − drift on ours. The ways a lease becomes live there,
// each setting D no later than that and no later than any bound it
// inherits:
//
//   - Acquisition (SET NX PX, acquire.lua, fair.lua on a free lock): D =
//     s + TTL − drift, s being when the request left. A reply that comes
//     after D is given back, never returned. A SET NX that took the lock
//     while waiters were queued is followed, in the same call's round
//     trips, by yield.lua, which hands the lock to the first live waiter (a
//     Fair grant, below; no lease is made for the token then) or leaves
//     the token in the key with the TTL it had left (a grant skipping dead
//     entries writes the key only inside that script): either way the key
//     holds the token from the SET until s + TTL at least, or until the
//     grant replaced it, and a lease is made only when the token stayed.
//     The fence is drawn (INCR) right after the SET: every earlier holder
//     drew its own before its key was released, or its reply came too late
//     for it to become live.
//     When that INCR found the counter missing, the fence is drawn again,
//     from a seeded counter, by seed.lua, in the same call's round trips
//     and before D (the reply, and so the seed, comes before D or the lease
//     is given back), so while the key still holds the token.
//   - Renewal (renew.lua, PEXPIRE if the token is there): D = max(D,
//     s + TTL − drift). A failed or unanswered renewal never moves D, nor
//     does one answered at or after D: the lease ended at D, and is lost.
//   - Transfer to a default waiter of the releasing Locker (transfer.lua):
//     the script replaces the releaser's token by the waiter's, PX the
//     waiter's TTL, and draws its fence (INCRBY) after every earlier
//     holder's. The waiter's lease starts once the reply is in, with D
//     from the release's send time and the waiter's TTL.
//   - Fair grant (grant.lua, run by release.lua or fair.lua): the script
//     sets the waiter's token and draws its fence likewise. The waiter
//     dates the grant from a time known to precede it: the release's send
//     time when its own Locker released, else the send time of its last
//     attempt that found the key held by someone else, provided the
//     grant's fence is above the fence counter that attempt saw (the
//     counter only grows, so such a grant was made after the attempt ran).
//     A grant whose fence is not above it was made before that attempt,
//     which saw another token in the key: it had ended, and is ignored. A
//     grant dated more than TTL/3 back is confirmed by a renewal first.
//   - Early hand-over (default mode after a transfer, or Fair to the waiter
//     first in line): the releasing lease, still valid until D_r, hands the
//     lock to a waiter of its own Locker before the transfer is sent. Until
//     the transfer lands the key holds the releaser's token (until D_r at
//     least), then the waiter's for the waiter's TTL from the send time s.
//     So the waiter's D = min(D_r, s + TTL − drift), with s read before the
//     transfer leaves, and it is not renewed until the transfer's answer
//     confirms it (D = s + TTL − drift) or ends it as lost (also an answer
//     that comes after D; and a waiter that gets to the hand-over after D
//     gives the lock back instead of returning a lease). The waiter's own
//     release waits for that answer, so it cannot reach Redis first. Its
//     fence was reserved (drawn, INCRBY 2, by the transfer or grant that
//     gave the releaser the lock), so it is above the releaser's and below
//     every later holder's. Which waiter may be handed the lock early is a
//     matter of order, not of safety (see Fair order, in doc.go, Waiting
//     and hand-overs): waiters of other Lockers that queued after the early
//     waiter arrived keep their places, as the transfer replaces the
//     releaser's token by the waiter's, keeping the queue's mark, and the
//     waiter's release hands the lock to them.
//
// Waiting adds no way to become live here either. A waiter of another
// Locker lines up in the lock's queue and is handed the lock by a Fair
// grant (above), whatever its mode; a Redlock waiter is woken by the
// release on the first master and then makes an ordinary attempt (see
// Redlock).
//
// Two properties of the wire keep these steps in the order the argument
// assumes. Calls for one lock leave in the order they were made: a
// pipeline carries at most one call per lock, and a call re-sent in full
// (NOSCRIPT) or retried while a Cluster slot moves is re-sent within its
// own round trip, before the lock's next call leaves; such retries of a
// release end at the releasing lease's deadline. And no write is sent twice
// by the client: go-redis would re-send a command whose reply timed out
// (MaxRetries, a Cluster client's MaxRedirects), so lockmw marks its writes
// as not to be retried; a second run of a transfer or grant would misreport
// what the first one did.
//
// # Fence counters
//
// Each lock's counter (prefix+"{K}:fence") only grows while
// it exists: INCR, INCRBY, and SETs that raise it (raise.lua, or the seed
// below). Every draw refreshes its expiry, the retention R (WithRetention),
// so it expires only after R without a draw, and eviction, a hand deletion
// or a restart without persistence can lose it at any time. A draw that
// finds it missing, or below 1e15 (counted from 1 by a version without
// seeds), first sets it to the server's clock in microseconds (TIME), then
// draws: fence.lua's draw, inside every script, or seed.lua after a plain
// acquisition's INCR (above). (A hand-over's release on one server sends
// the refresh as a PEXPIRE just before its script, in the same pipeline,
// and the script's draw skips its own, granter.go's releaseFirst: the
// counter then expires R after that PEXPIRE, which Redis ran just before
// the draw; a counter it found missing is seeded by the draw with its
// expiry, as above.) Why the next fence is still above every
// earlier one: a counter seeded at time t0 has moved by at most one per
// microsecond since (each move is part of an acquisition attempt or
// hand-over, which take Redis longer than that; hand-overs move it by 2 but
// cost several commands), so its value never exceeds the clock, and a seed
// drawn later is above it. That needs:
//
//   - clocks that do not step back: a server whose clock is set back by d
//     can seed below fences drawn up to d before;
//   - on Redlock and after a failover, clocks that agree: a counter raised
//     to a fence drawn from another server's clock, or replicated from the
//     old primary, is above the local clock by their difference, and a
//     seed drawn less than that after the last draw (a counter deleted or
//     evicted right after) could be below it. A counter that expired has
//     been idle for R, so clocks that differ by less than R (a day by
//     default) are enough there.
//
// The same bound makes fences store-wide on request: an acquisition made
// with StoreWideFence first raises its counter to the server's clock
// (clock_fence.lua; under Redlock on a quorum of masters), so its fence is
// above every fence drawn before, for any key, under the same assumptions.
//
// WithPermanentFences drops the assumption and the expiry: counters count
// from 1 and never expire, and a lost counter then makes fences fall.
// Fences are uint64 and fit a signed 64-bit column: seeds stay below 2^53
// (exact in the scripts' Lua numbers) until the year 2255.
//
// A request that fails without an answer may still run when Redis gets to
// it, and take the lock for a token no lease has. The Locker gives such a
// lock back with the same compare-and-act release, once Redis has answered
// it twice (the second answer comes after any request that waited out the
// same stall), and Close waits for releases and give-backs under way. A
// request that never left (its dial failed or was refused, or no
// connection was free in the pool) took nothing: it is not given back,
// and nothing is logged about it.
//
// # Failover, restarts and network faults
//
//   - On one Redis server, a lease is exclusive for as long as its context
//     is live: the context ends at the validity deadline, before the key can
//     expire on Redis' clock (assuming the clocks' rates differ by less than
//     the drift factor).
//   - With Sentinel or Cluster, each lock lives on one master and
//     replication is asynchronous: a lock or fence increment written just
//     before the master dies can be missing on the promoted replica, so a
//     second holder can get the lock and a fence can repeat. lockmw notices
//     the missing key at the next renewal and cancels the lease with
//     ErrLost, but not before. WithWaitReplicas narrows that window; it does
//     not close it. Redlock over independent masters does.
//   - A Redis restarted without persistence forgets every lock; leases held
//     there end with ErrLost (reason expired) at their next renewal.
//
// Network faults, tested with toxiproxy between the client and Redis
// (latency, reset connections, a cut link that drops all data while the
// connections stay open):
//
//   - Acquisitions under latency or a broken link fail with ErrUnavailable
//     (or the context's error when the context ends first), never
//     ErrNotAcquired and never by hanging: each Redis call is bounded by the
//     client's ReadTimeout and WriteTimeout (set them). A reply that arrives
//     after the lease's validity is rolled back and reported as
//     ErrUnavailable.
//   - Writes are sent once. A command whose reply timed out may have run in
//     Redis, and go-redis sends it again (MaxRetries, and a Cluster client's
//     MaxRedirects loop). A second run of a lockmw script answers for what
//     the first one did: a release that succeeded would say ErrLost, an
//     acquisition that succeeded would say busy while its token holds the
//     lock. So lockmw's scripts, acquisitions and queue pushes go to go-redis
//     as commands it must not retry, whatever the client's options: a
//     timeout is ErrUnavailable at once (tested through a proxy that holds
//     back the first reply past ReadTimeout and lets a retry through).
//     MOVED and ASK are still followed; renewals (idempotent) keep the
//     client's retries.
//   - A request that timed out may still run when a stalled Redis resumes,
//     and take the lock for a token no lease has. The Locker gives such
//     locks back (compare-and-delete on that token, and for Fair the queue
//     entry too; under Redlock, per master) as soon as Redis answers again,
//     retrying for up to the lease TTL, so the key is not blocked for a TTL;
//     Close gives pending ones one last bounded try.
//   - A partition while a lease is held ends the lease context with ErrLost
//     (reason deadline, wrapping the last renewal error) at the validity
//     deadline, before the key expires in Redis: the test reads the key's
//     PEXPIRETIME over a direct connection after the cut and checks that the
//     context ended before it, with the key still present.
//   - After the link heals, the Locker acquires and renews again with no
//     action from you; the client replaces the connections that lost data.
//
// # Waiting for replicas
//
// With WithWaitReplicas(n, timeout), every acquisition sends the acquire
// script and WAIT n timeout in one pipeline on one connection to the lock's
// master (WAIT counts only the writes of its own connection). If fewer
// replicas acknowledge in time, the lock is released again and the attempt
// fails with an error matching ErrNotReplicated and ErrUnavailable (an HTTP
// adapter answers 503, not 409). Tested with a real replica: in sync, the
// lock is on the replica when Acquire returns; paused with SIGSTOP, Acquire
// and TryAcquire fail with ErrNotReplicated and no lock key remains on the
// master. On a Cluster with one replica per master, pausing one replica
// fails (and rolls back) only the locks whose slots its master serves.
//
// A lock you were granted has then reached n replicas, so a failover to
// one of them keeps it. WAIT does not add:
//
//   - Strong consistency. Replication stays asynchronous: WAIT reports what
//     replicas had received, and a failover may promote one that had not
//     (Sentinel and Cluster pick by replication offset, but a partition can
//     leave the best replica out of reach); a master that crashes together
//     with its acknowledging replicas loses the lock anyway.
//   - Waiting for renewals. After a failover the promoted replica may hold
//     an earlier expiry than the one the holder's deadline is based on;
//     another client can then take the lock while the holder's context is
//     still live, until the holder's next renewal cancels it with ErrLost.
//   - Waiting for hand-overs: a lock passed straight from its holder to a
//     waiter (Fair, or a waiter of the same Locker) does not go through the
//     acquire script, so no WAIT follows it.
//
// The fence counter is written by the same script, so it is covered by the
// same acknowledgement, with the same limits. Fencing tokens checked by the
// store, not WAIT, keep data safe when two holders overlap; Redlock is the
// option when one master's failover must not hand a lock out twice.
//

package redisstore
