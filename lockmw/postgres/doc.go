// Package postgres keeps lockmw locks in PostgreSQL: New returns a
// *lockmw.Locker whose leases, watchdog, validity deadlines, nesting,
// waiting and telemetry are lockmw's, and whose locks are rows of a table
// in the application's own database. It lives in its own module
// (github.com/lockmw/lockmw/lockmw/postgres), so programs that only import
// lockmw do not build pgx.
//
// The Locker takes a *pgxpool.Pool (github.com/jackc/pgx/v5). A program
// on database/sql with pgx's stdlib driver makes a pool from the same
// connection string (pgxpool.New(ctx, dsn)): the Locker needs pgx's
// batches (one round trip per acquisition) and a connection of its own for
// LISTEN, which database/sql cannot lend.
//
// # Tables
//
// CreateTable (or SQL, for a migration of one's own) creates, for the
// lease table T (DefaultTable, or Schema.Table): T, one row per held lock
// (name, token, fence, expires_at, and the holder columns of "Inspecting"),
// its names in byte order (COLLATE "C"); T_queue, one row per waiter (name,
// token, seq, expires_at, handover, holder_info); T_claims, cronlock's fire claims; and the
// sequence T_fence (CACHE 1 NO CYCLE), from which every fence and queue
// position is drawn. A lock's row name is the length of the Locker's
// prefix, a colon, the prefix and the key ("7:lockmw:order-1"), so that
// no two (prefix, key) pairs share a row.
//
// Every key lockmw accepts (1 to lockmw.MaxKeyLen bytes, any bytes) can be
// locked. A text column cannot hold NUL or bytes that are not UTF-8, so a
// row name with them is stored as `\x` and the hex digits of its bytes
// (`\x373a6c6f636b6d773a6e756c00` for the key "nul\x00"; SELECT
// name::bytea shows the bytes), and a fire claim of such a prefix or job
// under that hex name with an empty job. Every other name is stored as
// it is, as releases before this encoding stored it; they could not lock
// the keys that now get hex names, so old and new Lockers share every row
// either can take, and no hex name equals another name (it starts with a
// backslash, a plain one with a digit). The database should use the UTF8
// encoding (PostgreSQL's default): one of another encoding refuses keys
// with characters it lacks, and the acquisition fails with
// lockmw.ErrUnavailable.
//
// A release deletes its row; a
// crashed holder's row expires and is reused by the next acquisition of
// its lock, and every Locker deletes expired rows (at most 1000 per table)
// about once a minute, so that locks no one takes again leave nothing
// behind. New asks the server once whether the tables exist, and fails
// with ErrNoTable, naming the missing ones, when it says they do not; a
// server New cannot reach is warned about once (with its address and the
// cause) and the Locker is made all the same, since services often start
// before their database. Tables missing later make every call fail with
// an error matching ErrNoTable that says how to create them. ErrNoTable
// matches lockmw.ErrStoreSetup and, unlike before this release, no longer
// lockmw.ErrUnavailable: a missing table is a setup mistake that waiting
// does not mend, and the adapters answer it as one (HTTP 500, gRPC
// Internal, logged once), not as "unavailable, retry later".
//
// # Safety: how a lease becomes live
//
// Every expiry is computed by the database's clock: expires_at =
// clock_timestamp() + TTL, clock_timestamp() being the time the statement
// runs (never now(), the start of the transaction, which may be older).
// The invariant: while a lockmw lease with token t is live, the row of its
// lock has token t and an expires_at after the present on the database's
// clock. Two live leases of one lock would need one row with two tokens.
//
//   - Acquisition: one round trip, a batch PostgreSQL runs as one
//     transaction: INSERT … ON CONFLICT (name) DO UPDATE … WHERE
//     expires_at <= clock_timestamp() writes token t only when the row is
//     missing or expired (a plain attempt also only when no unexpired
//     waiter is queued, a queued one when no unexpired waiter is before
//     its entry, or at all if it has none), then UPDATE … SET fence =
//     nextval(T_fence) WHERE token = t (a plain attempt's upsert draws
//     it itself, checked: see "Fences drawn in the upsert"; a queued
//     attempt that did not take the row puts its entry in the queue in
//     that statement; a plain attempt then reads the lock's row, for a
//     busy answer). The
//     unique index makes concurrent inserts of one name wait for each
//     other, and the conflict's WHERE is evaluated on the latest committed
//     row, so only one of them writes. The lease's validity counts from
//     the batch's send time v (lockmw then subtracts drift), and the row's
//     expires_at is at least v + TTL on the database's clock. Nothing but
//     t's release (UPDATE … WHERE token = t, which hands the row on or
//     deletes it: see "Hand-over") ends the row before then: an
//     acquisition does not write an unexpired row, a renewal writes only
//     its own token's, the sweep deletes only expired rows.
//   - Fences rise: the fence is drawn by the second statement, while the
//     first statement's row lock is held, so after the previous holder's
//     transaction committed (its insert or update had to commit, and its
//     row had to expire or be deleted, before this one could write), and
//     that holder drew its fence before its commit. A sequence with CACHE 1
//     hands out values in the order nextval is called across sessions (a
//     larger cache would let each session pre-allocate a range, out of
//     order), and survives a crash rising (PostgreSQL logs it ahead). A
//     plain attempt's upsert may draw the fence itself instead (see
//     "Fences drawn in the upsert" below).
//
// Fences drawn in the upsert. A plain attempt (TryAcquire, and a waiting
// acquisition's first request) sends one statement where a queued one
// sends two: its upsert writes nextval(T_fence) itself (SET fence =
// nextval(…) over an expired row, drawn under the row's lock as above;
// VALUES (…, nextval(…), …) into a missing row, drawn before the row's
// index entry exists), and its RETURNING, which PostgreSQL evaluates after
// the row and its index entries are written, keeps the value only if it is
// still the sequence's last (pg_sequence_last_value, which reads the
// sequence as nextval writes it, under the same buffer lock, whatever the
// transaction). Otherwise the statement fails on purpose (an invalid
// bigint whose text says "lockmw: a fence was drawn meanwhile"), its
// transaction writes nothing, and the attempt sends the upsert and the
// fence statement instead; so does a role that may not read the sequence
// (it needs SELECT or USAGE on it), from then on. Why the kept value is
// above every earlier holder's fence: let f be drawn at d and found last
// at k, after the row was in (at c). An earlier lease M of the name ended
// before c: its row was deleted or expired and replaced only after M's
// transaction committed, and M drew its fence before that commit, so
// before k. Had M drawn after d, the sequence's last value at k would be
// above f; so M drew before d, and its fence is below f. A later lease N
// writes the row only after this transaction commits (the unique index
// and the row lock make it wait), so after k: drawn under its row's lock,
// its fence is above f; drawn in its own VALUES at d' before d, its own
// check comes after this commit and finds a value at least f, above its
// own, and N draws again. A refusal (a value drawn by any Locker, for any
// name, in the microseconds between the draw and the row's insertion, or
// while a concurrent insert of the same name holds the index entry) costs
// one more round trip and an ERROR line in the server's log, so a store
// whose draw was refused draws after the upsert for the next minute
// (laterAfterRefusal): where draws are that frequent, a Locker meets about
// one refusal a minute and otherwise sends what it sent before.
// TestFreshFenceDrawnAgainAfterARace holds a draw between the two, and
// TestFreshFenceKeptWithoutARace the common case.
//   - Renewal: UPDATE T … SET expires_at = clock_timestamp() + TTL FROM
//     unnest(names, tokens, TTLs) WHERE token matches AND expires_at >
//     clock_timestamp(): all of a watchdog tick's leases in one statement,
//     one result per lease (renewed, or found expired or taken). It never
//     inserts, and never touches an expired row: a renewal that arrives
//     after the lease expired and another holder took the row finds
//     another token and extends nothing (River issue 197, an upsert
//     renewal that extended the next holder's lease, is the bug class;
//     TestRenewalNeverExtendsAnother shows it here). Sent at s, it extends
//     the deadline to s + TTL − drift.
//
// Upgrading from a release before hand-overs: its T_queue lacks the
// handover column. Run CreateTable again (or the new SQL(): its ALTER
// TABLE … ADD COLUMN IF NOT EXISTS) before starting the new Lockers; a new
// Locker on an unmigrated table fails New with ErrNoTable saying so. Old
// and new Lockers may then share the tables (see "Hand-over").
//
// # Waiting
//
// Every waiter, default-mode or Fair (lockmw.Fair), has a row in T_queue
// (one per key and Locker in default mode; the Locker's other goroutines
// wait behind it). An attempt by a waiting acquisition takes the lock only
// when no unexpired waiter is queued before its entry (or at all, before
// it has one), and then deletes its queue row in the same transaction;
// otherwise it queues, in the same round trip (so an uncontended
// acquisition writes no queue row); a plain attempt (TryAcquire) takes it
// only when none is queued at all, so it never passes a waiter. Queue
// rows expire too (a waiter keeps its own alive every TTL/3), so a
// crashed waiter delays the others by at most its TTL.
//
// A waiting acquisition's first request, on a lock its Locker has not found
// busy in the last second (store.Hot), is a plain attempt, whose batch is
// cheaper than the queued one (and a Locker whose locks are free opens no
// listening connection); it is TryAcquire's upsert and fence draw without
// the row read after them, since a busy lock's holder TTL is the queued
// attempt's to report;
// when that finds the lock busy, the Locker starts listening and the queued
// attempt follows at once, in the same Enqueue. Both are safe as they
// stand: the plain attempt takes the lock only when no unexpired waiter is
// queued, which is what a queued attempt without an entry of its own
// requires (so it passes nobody, Fair or not), and it writes no entry. A
// release committed between the two requests names nobody for the waiter
// (it has no entry yet), and is not missed: the queued attempt tries the
// row first, so it takes the lock that release freed, or queues behind the
// waiter it was handed to (TestFirstRequestOfWaitingAcquisition: without
// the queued attempt, a busy plain attempt would leave the waiter without
// an entry, and it would wait for the holder's expiry). On a lock found
// busy lately the queued attempt comes alone, so a contended acquisition
// costs no extra request.
//
// Waiters are woken by LISTEN/NOTIFY: each Locker holds one connection of
// its own (outside the pool) listening on the channel named after T,
// started by its first queued attempt and closed when, at one of its
// checks every 5 seconds, the Locker has no waiter and had no new one
// since the check before (its next waiter opens it again): a
// NOTIFY signals every backend listening in the database, whatever
// channel it names (PostgreSQL's async.c), and each such backend wakes to
// read it, so a Locker that no longer waits should not be one of them. A
// release hands the lock to
// the first waiter and notifies it of the grant (see "Hand-over"); a
// waiter leaving the queue (or a release to a waiter that takes no
// hand-overs) deletes its rows and then, in a second statement of the
// same transaction, sends pg_notify naming the token of the first
// waiter still queued, when the lock is free and only when there is one
// (NOTIFY takes a database-wide lock at commit: a lock nobody waits for
// costs no notification): only that waiter asks again, not every waiting
// Locker. A waiter whose acquisition runs while the lock is released (or
// the waiter before it leaves) is not missed: the first waiter's attempt
// locks the held row (the conflict of its INSERT), and every waiter's
// reading of the entry before its own locks that entry, so the release's
// first statement (its marking of the row, or a leaving waiter's
// deletion of its entry) either waits for the waiter's commit, and its
// second statement then sees the waiter's entry, or goes first, and the
// waiter then finds the lock free or handed (the argument is at Enqueue in postgres.go;
// TestReleaseWakesWaiterEnqueuedMeanwhile and
// TestLeaveWakesWaiterEnqueuedMeanwhile hold the interleavings).
// A waiter that asks and finds the lock free but others queued before it
// names the first one the same way (a release may have named a waiter
// that was not yet visible to it). A waiter also wakes when the holder's
// row (or, when the lock is free, the waiter before it) expires, which
// sends no notification. When the listening connection breaks it is made
// again (with backoff), and every waiter is woken, since notifications
// may have been missed meanwhile; while it is down, waiters ask every
// 50–100ms.
//
// # Hand-over
//
// A release hands the lock to the first queued waiter in its own
// transaction, so that the waiter holds the lock without a request of its
// own. The release's batch (one implicit transaction) is two steps, in
// three statements:
//
//  1. UPDATE T SET fence = -1 (or -2 when the row had expired) … WHERE
//     token = r (the releasing token r), locking the row and marking it
//     (a negative fence, in a column no index holds: a heap-only update);
//     then, in a statement of its own, DELETE r's queue entry.
//  2. In a new snapshot (taken after step 1 locked the row, so that
//     a waiter whose acquisition held the row's lock meanwhile is seen:
//     "the release race" at Enqueue): f, the first unexpired entry; when
//     r's row is the marked one and f's entry names a channel in handover
//     (its Locker understands grants, and listens on that channel of its
//     own), lock f's entry FOR UPDATE, reading its latest expiry e;
//     UPDATE the marked row SET token = f, fence = nextval(T_fence),
//     expires_at = e (and f's description: see "Inspecting"); DELETE f's
//     entry; and pg_notify(handover, 'g <f>
//     <fence> <seq of f's entry>'), which wakes f's Locker alone. Otherwise the
//     marked row is deleted and, when the lock is free, f is woken by its
//     token alone, as before hand-overs.
//
// Why the lease is safe. It becomes live only in step 2's UPDATE,
// a compare-and-act step on r's row while r's transaction holds the
// row's lock (r held it, or its row had expired: then the step takes an
// expired row, as an acquisition may, and f is the first waiter, so it
// passes nobody). Its fence is drawn in that step, under the row's lock,
// after every earlier holder's commit, so it is above every earlier
// fence (and above f's seq, drawn from the same sequence before). No
// other session ever sees the marked row: it is replaced or deleted
// before the commit. The handed row expires at e, f's entry's expiry,
// which the last of f's requests to set it wrote: an Enqueue or a
// refresh, sent at s, wrote e >= s + TTL on the database's clock (the
// entry's lock makes a refresh that commits after the release's read
// wait for it, and then find the entry gone). f's store records, per
// token, the send time s of the last request whose answer confirmed the
// entry's expiry, with the entry's seq; a grant is dated from s (never
// from the notification's arrival, which comes after the hand-over), so
// the lease's validity s + TTL − drift ends no later than the row. A
// grant naming another seq than the one recorded (a hand-over made to an
// earlier queueing of the token, whose confirmations the store no longer
// keeps) is refused by the store; one whose fence is not above the seq
// its last busy Enqueue reported (Reply.Counter) is refused by the Locker.
// Then, or when no grant was heard (the listener was reconnecting), the
// waiter's next Enqueue finds its own token in the live row: it reports
// the row's fence, draws none, extends nothing, and dates the lease
// sent + (expires_at − clock_timestamp()) − TTL, so it ends no later than
// the row. (A plain attempt that finds its own token's live row, a
// request whose answer was lost, does the same.) A grant nobody takes
// (the waiter's Locker crashed or gave up) leaves a row that ends at e;
// a waiter that gave up deletes it with its leave, which hands the lock
// on again. TestReleaseHandsOver, TestHandOverDatedFromLastRefresh,
// TestGrantToldFromBlindWake, TestStaleGrantRefusedByLocker and
// TestOwnRowReportedAsItIs hold these cases.
//
// Lockers of releases before hand-overs on the same (migrated) tables:
// they insert queue entries without the handover column, so those
// entries get NULL, and a new release only wakes them by their token, as
// old releases do (an old waiter handed a row would not understand the
// grant, and its next Enqueue would draw a new fence and date its lease
// from that later request, past the row's expiry). An old release before
// a new waiter deletes its row and wakes the waiter by its token on T's
// channel, which new Lockers listen on too, and the waiter takes the lock
// with an Enqueue. Grants go only to a new Locker's own channel, and
// start with "g ", which no token does (TestOldEntryWokenNotHanded).
//
// # Releasing a lock nobody waits for
//
// A release of a lock its Locker has not found busy lately (store.Hot) first
// sends a cheaper batch, also one transaction, of plain statements
// (each without CTEs: PostgreSQL's planning and executor start of a
// statement with CTEs cost several times a plain statement's, which is
// most of the server's work for a lock nobody waits for): SELECT … FOR
// UPDATE locks the releasing token's row as it is (reporting whether it
// was live, and writing no row version); a DELETE takes the token's queue
// entry out, when the token has sent a queued attempt (a token that never
// did has no entry: its Locker remembers which did until their release
// commits); then, in a new snapshot, the row is deleted when no
// unexpired entry of another token is queued. Deleting the row is what
// the hand-over's batch does when nobody is queued, and the queue is read
// as there, in a statement after the row's lock: a waiter whose
// acquisition held that lock is seen (the release race), one that comes
// later finds the row locked, then gone. When the row is kept (someone is
// queued: nothing but the token's entry changed), or the token has no
// row (its lease ended: the hand-over's batch wakes the first waiter if
// the lock is free, and tells a lock taken by another from one gone), the
// hand-over's batch follows at once, in a transaction of its own, as if
// it had come alone; an entry of a Locker before hand-overs counts as
// queued, so it is woken as before. Nothing is marked, handed or notified
// in the cheap batch, and it costs the server a fraction of the
// hand-over's statement. A lock found busy lately gets the hand-over's
// batch directly, so a contended release costs no extra round trip
// (TestFreeLockReleasedCheaply, TestCheapReleaseHandsOver,
// TestCheapReleaseSeesWaiterEnqueuedMeanwhile).
//
// # Errors
//
// Every statement of an acquisition is bounded by the TTL (waiting for a
// pool connection, by the TTL or 3s, whichever is longer: the lease's
// validity counts from the statement's send). Failures match
// lockmw.ErrUnavailable and, for the conditions that need an operator's
// attention, one of ErrReadOnly (a replica, a demoted primary, or
// default_transaction_read_only: point the pool at the primary; also when
// target_session_attrs=read-write finds no primary), ErrStatementTimeout
// (statement_timeout or lock_timeout), ErrBackendTerminated
// (pg_terminate_backend, a crash, a broken connection) and
// ErrPoolExhausted (every pool connection was busy for the whole TTL); a
// missing table gives ErrNoTable, which matches lockmw.ErrStoreSetup
// instead of lockmw.ErrUnavailable (see "Tables"). Errors are one line. A
// held lease whose renewals fail so ends at its validity deadline with
// lockmw.ErrLost, before the row can expire.
//
// An acquisition that failed without running (no connection: a refused
// dial or login, an unknown database or role; or a batch the server
// refused before running it: a missing table, a read-only server) took
// nothing, and is neither given back nor warned about. One that failed
// without the server's answer (a timeout, a broken link) may still run:
// its give-back first ends the batch's backend (stalled.go argues it), so
// that a batch whose cancel request was lost cannot take the lock after
// its give-back, for a token nobody holds.
//
// # Scheduled jobs
//
// cronlock.NewScheduler given a Locker of this package and no Redis client
// claims the fires of its jobs in T_claims: one row per Locker prefix and
// job, raised by one upsert per claim. Every write keeps the row until
// keep_until, the Locker's retention (lockmw.WithRetention, at least an
// hour) and twice the job's last interval ahead on the database's clock,
// and the sweep deletes rows past it: a job idle that long leaves nothing
// behind, and no fire runs twice unless one of its claims comes that late
// (fireclaim.go argues it).
//
// # Inspecting
//
// Locker.Inspect reads a lock in one statement, and a page of Locker.Locks
// in one statement: plain snapshot reads of T, T_queue and the fence
// sequence, by the database's clock (clock_timestamp(), read once per
// statement), with no row lock, advisory lock or transaction that a lock
// step could wait on, writing nothing. They report:
//
//   - Held, and TTL (Exact): the row's expires_at against the database's
//     clock.
//   - Fence (Exact): the row's fence, the holder's (when the lock is free,
//     the last holding's, while its expired row is kept); a lock without a
//     row reports the fence sequence's last value (AtMost), which the next
//     holder's fence will be above.
//   - Holder and Since (Exact): the holder's lockmw.WithHolderInfo and the
//     time its holding began (the database's clock), in the row's
//     holder_info, holder_since, and holder_token, the token they belong
//     to. A Locker given WithHolderInfo writes them in its acquisition's
//     own upsert, and keeps its description in its queue entries
//     (holder_info), from which a release's hand-over (see "Hand-over")
//     copies it into the row it hands, with the waiter's token and the
//     hand-over's time. They are shown only while that token holds the
//     row, and end with it (a release deletes the row; a later holding, or
//     a sweep, replaces or deletes it). A holding by a Locker without
//     WithHolderInfo reports both Unknown: such a Locker sends the
//     acquisition statements of releases before Inspect, unchanged, and
//     writes no holder column but in its hand-overs (the one lock step
//     that writes more than before, whoever releases: the waiter's
//     description, or NULL). So does a holding handed over by a Locker
//     whose New did not find the holder columns (a table before the
//     migration, or a server New could not reach: its releases send the
//     hand-over of releases before Inspect), or by a Locker of a release
//     before Inspect.
//   - Waiters (Exact): the lock's unexpired queue entries (one per Fair
//     waiter, and one per key and Locker for default-mode waiters, whose
//     other goroutines wait in the Locker); FairWaiters Unknown, since an
//     entry does not say its waiter's mode.
//
// Locks lists the locks of T under the Locker's prefix (row names that
// start with the prefix's, plain or hex) whose holding is live, or whose
// row has unexpired waiters, in byte order of row names: one statement per
// page, two ordered index scans after the cursor (of T's primary key,
// whose names are COLLATE "C", or, on a table made before Inspect whose
// names have the database's collation, of the index T_names that the
// migration adds on name COLLATE "C"), limited to 2×limit+100 rows, so
// that rows of ended holdings that nobody released (until the sweep
// deletes them) cost a page a bounded read, however many there are: a
// page may then list fewer locks than asked, with a cursor to go on. A
// lock whose row is gone while waiters are queued (between a release and
// its first waiter's acquisition) is not listed. The cursor is "pg1." and
// the last row name read, in URL-safe base64; List refuses one that does
// not name a row under the prefix (lockmw.ErrInvalidOption).
//
// Upgrading from a release before Inspect: its T lacks the holder columns
// and an index of its names in byte order, its T_queue holder_info. Run CreateTable again (or the
// new SQL(): ALTER TABLE … ADD COLUMN IF NOT EXISTS, and CREATE INDEX IF
// NOT EXISTS T_names when T's names are not COLLATE "C"; on a large T,
// create that index CONCURRENTLY first, by hand). Until then Lockers without
// WithHolderInfo lock on it as they did (their hand-overs as releases
// before Inspect, until they are made anew after the migration), while
// Inspect and Locks fail with ErrNoTable saying to migrate, and so does
// New given WithHolderInfo (when it can reach the server; otherwise its
// acquisitions). Old and new Lockers share migrated tables: old ones write
// no holder column, and a holding of theirs reads Holder and Since
// Unknown; a new Locker's upserts, enqueues and hand-overs take, queue
// and hand over under the conditions old ones do, only writing more
// columns, and no lock step reads the holder columns.
//
// # Compared with advisory locks
//
// pg_advisory_lock belongs to a session: it is released when its
// connection ends — a pool recycling it, pg_terminate_backend, a failover,
// PgBouncer in transaction mode handing the session to someone else —
// without the holder being told, and it stays held forever by a holder
// that is stalled but still connected. traps_test.go shows both. A lockmw
// lease on this package ends its context at its deadline when it cannot
// renew, and a stalled holder's row expires.
//
// bench_test.go (make bench) measures, on one server in the same run,
// uncontended lock+unlock and 16 Lockers on one key, beside a
// pg_try_advisory_lock polling loop and a ShedLock-style
// UPDATE … WHERE lock_until <= now() polling loop; make bench prints the
// figures.
//
// Where an uncontended lock+unlock's time goes: both it and the ShedLock
// loop's take two round trips, but the loop sends one plain UPDATE in
// each, and lockmw three statements in all (a blocking Acquire's first
// attempt: the upsert with its queue check, drawing its fence itself, see
// "Fences drawn in the upsert"; the release: the row's lock and the row's
// conditional delete), which the safety argument above needs in two
// statements of one transaction: the queue is read in a snapshot after
// the row's lock. The row itself costs about what the loop's update does:
// row-floor in BenchmarkUncontended, an upsert and a delete of a row on a
// table shaped as lockmw's (no fence, no queue), ran at 0.95x and 1.05x
// the ShedLock loop's rate in two runs of make bench (on 18df0d4 and
// 1ca6806), and lockmw, with the fence drawn in a statement of its own,
// at 0.71x and 0.65x the loop's: its remaining 40–60 µs or so per
// lock+unlock were the fence draw, the queue's looks and the row's lock.
// Measured then in rounds on one connection (µs per lock+unlock, medians
// over rounds, two runs): the loop 99 and 108; the Locker 167 and 152; a
// plain attempt's batch (with a read of the row too) and the release sent
// bare 168; the same statements called as two PL/pgSQL functions, one
// call per round trip, 167 and 160 (so it is the statements' work, not
// their messages); those functions without the queue's looks and the
// row's lock 143, and without the fence draw too (an upsert and a delete)
// 117. The fence statement (an UPDATE writing a second version of the row
// just inserted) is what drawing the fence in the upsert saves: in 5 ABBA
// pairs of BenchmarkUncontended, lockmw ÷ the ShedLock loop went from a
// median 0.74 to 0.83 (new ÷ old per pair: median 1.14). The queue's
// looks and the row's lock remain, for the release race.
// Keeping a released row (an acquisition would then be one UPDATE that
// draws its fence under the row's lock, a release one UPDATE that waiters
// mark the row against, for the release race) measured slower than
// deleting it (130 against 117 µs for the bare upsert and delete: each
// UPDATE writes the row's expires_at, which an index holds, so none is a
// heap-only update), and was not made.
//
// Where a contended hand-over's time goes (16 Lockers, 2 ms holds; the
// figures in this paragraph and the next were taken with holds timed by
// time.Sleep, which the Go runtime ends late by up to 0.9 ms, before
// benchsuite.Hold: compare them with each other, not with make bench's):
// make bench measures warm contenders (benchsuite.WarmTurns), since a
// fresh Locker's first turns open its pool's connections and plan its
// statements afresh (PostgreSQL plans a prepared statement for a
// connection's first five runs of it): 16 fresh Lockers read 0.66–0.68
// util in 400 ms windows, the same Lockers warm 0.82 (the loops' 0.92 and
// 0.94). Warm, in interleaved rounds of one run: 2 Lockers on the key read
// 0.86 util, 2 Lockers with 14 idle connections listening on other
// channels 0.83, 16 Lockers 0.82. PostgreSQL (15) signals every backend
// listening in the database at each NOTIFY, whatever channel it names, and
// each wakes and reads the notification queue: with 16 Lockers each
// waiting, every grant wakes all 15 waiting Lockers' backends, which is
// most of what 16 Lockers lose against 2. Only waiters near the head of
// the queue listening would end it, if the others learnt without a
// notification when they come near it: asking the queue again at a pace
// guessed from its moves cost more statements than the signals it saved,
// and a guess too long leaves a grant unheard and the lock idle.
//
// The rest is the hand-over's own path. Timed on the client's and the
// server's clocks at once (the release batch bracketed by two SELECT
// clock_timestamp(), warm Lockers, 2 ms holds; medians): with 2 Lockers,
// the next holder starts 324 µs after the release call, of which 47 µs
// pass until the server starts the batch, 125 µs in its three statements,
// 105 µs until the reply (the commit, whose NOTIFY takes the notification
// queue's locks and signals the listening backends; the grant reaches a
// listening client when the reply does), and 20 µs in the waiter's Locker.
// With 16 Lockers: 64, 205, 288 and 33 µs (588 in all, the timing's own
// statements and listening connection included), the commit's signals
// waking 17 backends on two processors. In make bench on 1ca6806 (holds of
// 2.07 ms by benchsuite.Hold), the lock stood idle per hand-over 0.55 ms
// with lockmw, 0.32 ms with the ShedLock loop and 0.21 ms with the
// advisory loop (from acquisitions per second); on 38dbaa0, which reports
// the hand-off gap itself, its median was 404 µs with lockmw (p99 645),
// 145 µs with the ShedLock loop (p99 1382) and 69 µs with the advisory
// loop (p99 1241), util 0.83, 0.90 and 0.92. lockmw's gaps are all alike
// (in a separate run of 16 Lockers, 1,500 hand-overs: p10 460 µs, p50 550,
// p90 700, p99 1 ms): the hand-over's path, not a tail of slow ones, is
// what it loses. Utilization at least the
// ShedLock loop's and within 0.05 of the advisory loop's would ask for at
// most 0.31 ms: less than lockmw's hand-over takes at 2 Lockers
// with no herd, so a hand-over whose grant travels as a notification
// cannot reach it on PostgreSQL 15, however its statements are cut. The
// hand-over statement alone, in a transaction rolled back with 15 entries
// queued, took 122 µs a batch against 50 µs for an empty round trip; four
// plain statements in its place 115 µs, which was not worth its new safety
// argument. The first waiter reading its row for a grant every 300 µs once
// told it was first (a release's notice beside the grant) sent about three
// statements more per acquisition and did not change utilization (ABBA
// pairs, median 0.99 of without).
//
// The ceiling. BenchmarkContended also runs ceiling-prepared-handover
// (bench_ceiling_test.go), which is not a lock: about the most a hand-over
// through a lease row can reach on this server, with none of lockmw's
// safety. Its holder writes the hand-over to the first waiter while it
// holds, in a transaction it leaves open on a connection it keeps, so that
// a release is one COMMIT; and its waiters are woken by the lock manager,
// not by a notification: each holds a session advisory lock of its own from
// its acquisition to its release, and waits for the one queued before it,
// then reads the row, in one round trip. Its row has no expiry and nothing
// renews it, and each holder and waiter keeps a connection (and the holder
// a transaction, whose row locks would hold back a renewal) for the whole
// wait and hold. In its first run (16 contenders, 2 ms holds, medians of 6
// rounds): util 0.891 against lockmw's 0.797, the ShedLock loop's 0.879
// and the advisory loop's 0.918; gap p50 218 µs against 502, 186 and 74
// (in make bench on 698539e: util 0.882 against 0.782, 0.872 and 0.905).
// The same with the hand-over written at release, in the release's round
// trip (the waiters still woken by the lock manager), read util 0.838 in a
// run where lockmw read 0.795 and the ShedLock loop 0.906. So of what
// lockmw loses against the ceiling, about 0.04 of util is the
// notification's signals (no waiter listens there) and about 0.05 the
// hand-over's statements between the release call and the commit; and
// utilization at least the ShedLock loop's asks for the ceiling itself.
// Reaching toward it would keep a connection per waiting acquisition and a
// connection and an open transaction per contended holding, which a pool
// shared by many keys cannot give, and was not made.
package postgres
