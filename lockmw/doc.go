// Package lockmw provides distributed locks on Redis that stay safe when
// processes stall, networks drop and keys expire behind your back.
//
// A Locker hands out a Lease per holding. A lease is owned by a random
// 128-bit token (never a goroutine); every release and renewal is a
// compare-and-act Lua script, so nobody ever deletes or extends another
// owner's lock. One watchdog per Locker renews all of its leases at a third
// of their TTL, pipelined into one round trip per tick.
//
// Lost means cancelled: a lease's Context ends with cause ErrLost (a
// *LostError saying why) when its key expired or was taken, or when its
// validity deadline (last confirmed renewal + TTL − drift, on the monotonic
// clock) passes without a confirmed renewal, also while Redis is
// unreachable, so work stops before another holder can start.
//
// Every acquisition gets a fencing token, Lease.Fence, that strictly
// increases per key across holders, for stores to reject late writers
// (UPDATE ... WHERE fence < $token).
//
// Acquire on a context derived from a held lease's Context, for the same
// key and Locker, returns a nested lease instead of deadlocking; the lock is
// released with the outermost lease, and nested leases end with it (with
// its cause). Only a lease still held nests: a context that outlived its
// lease (context.WithoutCancel keeps the values) acquires as anyone else.
//
// # Safety: how a lease becomes live
//
// The promise is that at most one lease of a key is live at a time, and
// that each holder's fence is above every earlier holder's. A lease is live
// from the moment Acquire returns it until its context ends; the watchdog
// ends it at its validity deadline D at the latest. The whole argument
// rests on one invariant:
//
//	while a lease with token t is live, the lock key holds t.
//
// Two live leases would need the key to hold two tokens at once, which it
// cannot. Only lockmw's compare-and-act scripts write the key, and each acts
// for the token that is there (renew, release, transfer, grant); an
// acquisition writes only a missing key. So a token, once set with PX p by a
// request sent at time s (our monotonic clock), stays until its owner's
// script replaces it, or at least until s + p on Redis' clock, which is no
// earlier than s + p − drift on ours (WithDriftFactor, plus a floor for
// timer slack). Each way a lease becomes live sets D no later than that,
// and no later than any bound it inherits:
//
//   - Acquisition (SET NX PX, acquire.lua, fair.lua on a free lock): D =
//     s + TTL − drift, s being when the request left. A reply that comes
//     after D is given back, never returned. The fence is drawn (INCR)
//     right after the SET: every earlier holder drew its own before its
//     key was released, or its reply came too late for it to become live.
//   - Renewal (renew.lua, PEXPIRE if the token is there): D = max(D,
//     s + TTL − drift). A failed or unanswered renewal never moves D.
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
//   - Early hand-over (default mode after a transfer, or Fair to the
//     waiter first in line): the releasing lease, still valid until D_r,
//     hands the lock to a waiter of its own Locker before the transfer is
//     sent. Until the transfer lands the key holds the releaser's token
//     (until D_r at least), then the waiter's for the waiter's TTL from the
//     send time s. So the waiter's D = min(D_r, s + TTL − drift), with s
//     read before the transfer leaves, and it is not renewed until the
//     transfer's answer confirms it (D = s + TTL − drift) or ends it as
//     lost. The waiter's own release waits for that answer, so it cannot
//     reach Redis first. Its fence was reserved (drawn, INCRBY 2, by the
//     transfer or grant that gave the releaser the lock), so it is above
//     the releaser's and below every later holder's. Waiters of other
//     Lockers that queued meanwhile keep their places: the transfer still
//     replaces the releaser's token by the waiter's, keeping the queue's
//     mark, and the waiter's release hands the lock to them.
//   - Nested lease (reentrant Acquire): it shares the outermost lease's
//     token and fence, is made only while that lease is live, and ends
//     when it ends.
//   - Another store (etcd.New, package lockmw/etcd, a module of its
//     own): the store reports the lock acquired with a time v no later
//     than the moment from which it keeps the lock for TTL, and D = v +
//     TTL − drift; renewals as above. The store's package argues why its
//     lock is held by one token at a time and why its fence is above every
//     earlier holder's (etcd: the key of the lock's directory with the
//     lowest create revision holds it, and that revision is the fence).
//   - Redlock: the token is set on a majority of N masters, D = s + TTL −
//     elapsed − drift. Any two majorities share a master, and that master
//     refuses a second token until the first is gone there. Fences are the
//     maximum over the winning majority, raised on a majority before the
//     lease is returned (see NewRedlock). Which masters an attempt asks
//     (the first majority, the others when one of those does not grant
//     it) does not matter to this: any majority that granted it shares a
//     master with any other. A renewal may also take a free master where
//     the lease was never held (redlock_renew.lua): that is what an
//     acquisition does there, and D still moves only when a majority
//     confirmed the renewal, dated from its send time.
//
// Waiting adds no way to become live. A waiter of another Locker lines up
// in the lock's queue and is handed the lock by a Fair grant (above),
// whatever its mode; a Redlock waiter is woken by the release on the first
// master and then makes an ordinary attempt.
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
// A request that fails without an answer may still run when Redis gets to
// it, and take the lock for a token no lease has. The Locker gives such a
// lock back with the same compare-and-act release, once Redis has answered
// it twice (the second answer comes after any request that waited out the
// same stall), and Close waits for releases and give-backs under way.
//
// # Deployments
//
// New takes a standalone or Sentinel-managed *redis.Client or a
// *redis.ClusterClient. On Cluster each lock lives on the master serving
// its hash tag's slot, renewals go to each master in one round trip per
// tick, and an acquisition retries briefly while its slot is being
// migrated. WithWaitReplicas makes acquisitions wait for replica
// acknowledgement (WAIT) and roll back without it; replication stays
// asynchronous, so fencing tokens remain what protects the data.
//
// etcd.New (package lockmw/etcd, in the module
// github.com/lockmw/lockmw/lockmw/etcd, so that importing lockmw alone never
// builds the etcd client) keeps locks in etcd, with the same leases,
// watchdog, waiting and telemetry.
//
// # Redis keys
//
// A lock on key K uses prefix+"{K}" (the owner token, with the lease's
// expiry) and prefix+"{K}:fence" (the fencing counter). The counter never
// expires, so that tokens keep increasing: one small key per distinct lock
// name stays in Redis.
//
// # Telemetry
//
// Spans (tracer scope ScopeName): lockmw.acquire, lockmw.release, and
// lockmw.renew for failed renewals and lost leases, with attributes
// lock.name (WithName, default the key), lock.outcome
// (acquired|busy|timeout|error|lost|ok), lock.wait_ms and lock.fence.
// Metrics: lockmw.acquire.duration (s, by lock.name and lock.outcome),
// lockmw.hold.duration (s), lockmw.held (up-down), lockmw.renewals (by
// lock.outcome ok|error) and lockmw.lost (by lock.name and
// lock.lost_reason). Without WithTracerProvider/WithMeterProvider the global
// providers are used; while none is set, telemetry allocates nothing.
package lockmw
