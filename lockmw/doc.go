// Package lockmw provides distributed locks that stay safe when processes
// stall, networks drop and locks expire behind your back. Stores: Redis
// (New: standalone, Sentinel or Cluster), Redlock over N independent Redis
// masters (NewRedlock, the quorum store), and, through the store packages
// beside this one, etcd, ZooKeeper, PostgreSQL and MariaDB.
//
// The sections up to Telemetry hold for every store. The sections named
// after Redis at the end hold what a Redis user must know; how each store
// works and why it is safe is in its own package's documentation (Redis's
// and Redlock's in lockmw/internal/redisstore).
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
// start with '}' (Redis keys), etcd and ZooKeeper escape what
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
//     live). Each store argues in its package why its lock is held by one
//     token at a time and why its fence is above every earlier holder's
//     (New's store: lockmw/internal/redisstore, safety.go; the quorum
//     store: redlock_safety.go there; etcd: the key of the lock's
//     directory with the lowest create revision holds it, and that
//     revision is the fence).
//   - Quorum acquisition (the quorum store): the token is set on a
//     majority of N independent servers, D = s + TTL − elapsed − drift;
//     any two majorities share a server, which refuses a second token
//     until the first is gone there, and the fence is raised on a majority
//     before the lease is returned (argued, with why its fences rise, in
//     redisstore's redlock_safety.go).
//   - Renewal (a compare-and-act extension, if the token is there): D =
//     max(D, s + TTL − drift). A failed or unanswered renewal never moves
//     D, nor does one answered at or after D: the lease ended at D, and is
//     lost.
//   - Transfer, Fair grant, Early hand-over: a store whose release can hand
//     the lock straight to a waiter (its policy, store.Waits; today only
//     New's store) makes leases live three more ways, each argued in that
//     store's package (redisstore's safety.go, How a lease becomes live:
//     Transfer, Fair grant, Early hand-over).
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
// enough to know, and which requests took nothing, is the store's (its
// package; New's store: redisstore's safety.go, Fence counters).
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
//     a failover (New's store with Sentinel or Cluster, and
//     WithWaitReplicas: section Redis: failover, restarts and replicas).
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
// How each store's tests check this is in its package (New's store:
// through toxiproxy, redisstore's safety.go, Failover, restarts and
// network faults).
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
// above every earlier holding's). Beyond that a store offers what it has
// (a way to wait for a release, a queue, a hand-over in the release's
// step, ...), and the Locker finds it by type assertion: the capabilities
// are the interfaces of package lockmw/internal/store. What each store
// draws its fences from and how its waiters wait:
//
//	store (constructor)        fence                  waiting
//	Redis (New)                INCR of a counter      the lock's queue; a release
//	                           seeded from the clock  hands over to one waiter
//	Redlock (NewRedlock)       highest of a majority  a queue on the first master
//	                           raised on a majority   wakes one waiter, which tries
//	etcd (etcd.New)            the create revision    queue by create revision
//	ZooKeeper (zookeeper.New)  the node's czxid       sequential nodes, each
//	                                                  watching its predecessor
//	PostgreSQL (postgres.New)  nextval of a sequence  queue table; NOTIFY wakes
//	                                                  the first waiter
//	MariaDB (mysql.New)        NEXTVAL of a sequence  backoff; Fair waiters queue
//	                                                  in a table
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
// # Inspecting locks
//
// Locker.Inspect reports, read-only, whether a lock is held, for how long
// yet by the store's clock, with which fence, since when, by which holder
// (the WithHolderInfo of the Locker that holds it, never read for safety)
// and how many queue entries wait for it; Locker.Locks lists the held
// locks under the Locker's prefix a page at a time, each page a bounded
// amount of the store's work. Every store answers, and every field carries
// its exactness on that store (Exact, AtMost, AtLeast or Unknown): a store
// reports what it keeps and invents nothing (see each store's package
// documentation, "Inspecting"). The lockmw.waiting metric counts the
// Acquire calls that wait.
//
// There is no force-release. A holder that is stuck or gone loses its
// lock when its TTL runs out (or at once, when its Locker closes); a lock
// released by hand while its holder still works would be the one way to
// let two holders run at once, and fences make it unnecessary: a storage
// layer that checks them refuses the stale holder's writes.
//
// # Telemetry
//
// Spans (tracer scope ScopeName): lockmw.acquire, lockmw.release, and
// lockmw.renew for failed renewals and lost leases, with attributes
// lock.name (WithName, default the key), lock.outcome
// (acquired|busy|timeout|error|lost|ok), lock.wait_ms and lock.fence.
// Metrics: lockmw.acquire.duration (s, by lock.name and lock.outcome),
// lockmw.hold.duration (s), lockmw.held (up-down), lockmw.waiting
// (up-down, by lock.name: Acquire calls waiting for a lock another owner
// holds, from their first wait until they return; a TryAcquire or a busy
// WithWait(0) never counts), lockmw.renewals (by lock.outcome ok|error)
// and lockmw.lost (by lock.name and lock.lost_reason). Give keys that embed ids a template name such as
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
// With go-redis' defaults (MaxRetries 3, DialerRetries 5) an outage is
// reported only after several timeouts (2.3–3.4s with 300ms timeouts);
// with the settings above, after at most about one timeout.
// PipelinePoolSize -1 runs pipelines on the main pool: with a pool of
// their own, every acquisition on a paused Redis takes two timeouts.
// Turning the client's retries off loses nothing: lockmw never lets
// go-redis re-send its writes (a second run of a script would misreport
// what the first did) and does its own safe retrying (a failed renewal is
// retried every TTL/10 until the lease's deadline). New and NewRedlock log
// one warning, naming the settings at fault and what to set, when the
// client has no read or write timeout, when one failed command can take
// longer than a third of the TTL (ReadTimeout or WriteTimeout times one
// plus MaxRetries, plus MaxRedirects on Cluster), or when its pipelines
// have a pool of their own. Keep the timeouts well below the TTL: a reply
// that arrives after the lease's validity deadline is rolled back.
// WithWaitReplicas' timeout must be shorter than ReadTimeout. The
// measurements behind these settings, and how concurrent calls share a
// timeout: package lockmw/internal/redisstore, Client settings.
//
// # Redis: waiting
//
// On New's store a waiter whose lock is held by another Locker lines up in
// the lock's queue in Redis, in either mode; a release hands the lock to
// the first waiter still listening and tells only that one, so the lock is
// never free while others are queued. Waiters of the holder's own Locker
// are handed the lock by the release itself, without waiting for Redis'
// answer. Fair order's one exception: while a Cluster slot is being
// migrated, an attempt may take a lock whose holder's key expired ahead of
// the queued waiters. Redlock's waiters queue on the first master, whose
// release wakes one of them to make an ordinary attempt; Redlock refuses
// Fair. How, and why it keeps order and exclusion: lockmw/internal/redisstore.
//
// # Redis: failover, restarts and replicas
//
//   - With Sentinel or Cluster, each lock lives on one master and
//     replication is asynchronous: a lock or fence increment written just
//     before the master dies can be missing on the promoted replica, so a
//     second holder can get the lock and a fence can repeat. lockmw notices
//     the missing key at the next renewal and cancels the lease with
//     ErrLost, but not before. WithWaitReplicas narrows that window; it does
//     not close it. Redlock over independent masters does.
//   - A Redis restarted without persistence forgets every lock; leases held
//     there end with ErrLost (reason expired) at their next renewal.
//   - Cluster: pass a *redis.ClusterClient to New; nothing else changes. A
//     slot left half-migrated makes acquisitions of its locks fail with
//     ErrUnavailable until an operator finishes it (redis-cli --cluster fix).
//   - WithWaitReplicas(n, timeout): each acquisition also sends WAIT n
//     timeout to the lock's master; if fewer replicas acknowledge in time,
//     the lock is released again and the attempt fails with an error
//     matching ErrNotReplicated and ErrUnavailable. A lock (and fence) you
//     were granted has then reached n replicas. WAIT does not make
//     replication synchronous (a failover may still promote a replica that
//     had not acknowledged), nor wait for renewals or for hand-overs from
//     a holder straight to a waiter. Its timeout must be shorter than the
//     client's ReadTimeout. Fences checked where the data lives, not WAIT,
//     keep data safe when two holders overlap.
//
// # Redis keys
//
// A lock on key K uses prefix+"{K}" (the holder, for its lease's TTL),
// prefix+"{K}:fence" (the fence counter), while waiters queue,
// prefix+"{K}:q", and, for a Locker given WithHolderInfo, prefix+"{K}:i"
// (its description, with its token and the server's time, expiring with
// the lock); on a Cluster a K that starts with '}' is named
// prefix+"#{H}{K}" instead. The counter and the queue expire once the lock
// has been idle for the retention (WithRetention, a day by default).
//
// A counter found missing (expired, evicted, lost) is seeded from the
// Redis server's clock in microseconds, so fences keep rising, provided
// that server clocks do not step back and, on Redlock and after a
// failover, agree to within the time since the counter's last draw (the
// retention, for a counter that expired). WithPermanentFences drops that
// assumption: counters count from 1 and never expire, and a lost one makes
// fences fall. Lockers sharing a prefix must agree on it.
//
// Eviction: a Redis whose maxmemory-policy is not noeviction can evict a
// held lock's key (allkeys-*, and volatile-* too: lock keys always have an
// expiry), and then a second holder gets the lock while the first still
// works; no client can make that safe. New and NewRedlock read
// maxmemory-policy (CONFIG GET) and log one warning naming the servers
// that may evict. Give locks a Redis with noeviction, or one of their own.
//
// Upgrading from a version whose counters never expire: an old version
// that finds a counter the new one let expire starts it at 1, so finish
// the rolling upgrade within the retention of starting it (or give the new
// version a retention longer than the rollout).
//
// # Redlock
//
// NewRedlock keeps each lock on a majority of N independent Redis masters
// (N odd, at least 3: 3 tolerate the loss of 1, 5 of 2), sharing nothing:
// no replication, Sentinel or Cluster. Its Locker has the same leases,
// fences, errors and telemetry. An even or too small N, or two clients for
// one master, give ErrInvalidOption. It promises that at most one lease is
// valid at a time, provided that the clocks of the clients and the masters
// advance at rates that differ by less than the drift factor, and that a
// master that loses its data follows the restart-delay rule; not under
// arbitrary pauses, clock jumps or unbounded network delays (fence your
// writes).
//
// The restart-delay rule: a master that restarts without its data must not
// rejoin until the longest lease TTL in use has passed since it went down.
// A holder may own the lock on exactly a majority that included that
// master; restarted empty at once, it lets another client win it plus the
// masters the first holder did not have. Kept out for a TTL, every lease
// that counted on it either still holds a majority without it, or has
// reached its deadline. Where fences must survive data loss whatever the
// clocks, run the masters with AOF (appendonly yes, appendfsync always)
// and noeviction. How Redlock works, its safety argument, how it is tested
// and upgraded: lockmw/internal/redisstore, redlock_safety.go.
//
// # Redis: performance
//
// make bench runs the benchmarks against a redis-server it starts and
// prints the figures (the README quotes none: they are the machine's).
// What they measure and why they are what they are: redisstore's
// Performance.
package lockmw
