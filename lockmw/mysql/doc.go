// Package mysql keeps lockmw locks in a MariaDB table: New returns a
// *lockmw.Locker whose leases, watchdog, validity deadlines, nesting,
// waiting and telemetry are lockmw's, and whose locks are rows. It lives in
// its own module (github.com/lockmw/lockmw/lockmw/mysql), so programs that
// only import lockmw do not build a SQL driver. It talks to the server
// through a *sql.DB of github.com/go-sql-driver/mysql.
//
// # Servers: MariaDB, not MySQL
//
// Fences come from a SEQUENCE object, which MariaDB has since 10.3 and
// MySQL (8.x included) does not: New refuses a server whose VERSION() is
// not MariaDB 10.3 or later (ErrNotMariaDB). The store is tested on
// MariaDB 10.11 (Debian 12's mariadb-server: the tests, the randomized
// checker and the benchmarks start it). Nothing is tested on MySQL 8, nor
// on Galera clusters or MariaDB replication with failover: the store's
// promise is the promise of one server's committed data (below).
//
// # Tables
//
// CreateTable creates, or Schema prints for a migration of one's own, for a
// base name T (DefaultTable, "lockmw_locks", unless NewWithTable names
// another): the table T, one row per lock (prefix and name as the primary
// key, the holder's token, the fence, expires_at, a DATETIME(6) in UTC,
// and queue_seen, 0 until a Fair waiter queues for the lock, on rows this
// version inserted; holder and held_since, NULL unless a Locker given
// lockmw.WithHolderInfo took the holding, see Inspecting); the sequence T_fence (NOCACHE); the table T_queue of waiters (one
// row per waiting token: its place seq, an expires_at, and handover, 1
// when its waiter takes hand-overs); and the table T_claims of cronlock's
// fire claims. New fails with ErrMissingTable, saying how to create them,
// when the server says they are missing (tables made before T_queue
// existed lack it: CreateTable, idempotent, adds it), and with
// ErrOldSchema when T_queue lacks the column handover (made by a version
// before hand-overs) or T lacks queue_seen (made by a version before
// plain attempts skipped an unused queue): CreateTable, or the ALTER
// TABLE statements of Schema, add them; Lockers of those versions keep
// working on the migrated tables, see Rolling upgrades); a server New cannot reach, or that refuses the
// login, is warned about once (with the address when the driver's error
// names it, and the cause), and the Locker is made all the same, since
// services often start before their database. Tables missing later make
// requests fail with ErrMissingTable, which matches lockmw.ErrStoreSetup,
// not lockmw.ErrUnavailable: a setup mistake, which the adapters answer
// as one (HTTP 500, gRPC Internal, logged once).
//
// Every time is the database's: expires_at is computed and compared with
// UTC_TIMESTAMP(6), never with the client's clock nor with NOW(6) (which
// follows the session's time_zone: two sessions in different zones, or a
// daylight-saving change, would disagree on expiries), so no DSN setting
// matters to it. MariaDB evaluates UTC_TIMESTAMP(6) once per statement, at
// its start: an expiry check sees a row no more expired than it is, and a
// new expiry is no later than start + TTL. Strings travel as hex: in the
// statement text as hex literals, or, in the two statements of every
// uncontended lock and unlock (the UPDATE of a known row below, and the
// plain release), as parameters decoded by UNHEX(?) of statements the
// server prepared once per connection (prepared.go: it then parses them
// once, not at every call; a server at max_prepared_stmt_count gets the
// same statements as text). Either way every statement is one round trip
// whatever the DSN, and no character set changes a string's bytes.
// clientFoundRows does not matter (see
// Acquisition); parseTime is not used. The server's clock must not be
// stepped forward (slewing, as NTP does, is fine): that would expire rows
// early, as it would expire Redis keys early.
//
// # Acquisition
//
// One statement. On a lock whose row the Locker saw, with queue_seen = 0
// (no Fair waiter ever queued for it), it is one UPDATE of the row by its
// key:
//
//	UPDATE T SET
//	  fence      = IF(<free>, LAST_INSERT_ID(NEXTVAL(T_fence)), fence),
//	  token      = IF(<free>, tok, token),
//	  expires_at = IF(<free>, UTC_TIMESTAMP(6) + INTERVAL ttl MICROSECOND, <busy: LAST_INSERT_ID(flag + fence bits + time left)>)
//	WHERE prefix = P AND name = K
//
// where <free> is expires_at <= UTC_TIMESTAMP(6) AND queue_seen = 0: each
// assignment decides alike, since only the last one writes a column <free>
// reads, after its test. It draws the fence under the row's lock, as the
// statement below does when it takes a row over, and reads no queue and
// attempts no insert (the two cost a plain acquisition and release about
// a third of their time on MariaDB 10.11: the queue's subquery is
// planned even when queue_seen = 0 skips it, and an insert attempt that
// finds its key costs more than an update). A Fair waiter's attempt found
// busy sets queue_seen in it too. When it finds no row (the cleanup
// deleted it) or a free row with queue_seen = 1, which its insert id
// says, the statement below follows; what the Locker saw only chooses
// the statement, each decides on the row as it is. Otherwise:
//
//	INSERT INTO T (prefix, name, token, fence, expires_at, queue_seen)
//	VALUES (P, K, tok, LAST_INSERT_ID(NEXTVAL(T_fence)), UTC_TIMESTAMP(6) + INTERVAL ttl MICROSECOND, 0)
//	ON DUPLICATE KEY UPDATE
//	  token      = IF(@lockmw_take := (expires_at <= UTC_TIMESTAMP(6)
//	                 AND (queue_seen = 0 OR NOT EXISTS (<an unexpired entry of T_queue for P, K>))),
//	                 VALUES(token), token),
//	  fence      = IF(@lockmw_take, LAST_INSERT_ID(NEXTVAL(T_fence)), fence),
//	  expires_at = IF(@lockmw_take, VALUES(expires_at), <busy: LAST_INSERT_ID(flag + fence bits + time left)>)
//
// The assignments run left to right and later ones see earlier ones'
// results, so the decision is made once, by the first, on the row as it
// was (the statement's connection keeps it in @lockmw_take, which the last
// assignment sets back to NULL, as if never set), and the others follow
// it. IF evaluates only the branch it takes, so a busy
// attempt draws no second fence, and reads the queue only when the row
// is free and a Fair waiter ever queued for it (queue_seen): a subquery of
// a write reads with locks (it waits for a transaction writing an entry),
// and reading an unused queue cost a plain acquisition and release a
// third of their server time. A Fair waiter's attempt (Enqueue) that does
// not take the lock sets queue_seen before its waiter's entry is queued,
// so no attempt that starts after the entry is visible skips the queue;
// one that takes it queues nothing and marks nothing, so an uncontended
// Fair acquisition leaves plain attempts their one UPDATE. A missing row is
// inserted without reading the queue: entries are queued behind a row,
// which is kept Retention after its last holding. The reply's insert id (the OK
// packet carries the last LAST_INSERT_ID(expr) of the statement) is the
// new fence, or, with a flag bit, the holder's remaining TTL (low 32 bits)
// and the low 28 bits of its fence (which tell a waiter that the lock
// changed hands, see Waiting); the rows
// affected (1 inserted, 2 taken over; 0 busy, with clientFoundRows off,
// or 2 when a Fair waiter's busy attempt set queue_seen) are checked
// against it; a statement the queue held back answers busy with no time
// left. A waiter's attempt is the same statement, held back only by an
// unexpired entry queued before its own. When the live row holds the caller's token already (a release
// handed it the lock, and its waiter did not learn it from a poll), the
// statement writes nothing: the busy branch marks the insert id with
// another flag, and one SELECT reads the row's fence and what it has left;
// the holding is reported as it is (see Safety, Hand-over), never with a
// new fence or a later expiry. The statement is bounded by the server at four
// fifths of the TTL (SET STATEMENT max_statement_time), so a statement
// stuck in a lock wait ends with ErrStatementTimeout before the caller's
// deadline. A statement InnoDB rolls back as a deadlock's victim (the
// queue's reads in writes lock index ranges; error 1213) wrote
// nothing and is sent again, up to 5 times.
//
// # Safety: how a lease becomes live
//
// The invariant: while a lease with token t is live, the lock's row holds
// t and an expires_at in the future. Every way a lease becomes live keeps
// it:
//
//   - Acquisition: the statement writes t only when no row exists or the
//     row's expires_at has passed (on the database's clock, at the
//     statement's start), under InnoDB's row lock, so at most one token
//     holds an unexpired row. The row keeps t until expires_at = s + TTL
//     (s the statement's start, after the client sent it at v): only a
//     Release for t (token and expiry matched) or an acquisition after
//     expires_at changes it. The lease counts from v, minus drift.
//   - Renewal: UPDATE … SET expires_at = UTC_TIMESTAMP(6) + TTL WHERE
//     name, token = t AND expires_at > UTC_TIMESTAMP(6): it never inserts
//     and never touches a row another token holds or one that expired
//     (River issue 197, an upsert renewal that extended a lease another
//     holder had taken, is the bug class; a test checks it). A tick's
//     leases go in one UPDATE (a CASE per token); when it changed as many
//     rows as it was given, every lease was renewed; otherwise one SELECT
//     tells each lease: owned (t, unexpired), taken, or missing. A lease
//     the SELECT finds owned although the UPDATE skipped it can only be
//     one whose row had expired at the UPDATE's start, at or after its
//     deadline: lockmw discards a renewal answered after the deadline, so
//     that answer never extends a lease. (lockmw sends one renewal per
//     lease at a time.)
//   - Fences: NEXTVAL on a NOCACHE sequence hands out values in call
//     order across all connections, and an InnoDB sequence survives a
//     crash with the data (a value is never handed out twice). On the
//     takeover path the fence is drawn inside the UPDATE, under the row
//     lock, after the previous holder's write committed, which drew its
//     fence before: so it is higher. On the insert path the fence was
//     drawn before the row was written; it could only be lower than an
//     earlier holder's if a whole holding fit between the draw and the
//     write. That is why rows are not deleted at release (see Rows): a
//     row is deleted only Retention after its holding ended, and a
//     statement that drew a fence before an earlier holder's row was
//     written and inserts after that row was deleted took more than
//     Retention ≥ TTL from its send to its write, so its own row was
//     expired when written and its reply comes after its lease's
//     deadline: that lease is never live. Hence MaxTTL = Retention.
//   - The waiters' queue: it decides only who may try, and whom a release
//     hands the lock to. A waiter's attempt is the acquisition statement
//     above, its queue condition being that no unexpired entry is queued
//     before its own; a plain attempt's, that no unexpired entry is
//     queued, or that no Fair waiter ever queued for the row
//     (queue_seen = 0). Each is ANDed to the row's expiry in the one
//     decision. A condition can only hold a statement back: what
//     the statement writes, when it writes, is decided by the row as
//     above. So whatever the queue holds (a stale entry, a delete that
//     was lost, a read racing an insert), no two leases of a lock are
//     live together, and every fence is drawn the same way: on takeover
//     under the row lock, on insert subject to Retention. Entries are
//     never read as holdings.
//   - Hand-over (releaseStmt, on a lock this store's waiters queued for):
//     the release is one UPDATE of the row, matched on the releasing
//     token t and an unexpired row, under the row's lock: it replaces t by
//     the token w of the first unexpired entry of another token, when that
//     entry takes hand-overs (handover = 1), draws the fence in the same
//     statement (NEXTVAL under the row lock, after every earlier holder's
//     write: higher, as on takeover), and sets the row's expiry to the
//     entry's (no later than w's last renewal of it plus its TTL: a waiter
//     that died blocks no longer than its entry would). Until then t held
//     the row, and t's lease ends with its Release, which this statement
//     is: so at most one token holds the row unexpired, as before. w's
//     Locker learns the hand-over by a poll that finds w in the live row
//     (WaitTurn) or by an attempt that does (take, above): sent at s, it
//     reads the fence and what the row has left, L, at the server's time
//     r ≥ s; the lease counts from s + min(L, TTL) - TTL, so it ends by
//     s + L ≤ r + L, the row's expiry: no later than the row, and never
//     extended by the read (a later expiry would revive a lease past the
//     hand-over). An entry whose waiter does not learn the hand-over (it
//     gave up: its Leave releases the row as any holder's Release does,
//     handing it on; it died: the row expires with its entry) leaves the
//     lock held at most until the entry's expiry. Entries queued by a
//     Locker of an earlier version (handover = 0), whose waiters would not
//     learn it, are never handed the lock: the release leaves the row free
//     when such an entry is first.
//
// The argument rests on one server's committed data: InnoDB with a
// durable log (innodb_flush_log_at_trx_commit=1 for machine crashes; the
// tests use 2, which survives a killed server), and a client that talks
// to the same server throughout. Asynchronous replication with failover
// can lose the last commits, and with them a holding: a new primary may
// grant the lock again while the old holder's lease lives. Fences also
// restart from the replica's sequence value, which may lag. Use the
// store on a single primary, or with semi-synchronous or Galera
// replication, knowing what they promise.
//
// # Rows
//
// Release sets the row's token to "" and expires_at to now: the lock is
// free at once, and the row stays. A Locker deletes rows whose expires_at
// is more than Retention (1h) in the past, at most 10000 per minute in
// batches of 1000 (so the rows of crashed holders go too); until then
// acquisition reuses the row. A table of one lock per order id holds the
// ids of the last hour, not of all time. While no Locker runs, nothing is
// deleted.
//
// # Waiting
//
// MariaDB cannot notify a waiter of a release, so waiters poll. A
// default-mode waiter retries its attempt (one statement); one such waiter
// per key and Locker polls, the Locker's others of that key waiting
// in-process behind it (lockmw's gate for a store.Notifier, whose WaitFree
// here only paces the attempts, poll.go), so a Locker polls a key once
// however many of its goroutines wait. The pause follows what the busy
// replies saw (take's reply carries the low bits of the holder's fence):
// while the lock changes hands between two attempts, the next comes after
// a jittered 5-10ms (short holdings, whose ends a barging attempt must
// not sleep through: with a 100ms cap the unluckiest of 16 contending
// Lockers waited 0.85s at the 99th percentile, against the ShedLock
// loop's 0.5s at a fixed 10ms); while one holding lasts, the pause doubles
// from BackoffMin up to BackoffMax; never past the holder's expiry.
// Default waiters do not queue (store.FairOnly: a turn in the queue costs
// several statements, and its hand-over waits for one chosen waiter's
// poll while the lock sits idle, which under load kept it busy little
// more than half the time).
// Fair waiters queue: a Fair waiter is never overtaken by one that
// arrived after its entry was queued, whatever that one's mode or Locker,
// since every attempt (default, TryAcquire, Fair) passes no unexpired
// entry queued before it (default waiters wait while Fair ones are
// queued). A Fair acquisition first tries as above (one statement when
// the lock is free and nobody queues); when busy it queues an entry (its
// place drawn from T_fence; a live entry keeps its place) and reads what
// it waits for: the entry just before it, or the holder when first (the
// holder's own entry, until its Locker deletes it, is no place). It then
// polls, keeping its entry alive every TTL/3: first in line, one SELECT of
// the lock's row by its key; further back, one SELECT that reads its own
// entry, the one before it, its place and the row. A release by a Locker
// whose waiters queued for the lock hands it to the first entry in the
// release's own statement (Safety, Hand-over), and the waiter's next poll
// finds its token in the row: the lease, without another statement.
// Otherwise (a release of a Locker that saw no waiter of its own on the
// key, or of an earlier version, or an expiry) the poll finds the lock
// free, and the waiter's attempt takes it. A winner's entry is deleted
// while its lease runs.
//
// When a Fair waiter polls: each Locker learns per key how long a hand-over
// takes (per: a wait that began with p entries before it and ended after
// time d saw p+1; a shorter wait pulls per halfway down, a longer one
// lifts it by an eighth of the excess, counting a slow one at most twice
// the pace: a pace lifted as fast as it fell can make waiters first in
// line sleep through their hand-overs, and that late learning lengthens
// the next waits), and a waiter p places back sleeps
// half of p·per, never more than BackoffMax (100ms). First in line, it saw
// the holding it waits for begin (a new fence in the row); it sleeps until
// half of per has passed since, then polls every 250µs (jittered), backing
// off (×1.5) once twice per has passed: up to per/4 until eight per have
// passed, then up to BackoffMax (at once without per); a waiter further
// back that knows no per yet polls from 250µs doubling. Never past
// the expiry of what it waits for. So the waiter next in line polls a few
// times per hand-over, around when it is due, the others a few times per
// wait; while the lock does not change hands, every waiter backs off to
// polling every BackoffMax. A waiter that gives up (WithWait, its
// context, Close) deletes its entry, and releases the lock if it had been
// handed it. An entry whose waiter stops renewing it (a crash, a cut link)
// expires after the lease TTL, and blocks others at most that long; every
// Locker deletes expired entries once a minute (with the long-ended rows).
//
// # Rolling upgrades
//
// Lockers of the version before hand-overs and of this one (in both, Fair
// waiters queue and default-mode waiters poll with plain attempts)
// exclude each other on one migrated table: every lease comes from the
// same row under the same conditions, and the earlier version's
// statements name only the columns they know. Neither strands the other's
// waiters: a release never hands the lock to an earlier version's entry
// (handover = 0), and an earlier version's release leaves the row free,
// which a waiter of this one finds at its next poll.
//
// Lockers of the version before queue_seen and of this one exclude each
// other the same way (the column only decides whether a plain attempt
// reads the queue; the earlier version's statements do not name it, and
// the rows they insert read 1, "read the queue"). One order is weaker
// while both run: a Fair waiter of the earlier version does not set
// queue_seen, so on a row this version inserted, this version's plain
// attempts may overtake it, as a barging waiter would; its own Locker's
// order, and exclusion, are kept.
//
// Lockers of the version whose Fair attempts set queue_seen whether or not
// they took the lock, and whose plain attempts always sent the statement
// with the queue's subquery, and of this one keep the same rule on one
// table: every Fair waiter of either sets queue_seen (to 1, never back)
// before its entry is queued, and every plain attempt of either reads the
// queue of a free row with queue_seen = 1. No schema change: this version
// only sends a cheaper statement where the row says it may.
//
// Lockers of the version before holder descriptions and of this one
// exclude and wait for each other on one migrated table: a Locker of this
// one without a description sends the earlier version's statements byte
// for byte, and one with a description adds two assignments (holder,
// held_since) that follow the statement's decision and read nothing it
// decides on. A holding of the earlier version leaves holder naming an
// earlier token (or NULL): Inspect shows no description for it.
//
// # Inspecting
//
// Locker.Inspect is one SELECT, a plain consistent read (no FOR UPDATE,
// no share lock, no GET_LOCK: no lock step waits for it, and it waits for
// none), of the lock's row by its key and of its queue's live entries by
// the queue's primary key, on the database's clock. It reports:
//
//   - Held: the row holds a token and expires_at is ahead of
//     UTC_TIMESTAMP(6). A key without a row (never used, or idle past
//     Retention) reads as not held, every other field unknown.
//   - TTL (exact): expires_at minus UTC_TIMESTAMP(6), while held.
//   - Fence (exact): the row's fence, the holder's; once free, the last
//     holding's, which the next holder's is above.
//   - Holder (exact) and Since: the description of the holding's Locker
//     (lockmw.WithHolderInfo) and when its holding began, from the row's
//     columns holder and held_since, reported only while holder names the
//     row's token: the acquisition statement that takes the row (the
//     insert, the one UPDATE of a known row, a Fair waiter's attempt)
//     writes both with the token, in the same statement, so they end or
//     are overwritten with the holding (a later holder of another token,
//     with a description or without, or of an earlier version, leaves
//     holder naming the earlier token: Inspect shows none). A release that
//     hands the lock to a Fair waiter does not know the waiter's
//     description: the waiter's Locker writes it (one UPDATE matched on its
//     token and live row) when it learns the hand-over, with the time it
//     wrote it, reported as Since at most that (when the hand-over
//     happened is not kept; a byte between token and description in
//     holder tells the two kinds apart). Since is exact for a described
//     Locker's other holdings, unknown for holdings of a Locker without a
//     description (their statements write nothing more than they did
//     before descriptions: the hot path costs the same).
//   - Waiters (at least) and FairWaiters (exact): the lock's live queue
//     entries of tokens other than the holder's. Only Fair waiters queue
//     (one entry each, until it is deleted or expires: a waiter that died
//     counts until its entry's TTL ends); default-mode waiters poll, and
//     the store keeps nothing of them, so Waiters is a lower bound.
//
// Locker.Locks lists the locks of the Locker's prefix that are held or
// have live queue entries, in name order. One page is one SELECT that
// reads at most 1000 rows of the prefix after the cursor's name by the
// primary key (prefix, name): VARBINARY columns, so the range is byte
// order, whatever the connection's collation, and no further index is
// needed; each row's waiters are counted as Inspect counts them. A page
// then holds up to limit of those rows' locks (possibly none, when all it
// read were idle: the cursor then points past them), so a prefix of
// 100,000 idle rows costs 100 pages of a bounded read each, never one
// long statement. The cursor is "m1." and the base64 (URL alphabet) of the
// last name read; any other fails with lockmw.ErrInvalidOption.
//
// The migration: CreateTable, or the ALTER TABLE statement of Schema, adds
// the nullable columns holder and held_since (an instant ALTER; Lockers of
// earlier versions keep working beside it, writing neither). On a table
// made before them, Lockers without a description keep working as before;
// New with lockmw.WithHolderInfo fails with ErrOldSchema, and so do
// Inspect and Locks, naming the migration (they report no fewer fields
// instead: an operator should learn that the table needs it). There is no
// force-release: a stuck holding ends with its TTL (or its Locker's
// Close), and fences make a stale holder's writes refusable.
//
// # Errors
//
// Errors wrap lockmw.ErrUnavailable and one of the package's sentinels when
// one applies: ErrReadOnly (read_only: a replica or a demoted primary),
// ErrStatementTimeout, ErrConnectionKilled (KILL CONNECTION, a restart, a
// proxy failing over), ErrPoolExhausted (no connection of the pool became
// free in time); ErrMissingTable, ErrOldSchema and ErrNotMariaDB wrap
// lockmw.ErrStoreSetup instead. A lease whose renewals fail ends at its
// deadline, as on any store.
//
// An acquisition that failed without running (no connection: a refused
// dial or login, an unknown database; or a statement the server refused
// before running it: no database selected, a missing table, read_only)
// took nothing, and is neither given back nor warned about. One that
// failed without the server's answer (a timeout, a broken link) may still
// run, in its connection's thread, after a pause or behind a lock: its
// give-back first ends that connection (stalled.go argues it), so that the
// statement cannot take the lock after its give-back, for a token nobody
// holds. A statement its deadline cut off through its socket (the two of
// an uncontended lock and unlock, deadline.go) fails with its context's
// error, as one the driver's watcher ends; the driver also logs the broken
// connection (its logger, mysql.SetLogger), which the watcher's cut does
// not.
//
// # Why not GET_LOCK
//
// GET_LOCK belongs to one connection: a killed or recycled connection (a
// pool's, a proxy's failover, KILL) frees the lock without telling the
// holder, a stalled holder that stays connected keeps it forever, and
// Galera refuses it. getlock_test.go shows the first two on MariaDB,
// beside a lockmw lease that survives killed connections and expires when
// its holder stalls.
//
// # Compared with a ShedLock-style loop
//
// bench_test.go (make bench) measures, on one server in the same run,
// uncontended lock+unlock and 16 Lockers on one key, beside a
// ShedLock-style loop (a row per lock: INSERT IGNORE, then UPDATE …
// WHERE lock_until <= UTC_TIMESTAMP(6), polled; the release an UPDATE)
// and GET_LOCK polled, and, uncontended, beside the same loop with each
// statement bounded as lockmw bounds its requests (shedlock-poll-bounded,
// below); make bench prints the figures.
//
// Where an uncontended lock+unlock's time goes: lockmw sends two
// statements (the UPDATE of a known row and the plain release, both
// prepared), the loop three. The server spent about a tenth more time on
// lockmw's two than on the loop's three (a client on one processor,
// below): a statement's cost is mostly its round trip's (reading the
// packet, waking the thread, replying), and lockmw's UPDATEs do more (the
// fence's NEXTVAL; the expires_at index, which the cleanup reads, about
// 8µs of a lock+unlock). The rest is the client's, and most of it was the
// bound on every request: each statement runs under a context with a
// deadline (the acquisition's TTL, the release's), and go-sql-driver
// watches such a context from a goroutine of the connection, woken before
// the statement is sent and again once its answer is read. In a process
// with an idle processor (one goroutine locking, GOMAXPROCS=2) each wake
// also starts an idle thread, which competes with the server for a
// two-core machine; the benchmark's loop runs under context.Background(),
// unbounded. Measured in interleaved rounds on one server (MariaDB 10.11,
// 2 cores, other work running), with the driver watching lockmw's
// statements: with GOMAXPROCS=2 lockmw ran at about 0.6 of the loop's
// rate, the loop with a 10s deadline on its statements
// (shedlock-poll-bounded) at about the same, and lockmw's two statements
// alone, without a deadline, at 1.0 to 1.1; with GOMAXPROCS=1 lockmw and
// the loop with deadlines both ran at 0.9 to 1.0 of the loop without. So
// the two statements are bounded without the watcher (deadline.go): they
// run under a context the driver does not watch, and a callback of their
// own context (context.AfterFunc, no goroutine until it ends) sets a past
// deadline on the connection's socket when it ends, which cuts off a read
// or write in flight as the watcher would. In make bench's uncontended
// run, in pairs of runs old and new (ABBA, 8 pairs, the same machine under
// other work), lockmw's rate over the loop's went from a median of 0.69 to
// 0.92, Fair's from 0.65 to 0.93 (the median of the pairs' ratios: 1.37).
// The ratio moves with the machine's load (make bench on a quieter machine
// printed about 1.0 before this). A statement cannot go unbounded: a
// server that does not answer (paused, or cut off) would hold its caller
// past every deadline.
//
// What is left is above the store. Measured on this code (MariaDB 10.11,
// 2 cores under other work, GOMAXPROCS=2; each kind in blocks of 50
// lock+unlocks taking turns in one process; figures per lock+unlock, four
// runs): lockmw's two statements alone, on one connection under
// context.Background(), cost the server less than the loop's three on one
// connection (52-61µs of its CPU against 56-69µs) and took less time
// (80-137µs against 88-172µs); the store's own Acquire and Release (a
// connection of the pool per statement, each bounded as above) cost the
// client about what the loop's three statements on the pool do (0.88 to
// 1.05 of its CPU) and ran at 0.8 to 1.3 of its rate. A lock+unlock
// through the Locker cost the client 8-24µs more CPU than the store's two
// calls, about half of it the renewal scheduler's wake-up at each
// acquisition: its goroutine, woken to arm its timer for the new lease,
// mostly ran after the release, found no lease and set its timer an hour
// ahead, so that the next acquisition woke it again (2 wake-ups in 3
// lock+unlocks in a runtime trace; with the wake-up removed, the Locker's
// extra CPU was 0-9µs). An acquisition now sets that timer itself
// (keepalive.go, rearm), which wakes nothing: in pairs of runs old and
// new (ABBA, 8 pairs, the same machine under other work), lockmw's rate
// over the loop's went from a median of 0.74 to 0.96 (new ÷ old per pair:
// median 1.18, from 0.57 to 1.72). Before it, make bench's uncontended
// figure was 0.52 to 1.03 in eleven runs (median 0.74). Cutting the store's own allocations by a
// quarter (a socket callback and argument slice kept per connection, no
// context derived for a release already bounded sooner: 73 to 56 per
// lock+unlock) made no difference that paired runs of make bench could
// see (new ÷ old over 7 pairs: median 1.04, from 0.62 to 2.1), and is not
// in this code.
//
// # Scheduled jobs
//
// cronlock.NewScheduler given a Locker of this package and no Redis
// client claims the fires of its jobs in T_claims: one row per Locker
// prefix and job, raised by a conditional UPDATE that matches the fire
// and token it read. Every write keeps the row until keep_until, the
// Locker's retention (lockmw.WithRetention, at least an hour) and twice
// the job's last interval ahead on the database's clock, and the cleanup
// deletes rows past it: a job idle that long leaves nothing behind, and no
// fire runs twice unless one of its claims comes that late (fireclaim.go
// argues it).
package mysql
