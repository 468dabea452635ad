// This file holds no code: it is the documentation of Redlock, the quorum
// store of lockmw.NewRedlock (redlock.go, redlock_store.go): how it
// acquires and waits, what it promises, its safety argument and the one
// argument for its fences, how it is tested, and how to upgrade a fleet.
// Package lockmw's documentation (Redlock) tells users what they must
// know: N, the restart-delay rule, and what is not promised.
//
// # Redlock
//
// NewRedlock keeps each lock on a majority of N independent Redis masters
// (N odd, at least 3: 3 masters tolerate the loss of 1, 5 of 2), sharing
// nothing: no replication between them, no Sentinel, no Cluster. The
// Locker is the same type as New's, with the same leases, watchdog,
// fences, errors and telemetry. An even or too small N, or two clients for
// the same master, give ErrInvalidOption; a nil client ErrNilClient.
//
//   - Acquire sends SET NX PX and the fence INCR to the first N/2+1
//     masters in parallel (a script on the first master, which also keeps
//     the wait queue; two plain commands on the others), and to the other
//     masters as soon as one of those does not grant it or they have not
//     all answered within 5ms; it succeeds once N/2+1 grant it. The lease's
//     first renewal (after TTL/3) takes the other masters that are free, so
//     a lease held past it survives the loss of up to N/2 masters; one
//     released before it was held on a bare majority. The lease is valid
//     for TTL − elapsed − drift from when the request was sent. A failed
//     attempt releases whatever it got at once, on all masters in parallel.
//   - TryAcquire returns ErrNotAcquired when other owners hold the lock on
//     enough masters (RetryAfter: when enough of their keys expire for a
//     majority to be free), and ErrUnavailable when so many masters fail
//     that no majority can answer.
//   - Renewals and releases fan out the same way. A lease is lost when a
//     majority no longer holds it (reason taken if some master holds
//     another owner's token, else expired), or when its deadline passes
//     without a majority confirming (reason deadline).
//   - A paused or slow master never holds up a decision the others can
//     make. Requests to each master are queued, sent in order and pipelined
//     together, so concurrent leases share round trips and a rollback
//     always reaches a master after the acquisition it undoes.
//   - Waiting is on wakes, not polling: an attempt that finds the lock held
//     on the first master queues the waiter there in the same script; the
//     release there wakes the first waiter still listening, and only that
//     one makes an attempt, decided by a majority like any other. A lost
//     wake costs latency only: a queued waiter also tries when the holder's
//     TTL runs out. A waiter counts itself queued on the first master's
//     answer only: when the other masters settle a lost attempt first, it
//     waits for that answer (a second at most) before it sleeps, since an
//     attempt the first master granted queued nothing there, and a waiter
//     sleeping as if queued would wait out a TTL with the lock free (the
//     decision itself never waits). A waiter that is done (lease,
//     give-up, error or Close) takes out any entry an attempt of its may
//     have queued, a won attempt's or one whose reply was lost included,
//     so no entry outlives Close while the first master answers: Close
//     ends its waiters' attempts, and a waiter that still outlasts Close's
//     wait leaves on the first master's client itself. One that cannot be
//     taken out then is skipped by the next release there, or goes when
//     the queue expires (see lockmw's wait_wake.go). Fair gives
//     ErrInvalidOption.
//
// Redlock promises that at most one lease is valid (its context live) at a
// time, provided that the clocks of the clients and the masters advance at
// rates that differ by less than the drift factor, and that a master that
// loses its data follows the restart-delay rule. Paused, slow or
// unreachable masters are fine, up to N/2 of them. It does not promise
// safety under arbitrary pauses, clock jumps or unbounded network delays:
// a holder stopped past its lease learns it only when it runs again, and a
// write it had in flight can still land. Only the storage layer can exclude
// that, with the fence: the suite pauses a holder process past its TTL,
// another process takes the lock and writes, and the resumed holder's
// write, fenced with the older token, is refused. Fences rise across
// different majorities (see Redlock fences, below).
//
// The restart-delay rule: a master that restarts without its data must not
// rejoin until the longest lease TTL in use has passed since it went down.
// A holder may own the lock on exactly a majority that included that
// master; restarted empty at once, it lets another client win it plus the
// masters the first holder did not have. Kept out for a TTL, every lease
// that counted on it either still holds a majority without it, or has
// reached its deadline and its keys have expired. Renewals do not lengthen
// the rule: each resets a key to one TTL.
//
// Safety (the Redlock way a lease becomes live, beside those of lockmw's
// Safety and of safety.go, How a lease becomes live):
//
//   - Redlock: the token is set on a majority of N masters, D = s + TTL −
//     elapsed − drift. Any two majorities share a master, and that master
//     refuses a second token until the first is gone there. Fences are the
//     maximum over the winning majority, raised on a majority before the
//     lease is returned (see Redlock fences, below). Which masters an attempt asks
//     (the first majority, the others when one of those does not grant
//     it) does not matter to this: any majority that granted it shares a
//     master with any other. A renewal may also take a free master where
//     the lease was never held (redlock_renew.lua): that is what an
//     acquisition does there, and D still moves only when a majority
//     confirmed the renewal, dated from its send time.
//
// # Redlock fences
//
// This is the one place the argument is made; NewRedlock and the Redlock
// backend's source refer to it. Each master keeps its own
// counter per lock, incremented by the acquire script only when that master
// grants the lock. A new holder's fence is M, the largest value its winning
// masters returned. Before the lease is handed out, a second round raises
// the counter of every master that answers to at least M (it never lowers
// one), and a majority of masters on which the holder still owns the lock
// must confirm it; the round is skipped when a majority of the winning
// masters already returned M itself. Its time counts against the lease's
// validity. Why fences strictly increase from one holder A to the next
// holder B: the majority that recorded M_A while A held the lock and the
// majority that granted the lock to B are majorities of the same N masters,
// so they share a master m. On m, M_A was recorded before A's key there was
// gone (released or expired), and B was granted m only after that,
// incrementing the same counter: B's value on m is above M_A, and B's
// fence, the maximum over its masters, is at least that value.
//
// The argument needs m to have kept its counter, or to seed it again above
// M_A (safety.go, Fence counters: a counter
// that expired after the retention, or was lost on a master whose clock is
// not behind the one M_A was drawn from, by more than the time since). A
// counter a plain master found missing is seeded there by seed.lua before
// the master answers, so a new lock's first acquisition gets differing
// seeds from the masters' clocks, and the second round makes them agree;
// after it they advance together. The second round raises every master that
// answers, so in normal operation all N counters hold the last fence and up
// to N/2 masters can lose their data without breaking the order even with
// clocks apart. Where fences must survive data loss whatever the clocks,
// run the masters with AOF (appendonly yes, appendfsync always) and
// noeviction.
//
// How it is tested (tests named Fault…, real redis-server masters paused
// with SIGSTOP, killed and restarted empty): with N=5 and 0–5 masters
// killed or paused, Acquire succeeds if and only if 3 are up, else fails
// with ErrUnavailable and leaves no lock key on the live masters; a lease on
// N=3 stays held with one master paused past the TTL, and with two paused
// its context ends while they are still paused, before the next holder's
// validity starts; a restart delayed by the TTL never double-grants, and a
// control test that restarts at once sees the double grant; 8 clients on 4
// locks over 5 masters while masters are paused, killed and restarted
// produce a history that github.com/anishathalye/porcupine checks against a
// mutex model (with a drift factor of 0.2).
//
// Upgrading a Redlock fleet: every release since the wake queue came in
// queues the same entries ("<locker id> <waiter id>"), wakes on the same
// channels and runs the same scripts, so old and new Lockers exclude each
// other and wake each other's waiters (make fleet judges both). Releases
// before b5329a3 (main of 2026-11-26) did not wake the queue when a failed
// attempt gave the lock back on the first master (its rollback, or the
// cleaner's give-back): a waiter queued behind such an attempt, of either
// version, sleeps out its lost-wake timer, the remaining TTL the attempt
// was granted, before it tries again. That costs up to one TTL per failed
// attempt on a fleet of such a release alone as much as on a mix with this
// one, and it ends when the last process of that release is replaced
// (make fleet OLD=12a1a0d, 20s, 2+2 processes of 2 workers, 10s TTL: the
// mix 58 acquisitions/s with waits up to 10.1s, that release alone 34/s
// and 10.2s, this release alone 486/s and 0.25s).
//

package redisstore
