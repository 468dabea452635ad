// Package lockmw provides distributed locks that stay safe when processes
// stall, networks drop and locks expire behind your back. Stores: Redis
// (New: standalone, Sentinel or Cluster), Redlock over N independent Redis
// masters (NewRedlock, the quorum store), and, through the store packages
// beside this one, etcd, ZooKeeper, PostgreSQL and MariaDB.
//
// The sections up to Telemetry hold for every store. What is particular to
// a store is in the sections named after it at the end, or in its own
// package's documentation.
//
// A Locker hands out a Lease per holding. A lease is owned by a random
// 128-bit token (never a goroutine); every release and renewal is one
// compare-and-act step in the store, so nobody ever deletes or extends
// another owner's lock, and releasing a lost lease leaves the new owner
// alone. One watchdog per Locker renews all of its leases at a third of
// their TTL, batched into as few round trips per tick as the store allows
// (one per server where it pipelines): 10,000 held leases cost one
// goroutine and one timer.
//
// Lost means cancelled: a lease's Context ends with cause ErrLost (a
// *LostError saying why) when its lock expired or was taken, or when its
// validity deadline (the send time of the last confirmed renewal + TTL −
// drift, on the monotonic clock) passes without a confirmed renewal, also
// while the store is unreachable, so work stops before another holder can
// start. Lease.Deadline returns that deadline and Lease.Valid checks it,
// without waiting for the timer that ends the context (timers fire late on
// a loaded host); lockmw checks it the same way wherever it acts on a
// lease.
//
// Every acquisition gets a fencing token, Lease.Fence, that strictly
// increases per key across holders (failed attempts may skip numbers), for
// stores to reject late writers (UPDATE ... WHERE fence < $token). Fences
// are uint64 values that fit a signed 64-bit column (BIGINT); how each
// store draws them is in its section or package.
//
// A lock leaves nothing behind: once released and idle (for the retention,
// WithRetention, a day by default, where the store keeps a counter or a
// queue beyond the lock), nothing of it remains in the store, and its
// fences still rise when it is used again.
//
// Acquire on a context derived from a held lease's Context, for the same
// key and Locker, returns a nested lease instead of deadlocking; the lock is
// released with the outermost lease, and nested leases end with it (with
// its cause), also those made through a context.WithoutCancel copy. Only a
// lease still held nests: a context that outlived its lease acquires as
// anyone else.
//
// Errors can be branched on: ErrNotAcquired (busy; RetryAfter says for how
// long) is never confused with ErrUnavailable (the store down or too slow)
// or with the context's Canceled or DeadlineExceeded. Bad input
// (ErrInvalidKey, ErrInvalidOption, ErrNilClient, ErrClosed) is rejected
// before anything is sent to the store. A store that answers but is not set
// up for lockmw (a SQL store's tables missing) gives ErrStoreSetup, a setup
// mistake that does not match ErrUnavailable.
//
// Lockers exclude each other when they share a store and a key prefix.
//
// A key is 1 to MaxKeyLen bytes, any bytes: paths ("a/b", "../x"), text in
// any script, spaces, control characters and NUL, bytes that are not
// UTF-8, braces, lockmw's own name suffixes ("x:q" beside "x"). Every
// store locks every such key; keys are compared as bytes, with no case
// folding, trimming or Unicode normalisation ("é" composed and decomposed
// are two locks). A store that cannot keep a key's bytes as they are
// encodes them where needed, each encoding leaving the stored form of
// every key older releases could lock unchanged (so a rolling upgrade
// keeps Lockers excluding each other): PostgreSQL keys with NUL or bytes
// that are not UTF-8 (its package documentation), Redis Cluster keys that
// start with '}' (section Redis keys), etcd and ZooKeeper escape what
// their paths cannot hold. The conformance suite locks such keys on every
// store (internal/testkit/conformance, Keys).
//
// # Leases, validity and the watchdog
//
//   - TTL: 10s by default (WithTTL; per lease WithLeaseTTL), at least
//     MinTTL (10ms); a store may need more (its ErrInvalidOption says
//     what to use).
//   - Validity: a lease is valid until the monotonic time its acquisition
//     or last confirmed renewal was sent, + TTL − drift, with drift = TTL ×
//     WithDriftFactor (default 0.01) + 2ms. An acquisition whose answer
//     arrives after that is rolled back and reported as ErrUnavailable.
//   - The lease context ends when the watchdog's timer for that deadline
//     fires. On a host where timers can fire late (an overloaded VM, a
//     paused container), raise WithDriftFactor or the TTL so that the
//     margin covers the lateness: the randomized checker (TestChaos, make
//     chaos) saw timers up to 1s late on a 2-core VM at load 9, and runs
//     with a drift factor of 0.2.
//   - Deadline and Valid: Lease.Deadline is the current validity deadline
//     (with the monotonic reading; a nested lease reports its outermost
//     lease's), moved later by each confirmed renewal. Lease.Valid reports
//     whether the lease is live and before that deadline now, by the
//     monotonic clock; a lease it finds past its deadline is lost at once
//     (cause ErrLost, reason deadline), its timer late or not. lockmw
//     checks the deadline the same way, not only the timer, wherever it
//     acts on a lease: a renewal or an early hand-over confirmed only after
//     the deadline does not revive the lease (it is lost), a lease past its
//     deadline does not nest (reentrant Acquire), Release of one returns
//     ErrLost, and a waiter handed a lock whose deadline has passed gives it
//     back. cachelock's Update and cronlock's runs check it after the write
//     or job. Check Valid before each step that must run under the lock,
//     and fence the step anyway: the deadline can pass just after.
//   - Watchdog: renews at TTL/3 (leases due within TTL/6 share the round
//     trip). A failed renewal is retried every TTL/10 (5ms to 1s) until the
//     deadline. WithoutWatchdog leases expire after their TTL, and their
//     context ends just before.
//   - The lease context carries the values of the context passed to
//     Acquire and ends when that context ends, when the lease is released,
//     or when the lock is lost. Use WithWait, not a short-lived context, to
//     bound waiting for a lease you keep beyond the call.
//   - Release is idempotent. It returns an error matching ErrLost for a
//     lost lease, ErrClosed after Close, ErrUnavailable if the store could
//     not be told (the lock then expires after its TTL).
//   - Close returns once the Locker's leases are released, releases already
//     under way have reached the store, and locks handed to its waiters as
//     it closed have been given back: it leaves no lock of its own behind
//     while the store answers.
//
// # Waiting
//
// Acquire waits for a busy lock without polling where the store can tell
// it when to try, and without a herd. How depends on what the store offers
// (see Stores): a store that keeps a queue (etcd, ZooKeeper, and the
// queues of the stores at the end) serves its waiters in turn and wakes
// only the next one; a store that notifies releases wakes its default-mode
// waiters, which retry; otherwise waiters back off (within a range tuned
// to the store's round trip). Waiters of one key in one Locker queue
// in arrival order and only the first retries.
//
//   - Fair: waiters are served in the order they arrived, whatever their
//     Locker; a Fair waiter is never overtaken by a waiter that arrived
//     after it, but for the exceptions its store's section or package
//     names. TryAcquire with Fair takes a free lock only when nobody is
//     queued. A store whose waiters are woken from a queue on one member
//     of a quorum refuses Fair with ErrInvalidOption.
//   - A lost message costs latency, never liveness: queued waiters also
//     check the lock when the holder's TTL would run out.
//   - Giving up: WithWait(d) returns ErrNotAcquired, and a context that
//     ends returns its error, each within a few milliseconds, leaving no
//     queue entry and no subscription behind.
//
// # Safety: how a lease becomes live
//
// The promise is that at most one lease of a key is live at a time, and
// that each holder's fence is above every earlier holder's. A lease is live
// from the moment Acquire returns it until its context ends or its validity
// deadline D passes, whichever comes first: the watchdog's timer ends the
// context at D, and, as a timer can fire late, lockmw checks D itself
// before it acts on a lease (Lease.Valid). The whole argument rests on one
// invariant:
//
//	while a lease with token t is live, the store holds the lock for t.
//
// Two live leases would need the store to hold the lock for two tokens at
// once, which its contract excludes (package lockmw/internal/store): only
// compare-and-act steps write the lock, each acting for the token that
// holds it (renew, release, and where the store has them, hand-overs), and
// an acquisition takes only a free lock. So a token, once the store reports
// it acquired with a time v (no later than the moment from which the store
// keeps the lock for the TTL: the send time s of the request, on our
// monotonic clock, for a store that sets the lock with an expiry), holds
// the lock until its owner's step replaces it, or at least until v + TTL
// on the store's clock, which is no earlier than v + TTL − drift on ours
// (WithDriftFactor, plus a floor for timer slack). Each way a lease
// becomes live sets D no later than that, and no later than any bound it
// inherits:
//
//   - Acquisition: D = v + TTL − drift. A reply that comes after D is given
//     back, never returned. The store draws the fence in the step that
//     takes the lock, or after it while the lock is still held for the
//     token, so above every earlier holder's (each drew its own before its
//     lock was released, or its reply came too late for it to become
//     live). Each store argues why its lock is held by one token at a time
//     and why its fence is above every earlier holder's: New's store in
//     its section on how a lease becomes live (Acquisition, Fence
//     counters), the quorum store (a majority of masters) in its, the
//     other stores in their packages (etcd: the key of the lock's
//     directory with the lowest create revision holds it, and that
//     revision is the fence).
//   - Quorum acquisition (the quorum store): the token is set on a
//     majority of N independent servers, D = s + TTL − elapsed − drift;
//     any two majorities share a server, which refuses a second token
//     until the first is gone there, and the fence is raised on a majority
//     before the lease is returned (argued, with why its fences rise, in
//     the store's section).
//   - Renewal (a compare-and-act extension, if the token is there): D =
//     max(D, s + TTL − drift). A failed or unanswered renewal never moves
//     D, nor does one answered at or after D: the lease ended at D, and is
//     lost.
//   - Transfer, Fair grant, Early hand-over: a store whose release can hand
//     the lock straight to a waiter (store.Granter; today only New's
//     store) makes leases live three more ways, each argued in that
//     store's section on how a lease becomes live (Transfer, Fair grant,
//     Early hand-over).
//   - Nested lease (reentrant Acquire): it shares the outermost lease's
//     token and fence, is made only while that lease is live and before
//     its D, and ends when it ends (before the outermost lease's context
//     does, so whoever sees that context ended sees the nested ones ended).
//
// Waiting adds no way to become live. A waiter is handed the lock by one
// of the ways above (its turn in a store's queue is an acquisition, or a
// Fair grant), or makes an ordinary attempt when woken.
//
// A request that fails without an answer may still run when the store gets
// to it, and take the lock for a token no lease has. The Locker gives such
// a lock back with the same compare-and-act release, and Close waits for
// releases and give-backs under way; when exactly the store has answered
// enough to know, and which requests took nothing, is the store's (see the
// sections of New's store below, and the store packages).
//
// # Guarantees and their limits
//
//   - On a store that holds each lock in one place (one server, or a
//     consensus of servers such as etcd and ZooKeeper), a lease is exclusive
//     for as long as its context is live: the context ends at the validity
//     deadline, before the lock can expire on the store's clock (assuming
//     the clocks' rates differ by less than the drift factor).
//   - A paused holder (GC, SIGSTOP) cannot see its own context end while it
//     is paused; when it resumes its context is already cancelled, but a
//     write already in flight can still land. That is what Lease.Fence is
//     for: make the store reject tokens lower than the last one it saw.
//   - A store that replicates asynchronously can lose a lock or a fence in
//     a failover (the limits of New's store with Sentinel or Cluster, and
//     WithWaitReplicas, are in its sections).
//   - A network partition between a holder and the store is a lost lease:
//     the context ends before the lock can expire on the store's clock, and
//     another holder gets the lock after that.
//   - Timers: every deadline above is enforced by a timer of the holder's
//     own process. A process that is paused or starved of CPU fires it
//     late; the drift (TTL × drift factor + 2ms) is the only slack. lockmw
//     checks the deadline itself wherever it acts on a lease, but your
//     code sees a late timer as a context still live: check Lease.Valid
//     before each step that matters. On a loaded machine raise
//     WithDriftFactor, and fence every write that matters.
//
// # Network faults
//
//   - Acquisitions under latency or a broken link fail with ErrUnavailable
//     (or the context's error when the context ends first), never
//     ErrNotAcquired and never by hanging: each call to the store is
//     bounded by its client's timeouts (set them) and by the lease TTL. A
//     request that the TTL bound ended says which store did not answer
//     which request within how long, and the last connection error the
//     store's client saw, when the store can tell (etcd and ZooKeeper); it
//     still matches context.DeadlineExceeded. A reply that arrives after
//     the lease's validity is rolled back and reported as ErrUnavailable.
//   - A request that timed out may still run when a stalled store resumes,
//     and take the lock for a token no lease has: the Locker gives it back
//     (see Safety), so the lock is not blocked for a TTL.
//   - A partition while a lease is held ends the lease context with ErrLost
//     (reason deadline, wrapping the last renewal error) at the validity
//     deadline, before the lock expires in the store.
//   - After the link heals, the Locker acquires and renews again with no
//     action from you.
//
// How each store's tests check this is in its sections (New's store:
// through toxiproxy, with its failover and restarts).
//
// # Stores
//
// Every store, New's and the quorum store included, sits behind
// one contract, package lockmw/internal/store. The Locker (leases, waiting,
// the watchdog's schedule, validity deadlines, nesting, telemetry) asks a
// store for one step on its objects per call: an acquire, release or renew
// step, each compare-and-act for a token, with the safety contract the
// Safety section rests on (a lock reported acquired at v is held for that
// token until it is released or v + TTL on the store's clock; its fence is
// above every earlier holding's). Beyond that a store offers what it has,
// and the Locker finds it by type assertion:
//
//   - Notifier: a way to wait until a lock may have become free, for
//     default-mode waiters (they retry then); without it, they back off,
//     within the range Backoff gives.
//   - Queue: an acquisition that queues (the lock is a queue, as in etcd or
//     ZooKeeper), needed for Fair; FairOnly: a queue for Fair waiters only,
//     default-mode waiters polling instead.
//   - LossNotifier: leases end as soon as the store knows their holding
//     ended (a ZooKeeper session expiry).
//   - LeftNothing: a way to tell that a failed acquisition took nothing the
//     Locker must give back.
//   - Named: the store's name, for the Locker's messages about it.
//   - Diagnoser: the last error the store's client saw reaching the store,
//     named in the error of a request that ran out its bound (below).
//   - Logging: the Locker's logger, for the store's own warnings (one that
//     the store could not be reached when the Locker was made).
//   - FireClaimer: a place for the fire claims of cronlock's Scheduler.
//   - Granter: a release that hands the lock to a waiter in the same step
//     (transfers, fair grants, early hand-overs), and WakeQueue: waiters
//     woken one at a time from a queue kept on one member of a quorum
//     (New's store and the quorum store, see their sections).
//
// etcd.New (package github.com/lockmw/lockmw/lockmw/etcd, a module of its
// own so that importing lockmw never builds the etcd client) keeps locks in
// etcd, with the same leases, watchdog, validity deadlines, nesting,
// waiting and telemetry; its package documentation describes its keys,
// leases, safety and waiting. So do lockmw/zookeeper, lockmw/postgres and
// lockmw/mysql (MariaDB). The store packages are part of this repository,
// released in lockstep with this module (the root module): the contract
// between a store and the Locker is internal to the repository, so a store
// of your own cannot plug in. Every store runs one conformance suite and
// the randomized safety checker.
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
// lock.lost_reason). Give keys that embed ids a template name such as
// "order:{id}" to keep metric cardinality low. Without
// WithTracerProvider/WithMeterProvider the global providers are used; while
// none is set, telemetry allocates nothing.
//
// # Redis: client settings
//
// The Locker does not own its client: close the client after the Locker.
// Every Redis call is bounded by the client's ReadTimeout and WriteTimeout,
// and by context deadlines when the client sets ContextTimeoutEnabled.
// Configure the client for a lock:
//
//	client := redis.NewClient(&redis.Options{
//		Addr:                  "localhost:6379",
//		DialTimeout:           300 * time.Millisecond,
//		ReadTimeout:           300 * time.Millisecond,
//		WriteTimeout:          300 * time.Millisecond,
//		MaxRetries:            -1,
//		DialerRetries:         1,
//		PipelinePoolSize:      -1,
//		ContextTimeoutEnabled: true,
//	})
//
// go-redis repeats a read whose reply timed out up to MaxRetries times (3
// by default) and redials a refused connection up to DialerRetries times
// (5, 100ms apart), so with its defaults an outage is reported only after
// several timeouts (2.3–3.4s with 300ms timeouts). With the settings above
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
// pipeline pool. New and NewRedlock log one warning, naming the settings
// at fault and what to set, when the client has no read or write timeout,
// when one failed command can take longer than a third of the TTL
// (ReadTimeout or WriteTimeout times one plus MaxRetries, plus
// MaxRedirects on Cluster), or when its pipelines have a pool of their own
// (PipelinePoolSize not -1). Turning the client's retries off loses
// nothing: lockmw never lets go-redis re-send
// its writes (see Redis: failover, restarts and network faults) and does
// its own safe retrying (a failed renewal is retried every TTL/10 until the
// lease's deadline). Keep the timeouts well below the TTL: a reply that
// arrives after the lease's validity deadline is rolled back.
// WithWaitReplicas' timeout must be shorter than ReadTimeout.
//
// # Redis: waiting and hand-overs
//
// On the Redis store of New, waiting goes as follows (Redlock's waiters
// are described under Redlock).
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
//     (an early hand-over; its validity is bounded as described under
//     Redis: how a lease becomes live, it is not renewed until Redis
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
// # Redis: how a lease becomes live
//
// The Redis store of New keeps the invariant of Safety with its lock key:
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
//     matter of order, not of safety (see Fair order, under Redis: waiting
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
// Fence counters. Each lock's counter (prefix+"{K}:fence") only grows while
// it exists: INCR, INCRBY, and SETs that raise it (raise.lua, or the seed
// below). Every draw refreshes its expiry, the retention R (WithRetention),
// so it expires only after R without a draw, and eviction, a hand deletion
// or a restart without persistence can lose it at any time. A draw that
// finds it missing, or below 1e15 (counted from 1 by a version without
// seeds), first sets it to the server's clock in microseconds (TIME), then
// draws: fence.lua's draw, inside every script, or seed.lua after a plain
// acquisition's INCR (above). Why the next fence is still above every
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
// # Redis: failover, restarts and network faults
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
// # Redis Cluster
//
// Pass a *redis.ClusterClient to New; nothing else changes.
//
//   - One slot per lock: the keys of a lock share the hash tag {K} (a key
//     K that starts with '}' has a tag of its own, section Redis keys), so
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
//     same asynchronous-replication window as Sentinel (see Redis:
//     failover, restarts and network faults). cluster-require-full-coverage
//     no keeps the locks of healthy masters working while another master is
//     down.
//
// # Redis: waiting for replicas
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
//     the queue expires (see wait_wake.go). Fair gives ErrInvalidOption.
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
// Safety (the Redlock way a lease becomes live, beside those of Safety
// and Redis: how a lease becomes live):
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
// Redlock fences. This is the one place the argument is made; NewRedlock
// and the Redlock backend's source refer to it. Each master keeps its own
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
// M_A (Fence counters, under Redis: how a lease becomes live: a counter
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
// # Redis keys
//
// Fences are a counter per lock, started from the Redis server's clock in
// microseconds: a counter that expired or was lost otherwise starts again
// from the server clock, above every fence before it. Give locks a Redis
// that never evicts keys. The watchdog's renewals are pipelined into one
// round trip per tick (per master on a Cluster).
//
// A lock on key K (1 to MaxKeyLen bytes) uses prefix+"{K}" (the owner
// token, with the lease's expiry), prefix+"{K}:fence" (the fencing
// counter), prefix+"{K}:q" (the wait queue, only while waiters queue), and
// the channels prefix+"{K}:n" (releases) and prefix+"{K}:g:ID" (hand-overs
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
// rising (Redis: how a lease becomes live, Fence counters).
// WithPermanentFences keeps the counters forever instead (one small key per
// distinct lock name), counting from 1.
//
// Eviction: a Redis whose maxmemory-policy is not noeviction can evict a
// held lock's key (allkeys-*, and volatile-* too: lock keys always have
// an expiry, counters and queues do now), and then a second holder gets
// the lock while the first still works; no client can make that safe.
// New and NewRedlock read maxmemory-policy (CONFIG GET; a server that
// refuses it is skipped) and log one warning naming the servers that may
// evict. Give locks a Redis with noeviction, or a Redis of their own. A
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
// # Redis: performance
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
//     the acquisitions granted in a fixed 3s window (-lockmw.xwarmup,
//     -lockmw.xwindow), whatever b.N is. On Linux the processes time-stamp
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
// line up; the release script's GET, LPOP, SET, INCRBY, PEXPIRE, PUBLISH), in FIFO
// order, so jain is 1.000 and wait p99 about 16 holds. util is bounded by
// how fast another process can be told: a ring of processes that does
// nothing but pass a turn with one PUBLISH is the ceiling, and lockmw's
// hand-off comes within 3–5% of it. Redlock needs two such hops (the wake,
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
package lockmw
