package postgres

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	mathrand "math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/internal/stalls"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// New returns a Locker keeping its locks in the default Schema's tables of
// the database pool connects to (see Schema.New).
func New(pool *pgxpool.Pool, opts ...lockmw.Option) (*lockmw.Locker, error) {
	return Schema{}.New(pool, opts...)
}

// New returns a Locker keeping its locks in the Schema's tables of the
// database pool connects to; create them first (CreateTable, or SQL in a
// migration). Options are lockmw's.
//
// New asks the server once (up to 10s) whether the tables exist: when it
// answers that one is missing, New fails with ErrNoTable, naming it. When
// the server cannot be reached (a service often starts before its
// database), New logs one warning (lockmw.WithLogger) with the address and
// the cause, and returns the Locker: its requests fail with
// lockmw.ErrUnavailable until the server answers.
//
// The Locker does not own the pool: close the pool after the Locker. It
// takes one pool connection per statement, and holds one more connection
// of its own (made from the pool's configuration, outside the pool) for
// LISTEN while anyone waits. Every statement of an acquisition is bounded
// by the lease TTL and by ctx; renewals by the TTL.
func (sc Schema) New(pool *pgxpool.Pool, opts ...lockmw.Option) (*lockmw.Locker, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: postgres.New needs a pool, e.g. pgxpool.New(ctx, os.Getenv(\"DATABASE_URL\"))", lockmw.ErrNilClient)
	}
	n, err := sc.names()
	if err != nil {
		return nil, err
	}
	return newLocker(newStore(pool, n), opts...)
}

// newLocker returns a Locker on s, once s found its tables usable
// (checkStart).
func newLocker(s *pgStore, opts ...lockmw.Option) (*lockmw.Locker, error) {
	l, err := lockmw.NewWithStore(store.Inside{Store: s}, opts...)
	if err != nil {
		return nil, err
	}
	if err := s.checkStart(); err != nil {
		_ = l.Close()
		return nil, err
	}
	return l, nil
}

// pgStore keeps locks in rows.
type pgStore struct {
	pool *pgxpool.Pool
	n    names
	sql  statements
	// grants is the channel this Locker hears its waiters' grants on,
	// its own (see "Hand-over"): its entries name it.
	grants string
	// holderInfo is the Locker's lockmw.WithHolderInfo ("" without it),
	// set before its first acquisition (UseHolderInfo): its acquisitions
	// write it into the row they take (inspect.go).
	holderInfo string
	// handsInfo: the tables keep descriptions in queue entries (New found
	// the columns of "Inspecting"), so that this Locker's hand-overs copy
	// the waiter's into the row (handOverInfo). Set by New before the
	// Locker is returned; false when New could not look.
	handsInfo bool

	lis    *listener
	hot    store.Hot             // locks its queued attempts found busy lately
	logger *slog.Logger          // the Locker's (store.Logging), for New's warning
	stalls stalls.Notes[backend] // backends of batches never answered, by token (stalled.go)
	// queued holds the tokens whose queued attempts were sent (each may
	// have left a queue entry), until a release of the token committed:
	// a release of any other token has no entry to delete (Release).
	queued sync.Map
	// freshFrom is when plain attempts may draw their fence in the upsert
	// again (UnixNano; until then they draw it in a statement after the
	// upsert, as queued ones do): laterAfterRefusal after one whose draw
	// was refused, never (drawLater) for a role that may not read the
	// fence sequence (pg_sequence_last_value).
	freshFrom atomic.Int64

	stop     context.CancelFunc
	stopped  context.Context
	sweeping sync.WaitGroup
	closeMu  sync.Mutex
	closed   bool
}

// statements are the store's SQL, with the Schema's names in.
type statements struct {
	insertLease, insertLeaseQueued, fence, readRow, enqueueFence, release, handOver,
	lockOwn, dropEntry, freeIfUnqueued, renew, refresh, sweepLeases, sweepQueue string
	// insertLeaseInfo and insertLeaseQueuedInfo are insertLease and
	// insertLeaseQueued of a Locker given lockmw.WithHolderInfo: the same
	// upserts, which also write the holder's description ($4), its token
	// and the acquisition time (inspect.go). A Locker without it sends
	// the statements above, unchanged.
	insertLeaseInfo, insertLeaseQueuedInfo string
	// takeFresh and takeFreshInfo are insertLease and insertLeaseInfo
	// drawing the fence themselves, checked (see "Fences drawn in the
	// upsert" in doc.go): a plain or first attempt's first statement, in
	// place of insertLease and fence.
	takeFresh, takeFreshInfo string
	// enqueueFenceInfo is enqueueFence of a Locker given
	// lockmw.WithHolderInfo: it writes the description into the queue
	// entry too. handOverInfo is handOver on tables whose queue keeps
	// descriptions (pgStore.handsInfo): it copies the waiter's into the
	// row it hands over. Both only add columns to what they write.
	enqueueFenceInfo, handOverInfo string
	// inspect and list are Inspect's and List's (inspect.go).
	inspect, list string
}

// released marks the row a release's first statement locked, for the
// second statement, which hands the row over or deletes it (both in one
// transaction: no other session ever sees the mark). The mark is a
// negative fence, a column no index holds, so that marking the row is a
// heap-only update.
const released = `fence < 0`

func newStatements(n names) statements {
	// $3 (or the ttl argument) is microseconds: validity is computed by
	// the server's clock (clock_timestamp(), the time the statement runs,
	// never now(), the start of the transaction).
	const until = `clock_timestamp() + $3::bigint * interval '1 microsecond'`
	const left = `(extract(epoch FROM expires_at - clock_timestamp()) * 1e6)::bigint`
	// fenceNew is the fence an upsert writes in a new row, fenceSet the one
	// it writes over an expired row, and returning what it reports: 0, the
	// fence drawn by a later statement (drawFence), or, in a plain
	// upsert that draws its own (fresh), the fence drawn.
	type fenceCols struct{ fenceNew, fenceSet, returning string }
	later := fenceCols{"0", "0", ""}
	// A plain upsert's own draw (see "Fences drawn in the upsert" in
	// doc.go): over an expired row it is drawn under the row's lock; in a
	// new row, before the row's index entry exists, so it is kept only if
	// no value was drawn after it by the time the row was in (RETURNING
	// runs after the row and its index entries are written): otherwise
	// the statement fails, on purpose, with fenceRaced in its message, the
	// transaction writes nothing, and take sends the upsert and drawFence
	// instead.
	fresh := fenceCols{
		fenceNew: `nextval(` + n.seqLit + `)`,
		fenceSet: `nextval(` + n.seqLit + `)`,
		returning: `
RETURNING CASE WHEN l.fence = pg_sequence_last_value(` + n.seqLit + `) THEN l.fence
	ELSE ('` + fenceRaced + ` ' || l.fence)::bigint END`,
	}
	upsert := func(where string, f fenceCols) string {
		return `INSERT INTO ` + n.table + ` AS l (name, token, fence, expires_at)
SELECT $1, $2, ` + f.fenceNew + `, ` + until + where + `
ON CONFLICT (name) DO UPDATE SET token = excluded.token, fence = ` + f.fenceSet + `, expires_at = excluded.expires_at
WHERE l.expires_at <= clock_timestamp()` + f.returning
	}
	// The same upsert, with the same conditions, writing the holder's
	// description too (inspect.go): with its token, so that a later
	// holding of the row by a Locker that writes none (an upsert above,
	// a hand-over) never shows it.
	upsertInfo := func(where string, f fenceCols) string {
		return `INSERT INTO ` + n.table + ` AS l (name, token, fence, expires_at, holder_info, holder_token, holder_since)
SELECT $1, $2, ` + f.fenceNew + `, ` + until + `, $4::text, $2, clock_timestamp()` + where + `
ON CONFLICT (name) DO UPDATE SET token = excluded.token, fence = ` + f.fenceSet + `, expires_at = excluded.expires_at,
	holder_info = excluded.holder_info, holder_token = excluded.holder_token, holder_since = excluded.holder_since
WHERE l.expires_at <= clock_timestamp()` + f.returning
	}
	// A plain attempt passes no unexpired waiter.
	plainWhere := `
WHERE NOT EXISTS (SELECT 1 FROM ` + n.queue + ` q WHERE q.name = $1 AND q.expires_at > clock_timestamp())`
	// A queued attempt passes no unexpired waiter queued before it:
	// before its own unexpired entry, or, without one, at all. When it
	// finds the row held, the conflict locks the row until the
	// transaction ends, even though it does not update it ("the release
	// race" in Enqueue).
	queuedWhere := `
WHERE NOT EXISTS (SELECT 1 FROM ` + n.queue + ` q WHERE q.name = $1 AND q.token <> $2 AND q.expires_at > clock_timestamp()
	AND q.seq < coalesce((SELECT me.seq FROM ` + n.queue + ` me
		WHERE me.name = $1 AND me.token = $2 AND me.expires_at > clock_timestamp()), 9223372036854775807))`
	// The fence is drawn while the row is locked by the statement before,
	// in the same transaction (see "Safety"), and only for a row that
	// statement wrote (fence 0): a committed row has a fence above 0.
	drawFence := `UPDATE ` + n.table + ` SET fence = nextval(` + n.seqLit + `) WHERE name = $1 AND token = $2 AND fence = 0 RETURNING fence`
	// The token's own live row, written by an earlier transaction (a
	// release's hand-over, or an earlier request of the token whose answer
	// was lost): the attempt reports it as it is, with what is left of it,
	// and neither draws a fence nor extends it (see "Hand-over").
	own := `SELECT fence, ` + left + ` AS us FROM ` + n.table + ` WHERE name = $1 AND token = $2 AND fence <> 0 AND expires_at > clock_timestamp()`
	// The holder's remaining TTL, if the lock is held.
	holder := `SELECT ` + left + ` AS us FROM ` + n.table + ` WHERE name = $1 AND expires_at > clock_timestamp()`
	// enqueueFence's statement; with info, a Locker given
	// lockmw.WithHolderInfo writes its description ($6) into its queue
	// entry too, for a release's hand-over to copy into the row (see
	// "Inspecting" in doc.go).
	enqueueFence := func(info bool) string {
		infoCol, infoVal, infoSet := "", "", ""
		if info {
			infoCol, infoVal, infoSet = ", holder_info", ", $6::text", ", holder_info = excluded.holder_info"
		}
		return `WITH u AS (` + drawFence + `
), o AS (` + own + `
), dq AS (
	DELETE FROM ` + n.queue + ` WHERE name = $1 AND token = $2 AND (EXISTS (SELECT 1 FROM u) OR EXISTS (SELECT 1 FROM o))
), e AS (
	INSERT INTO ` + n.queue + ` AS q (name, token, seq, expires_at, handover` + infoCol + `)
	SELECT $1, $2, nextval(` + n.seqLit + `), ` + until + `, $5` + infoVal + ` WHERE NOT EXISTS (SELECT 1 FROM u) AND NOT EXISTS (SELECT 1 FROM o)
	ON CONFLICT (name, token) DO UPDATE SET
		seq = CASE WHEN q.expires_at > clock_timestamp() THEN q.seq ELSE excluded.seq END,
		expires_at = excluded.expires_at, handover = excluded.handover` + infoSet + `
	RETURNING seq
), h AS (` + holder + `)
SELECT coalesce((SELECT fence FROM u), (SELECT fence FROM o)), (SELECT us FROM o), (SELECT us FROM h),
	p.token, (extract(epoch FROM p.expires_at - clock_timestamp()) * 1e6)::bigint,
	-- A queued waiter that finds the lock free but others before it
	-- wakes the first (a release's notification may have missed it: it
	-- named the first waiter the release saw).
	(SELECT count(pg_notify($4, f.token)) FROM (
		SELECT token FROM ` + n.queue + ` WHERE name = $1 AND token <> $2 AND expires_at > clock_timestamp()
		ORDER BY seq LIMIT 1) f
	WHERE p.token IS NOT NULL AND NOT EXISTS (SELECT 1 FROM u) AND NOT EXISTS (SELECT 1 FROM o) AND NOT EXISTS (SELECT 1 FROM h)),
	(SELECT seq FROM e)
FROM (SELECT 1) one LEFT JOIN LATERAL (
	SELECT q.token, q.expires_at FROM ` + n.queue + ` q
	WHERE q.name = $1 AND q.token <> $2 AND q.seq < (SELECT seq FROM e) AND q.expires_at > clock_timestamp()
	ORDER BY q.seq DESC LIMIT 1 FOR KEY SHARE) p ON true`
	}
	// handOver's statement; with info, on tables whose queue entries keep
	// a waiter's description, the hand-over copies the entry's into the
	// row, with the entry's token and the time of the hand-over, when it
	// has one (see "Inspecting" in doc.go). Nothing in it is read for
	// safety.
	handOver := func(info bool) string {
		infoCol, infoSet := "", ""
		if info {
			infoCol = ", q.holder_info"
			infoSet = `,
		holder_info = lk.holder_info, holder_token = CASE WHEN lk.holder_info IS NOT NULL THEN lk.token END,
		holder_since = CASE WHEN lk.holder_info IS NOT NULL THEN clock_timestamp() END`
		}
		return `WITH f AS (
	SELECT token, seq FROM ` + n.queue + ` WHERE name = $1 AND token <> $2 AND expires_at > clock_timestamp()
	ORDER BY seq LIMIT 1
), mk AS (
	SELECT 1 FROM ` + n.table + ` WHERE name = $1 AND token = $2 AND ` + released + `
), lk AS (
	SELECT q.token, q.seq, q.expires_at, q.handover` + infoCol + ` FROM ` + n.queue + ` q JOIN f ON q.token = f.token AND q.seq = f.seq
	WHERE q.name = $1 AND q.handover IS NOT NULL AND q.expires_at > clock_timestamp() AND EXISTS (SELECT 1 FROM mk)
	FOR UPDATE OF q
), h AS (
	UPDATE ` + n.table + ` l SET token = lk.token, fence = nextval(` + n.seqLit + `), expires_at = lk.expires_at` + infoSet + `
	FROM lk WHERE l.name = $1 AND l.token = $2 AND l.` + released + `
	RETURNING l.token, l.fence, lk.seq, lk.handover
), dq AS (
	DELETE FROM ` + n.queue + ` q USING h WHERE q.name = $1 AND q.token = h.token
), dr AS (
	DELETE FROM ` + n.table + ` WHERE name = $1 AND token = $2 AND ` + released + ` AND NOT EXISTS (SELECT 1 FROM lk)
)
SELECT EXISTS (SELECT 1 FROM ` + n.table + ` WHERE name = $1 AND token <> $2 AND expires_at > clock_timestamp()),
	(SELECT count(pg_notify(w.channel, w.payload)) FROM (
		SELECT h.handover AS channel, 'g ' || h.token || ' ' || h.fence || ' ' || h.seq AS payload FROM h
		UNION ALL
		SELECT $3, f.token FROM f WHERE NOT EXISTS (SELECT 1 FROM h)
			AND NOT EXISTS (SELECT 1 FROM ` + n.table + ` WHERE name = $1 AND token <> $2 AND expires_at > clock_timestamp())) w),
	(SELECT fence FROM h)`
	}
	return statements{
		insertLease:           upsert(plainWhere, later),
		insertLeaseQueued:     upsert(queuedWhere, later),
		insertLeaseInfo:       upsertInfo(plainWhere, later),
		insertLeaseQueuedInfo: upsertInfo(queuedWhere, later),
		takeFresh:             upsert(plainWhere, fresh),
		takeFreshInfo:         upsertInfo(plainWhere, fresh),
		// A plain attempt's second and third statements, each a plain
		// statement (a statement with CTEs costs the server several
		// times a plain one's planning and executor start, for no
		// gain here): fence draws the fence of the row the upsert wrote
		// (drawFence), and readRow then reads the lock's live row, in a
		// later snapshot of the same transaction, for takeResult: when
		// fence drew none, the token's own row written by an earlier
		// transaction (a hand-over it did not hear of, an answer lost),
		// reported as it is, or another holder's TTL. A held row's lock,
		// taken by the upsert's conflict, is kept until the transaction
		// ends, so no release or hand-over commits between the two
		// (neither can a fence draw for the token: it is this one).
		fence:   drawFence,
		readRow: `SELECT fence, ` + left + ` AS us, token = $2 AS mine FROM ` + n.table + ` WHERE name = $1 AND expires_at > clock_timestamp()`,
		// A queued attempt that took the lock (or found it its own) draws
		// its fence and takes its queue entry out; one that did not puts
		// its entry in the queue (an expired entry queues anew, with a
		// new seq; a live one keeps its place), with the channel its
		// Locker hears grants on ($5: see "Hand-over"), and reports the unexpired entry just
		// before it and its own entry's seq.
		enqueueFence:     enqueueFence(false),
		enqueueFenceInfo: enqueueFence(true),
		inspect:          inspectSQL(n),
		list:             listSQL(n),
		// A release, or a waiter leaving, locks token's row, marking it
		// released (it reports whether the row was live), and deletes
		// token's entry (dropEntry), in plain statements. handOver, the
		// next statement of its transaction (so with a snapshot taken
		// after the marking, see "the release race" in Enqueue, and
		// "Hand-over"), then either hands the marked row to the first
		// unexpired waiter when that waiter's entry names a channel for
		// grants (its Locker understands hand-overs), or deletes it and
		// wakes the first waiter, by its token, when the lock is free
		// (only it may take the lock). The mark, a negative fence,
		// carries whether the row was live.
		release: `UPDATE ` + n.table + ` SET fence = CASE WHEN expires_at > clock_timestamp() THEN -1 ELSE -2 END
WHERE name = $1 AND token = $2 RETURNING fence = -1`,
		// The hand-over (see "Hand-over" for its argument): f is the first
		// unexpired entry in this statement's snapshot; lk locks it, when
		// token's row is marked released and the entry names a channel
		// for grants,
		// reading its latest expiry (a refresh that committed meanwhile
		// is waited for and seen; a later one finds the entry gone); h
		// gives the marked row to lk's token with a fence drawn here, under
		// the row's lock, and lk's expiry; dq deletes the entry; dr deletes
		// the marked row when nothing was handed. The grant's notification,
		// on the entry's channel (its Locker's alone: no other Locker is
		// woken), names the token, fence and the entry's seq; otherwise, when the
		// lock is free, the first waiter is woken by its token, as
		// releases before hand-overs did.
		handOver:     handOver(false),
		handOverInfo: handOver(true),
		// A release of a lock not found busy lately (Release), three
		// plain statements of one transaction: lockOwn locks token's row
		// as it is (FOR UPDATE: it reports whether the row was live, and
		// writes no new row version); dropEntry deletes token's entry;
		// freeIfUnqueued, in a new snapshot (taken after the row's lock,
		// as handOver's), deletes the row when no unexpired entry but
		// token's is queued. When it kept the row (someone is queued), or
		// token had none, Release sends release and handOver, in a
		// transaction of their own, which hand the lock over or wake the
		// first waiter, and report whether another token holds it.
		lockOwn:   `SELECT expires_at > clock_timestamp() FROM ` + n.table + ` WHERE name = $1 AND token = $2 FOR UPDATE`,
		dropEntry: `DELETE FROM ` + n.queue + ` WHERE name = $1 AND token = $2`,
		freeIfUnqueued: `DELETE FROM ` + n.table + ` WHERE name = $1 AND token = $2
	AND NOT EXISTS (SELECT 1 FROM ` + n.queue + ` WHERE name = $1 AND token <> $2 AND expires_at > clock_timestamp())
RETURNING true`,
		renew: `WITH r AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS r(name, token, us, i)
), u AS (
	UPDATE ` + n.table + ` l SET expires_at = clock_timestamp() + r.us * interval '1 microsecond'
	FROM r WHERE l.name = r.name AND l.token = r.token AND l.expires_at > clock_timestamp()
	RETURNING l.token
)
SELECT EXISTS (SELECT 1 FROM u WHERE u.token = r.token),
	EXISTS (SELECT 1 FROM ` + n.table + ` l WHERE l.name = r.name AND l.token <> r.token AND l.expires_at > clock_timestamp())
FROM r ORDER BY r.i`,
		refresh: `UPDATE ` + n.queue + ` SET expires_at = ` + until + `
WHERE name = $1 AND token = $2 AND expires_at > clock_timestamp() RETURNING seq`,
		sweepLeases: `DELETE FROM ` + n.table + ` WHERE ctid = ANY (ARRAY (
	SELECT ctid FROM ` + n.table + ` WHERE expires_at < clock_timestamp() LIMIT 1000))`,
		sweepQueue: `DELETE FROM ` + n.queue + ` WHERE ctid = ANY (ARRAY (
	SELECT ctid FROM ` + n.queue + ` WHERE expires_at < clock_timestamp() LIMIT 1000))`,
	}
}

var (
	_ store.Store       = (*pgStore)(nil)
	_ store.LeftNothing = (*pgStore)(nil)
	_ store.Logging     = (*pgStore)(nil)
	_ store.Inspector   = (*pgStore)(nil)
)

func newStore(pool *pgxpool.Pool, n names) *pgStore {
	ctx, cancel := context.WithCancel(context.Background())
	s := &pgStore{pool: pool, n: n, sql: newStatements(n), grants: grantChannel(), stop: cancel, stopped: ctx}
	s.lis = newListener(s)
	s.sweeping.Go(s.sweep)
	return s
}

// LeftNothing reports that a failed acquisition took nothing, so that the
// Locker neither gives it back nor warns that it could not: it found no
// connection (a refused dial, a failed login, an unknown database or
// role, a read-only server refused by target_session_attrs, the pool
// exhausted), or the server refused its batch before running it (a
// missing table, a read-only transaction: notRun). Every other failure
// (a timeout, a broken connection) may have committed.
func (s *pgStore) LeftNothing(err error) bool {
	var u *unsentError
	return errors.As(err, &u)
}

// CheckTTL accepts every TTL lockmw does: rows expire by the microsecond.
func (s *pgStore) CheckTTL(time.Duration) error { return nil }

// micros is ttl in microseconds, at least 1.
func micros(ttl time.Duration) int64 { return max(ttl.Microseconds(), 1) }

// Acquire takes the lock for token when its row is missing or expired and
// no waiter is queued.
func (s *pgStore) Acquire(ctx context.Context, k store.Key, token string, ttl time.Duration, renewed bool) (store.Reply, error) {
	r, _, err := s.take(ctx, name(k), token, ttl, plainAttempt)
	return r, err
}

// attempt is the kind of an acquisition's batch (takeBatch).
type attempt uint8

const (
	// plainAttempt takes a free lock, and reports the holder's TTL, or
	// the token's own row written before, when it does not (Acquire).
	plainAttempt attempt = iota
	// firstAttempt takes a free lock and reports nothing more: a waiting
	// acquisition's first request, on a lock not found busy lately, which
	// the queued attempt follows at once when it did not take the lock
	// (Enqueue).
	firstAttempt
	// queuedAttempt takes the lock when no waiter is before token, or
	// queues token's entry.
	queuedAttempt
)

// take runs one acquisition transaction in one round trip (a batch,
// which PostgreSQL runs as one implicit transaction; takeBatch): the lease
// row's upsert, then the fence draw and, when queued, the queue entry's
// update. It also reports the queue entry just before token's, if any.
//
// Taking a pool connection (or making one) may take up to connectWait
// (or ctx's end): the lease's validity counts from the send, so it costs
// nothing but the caller's time. The batch itself is bounded by ttl: an
// answer later than that is worthless.
func (s *pgStore) take(ctx context.Context, row, token string, ttl time.Duration, kind attempt) (store.Reply, string, error) {
	cctx, cancel := context.WithTimeout(ctx, max(ttl, connectWait))
	c, err := s.conn(cctx)
	cancel()
	if err != nil {
		// No connection: nothing was sent.
		return store.Reply{}, "", &unsentError{err}
	}
	defer c.Release()
	ctx, cancel = context.WithTimeout(ctx, ttl)
	defer cancel()
	fresh := kind != queuedAttempt && time.Now().UnixNano() >= s.freshFrom.Load()
	b := s.takeBatch(row, token, ttl, kind, fresh)
	if kind == queuedAttempt {
		s.queued.Store(token, struct{}{})
	}
	be := backendOf(c)
	sent := time.Now()
	r, pred, err := s.takeResult(c.SendBatch(ctx, b), sent, ttl, kind, fresh)
	if fresh && err != nil {
		if retry, denied := freshFailed(err); retry {
			// The upsert's own draw was refused (a value was drawn
			// meanwhile, or the role may not read the sequence): its
			// transaction wrote nothing. Draw under the row's lock.
			sent = time.Now()
			r, pred, err = s.takeResult(c.SendBatch(ctx, s.takeBatch(row, token, ttl, kind, false)), sent, ttl, kind, false)
			switch {
			case !denied:
				s.freshFrom.Store(time.Now().Add(laterAfterRefusal).UnixNano())
			case err == nil:
				s.freshFrom.Store(drawLater)
			}
		}
	}
	if err == nil && kind == queuedAttempt && !r.Acquired {
		// The entry's expiry was confirmed by this request (a hand-over
		// is dated from it: see "Hand-over").
		s.lis.confirmed(token, int64(r.Counter), sent)
	}
	switch {
	case err == nil:
	case notRun(err):
		err = &unsentError{err}
	default:
		s.noteStall(token, c, be, err) // stalled.go
	}
	return r, pred, err
}

// takeBatch is an acquisition's statements: a plain attempt
// (insertLease, fence, readRow), a first one (insertLease, fence) or a
// queued one (insertLeaseQueued, enqueueFence). The row's upsert comes
// first, so that the fence is drawn under its row lock (see "Safety").
// With fresh, a plain or first attempt's upsert draws its fence itself
// (takeFresh, see "Fences drawn in the upsert" in doc.go), and no fence
// statement follows it.
func (s *pgStore) takeBatch(row, token string, ttl time.Duration, kind attempt, fresh bool) *pgx.Batch {
	queued := kind == queuedAttempt
	b := &pgx.Batch{}
	switch {
	case fresh && s.holderInfo != "":
		b.Queue(s.sql.takeFreshInfo, row, token, micros(ttl), s.holderInfo)
	case fresh:
		b.Queue(s.sql.takeFresh, row, token, micros(ttl))
	case queued && s.holderInfo != "":
		b.Queue(s.sql.insertLeaseQueuedInfo, row, token, micros(ttl), s.holderInfo)
	case queued:
		b.Queue(s.sql.insertLeaseQueued, row, token, micros(ttl))
	case s.holderInfo != "":
		b.Queue(s.sql.insertLeaseInfo, row, token, micros(ttl), s.holderInfo)
	default:
		b.Queue(s.sql.insertLease, row, token, micros(ttl))
	}
	switch {
	case queued && s.holderInfo != "":
		b.Queue(s.sql.enqueueFenceInfo, row, token, micros(ttl), s.n.channel, s.grants, s.holderInfo)
	case queued:
		b.Queue(s.sql.enqueueFence, row, token, micros(ttl), s.n.channel, s.grants)
	case fresh && kind == firstAttempt:
	case fresh:
		b.Queue(s.sql.readRow, row, token)
	case kind == firstAttempt:
		b.Queue(s.sql.fence, row, token)
	default:
		b.Queue(s.sql.fence, row, token)
		b.Queue(s.sql.readRow, row, token)
	}
	return b
}

// laterAfterRefusal is how long a store's plain attempts draw their fence
// after the upsert once an upsert's own draw was refused. Where values are
// drawn so often that refusals are common (thousands of acquisitions a
// second across the database), each would cost a round trip and an ERROR
// line in the server's log: this bounds them to about one a minute per
// Locker, and leaves such a store sending what it sent before the upsert
// drew. (A variable for the checker, which keeps the upsert drawing.)
var laterAfterRefusal = time.Minute

// drawLater in pgStore.freshFrom keeps the upsert from drawing for good.
const drawLater = math.MaxInt64

// fenceRaced is in the message of a takeFresh that refused its own draw
// (a value was drawn between it and the row's insertion).
const fenceRaced = "lockmw: a fence was drawn meanwhile; drawing it again"

// freshFailed tells whether a takeFresh batch's err is one the batch
// without it may not meet: its own draw refused (fenceRaced), or the role
// may not read the sequence (denied: pg_sequence_last_value needs SELECT
// or USAGE on it, nextval USAGE or UPDATE).
func freshFailed(err error) (retry, denied bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false, false
	}
	switch {
	case pgErr.Code == "22P02" && strings.Contains(pgErr.Message, fenceRaced):
		return true, false
	case pgErr.Code == "42501":
		return true, true
	}
	return false, false
}

// takeResult reads a takeBatch's results; sent is when it was sent.
//
// With fresh (takeFresh), the upsert reports the fence it drew, as the
// fence statement does.
func (s *pgStore) takeResult(res pgx.BatchResults, sent time.Time, ttl time.Duration, kind attempt, fresh bool) (store.Reply, string, error) {
	queued := kind == queuedAttempt
	var (
		fence    *int64
		ownUs    *int64
		holderUs *int64
		pred     *string
		predUs   *int64
		woken    int64
		seq      *int64
	)
	var execErr error
	if !fresh {
		// The upsert's result: it reports nothing.
		_, execErr = res.Exec()
	}
	var qrErr error
	switch {
	case execErr != nil:
	case queued:
		qrErr = res.QueryRow().Scan(&fence, &ownUs, &holderUs, &pred, &predUs, &woken, &seq)
	case kind == firstAttempt:
		fence, qrErr = drawn(res)
	default:
		fence, ownUs, holderUs, qrErr = plainResult(res)
	}
	closeErr := res.Close()
	if err := errors.Join(execErr, qrErr); err != nil {
		return store.Reply{}, "", classify(err)
	}
	if closeErr != nil {
		return store.Reply{}, "", classify(closeErr)
	}
	if fence != nil && ownUs != nil {
		// The token's own row, written before this request (a hand-over
		// it did not hear of): what is left of it counts from the send,
		// so the lease ends no later than the row (see "Hand-over").
		return store.Reply{Acquired: true, Fence: uint64(*fence), ValidFrom: sent.Add(time.Duration(*ownUs)*time.Microsecond - ttl)}, "", nil
	}
	if fence != nil {
		return store.Reply{Acquired: true, Fence: uint64(*fence), ValidFrom: sent}, "", nil
	}
	r := store.Reply{}
	if seq != nil {
		// The entry's place, drawn from the fence sequence: a hand-over
		// with a fence not above it was made to an earlier queueing.
		r.Counter = uint64(*seq)
	}
	if holderUs != nil {
		r.HolderTTL = time.Duration(*holderUs) * time.Microsecond
	}
	p := ""
	switch {
	case pred != nil:
		p = *pred
		if r.HolderTTL == 0 && predUs != nil {
			r.HolderTTL = time.Duration(*predUs) * time.Microsecond
		}
	case queued && holderUs == nil:
		// Free, and nobody before this waiter, yet the attempt did not
		// take it: the holder or the waiter before it left between the
		// two statements. Ask again at once.
		r.HolderTTL = time.Microsecond
	}
	return r, p, nil
}

// plainResult reads a plain attempt's fence and readRow: the fence drawn
// for the row the upsert wrote, or the fence of the token's own live row
// written before and what is left of it (own), or the holder's TTL.
func plainResult(res pgx.BatchResults) (fence, own, holder *int64, err error) {
	if fence, err = drawn(res); err != nil {
		return nil, nil, nil, err
	}
	var rowFence, us int64
	var mine bool
	switch err := res.QueryRow().Scan(&rowFence, &us, &mine); {
	case errors.Is(err, pgx.ErrNoRows):
		return fence, nil, nil, nil
	case err != nil:
		return nil, nil, nil, err
	}
	if fence == nil && mine && rowFence != 0 {
		// The token's own row, written by an earlier transaction.
		return &rowFence, &us, nil, nil
	}
	return fence, nil, &us, nil
}

// drawn reads the fence statement's result: the fence drawn for the row
// the upsert wrote, or nil when it wrote none.
func drawn(res pgx.BatchResults) (*int64, error) {
	var f int64
	switch err := res.QueryRow().Scan(&f); {
	case err == nil:
		return &f, nil
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	default:
		return nil, err
	}
}

// connectWait bounds how long an acquisition waits for a pool connection
// when its TTL is shorter.
const connectWait = 3 * time.Second

// conn takes a pool connection for one statement.
func (s *pgStore) conn(ctx context.Context) (*pgxpool.Conn, error) {
	if s.isClosed() {
		return nil, lockmw.ErrClosed
	}
	return acquireConn(ctx, s.pool)
}

func (s *pgStore) isClosed() bool {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	return s.closed
}

// Release ends token's holding and takes out its queue entry, and hands
// the lock to the first queued waiter (when its Locker understands
// hand-overs) or, when the lock is then free, notifies the lock's channel
// naming the first waiter, in one round trip (a batch: one transaction of
// three statements, see "the release race" in Enqueue and "Hand-over").
//
// On a lock this store has not found busy lately (store.Hot), the round trip
// is first a cheaper one (freeBatch): it deletes token's row when nobody
// else is queued, which is all a release does then; when someone is (it
// changes nothing but token's entry), or token has no row, the hand-over's
// batch follows.
// The cheap batch reads the queue as handOver does, in a statement
// after the row's lock, so a waiter whose acquisition held the row's lock
// meanwhile is seen ("the release race" in Enqueue), and the lock is then
// handed over by the batch that follows (see "Releasing a lock nobody
// waits for" in doc.go).
func (s *pgStore) Release(ctx context.Context, k store.Key, token string) (store.Ownership, error) {
	s.lis.unregister(token)
	// A batch of token that was never answered must not run after this
	// release (stalled.go).
	if err := s.endStalled(ctx, token); err != nil {
		return 0, err
	}
	c, err := acquireConn(ctx, s.pool)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	row := name(k)
	// A token that never sent a queued attempt has no entry: the cheap
	// batch deletes none. The token is forgotten once a release of it
	// committed (which deleted its entry, if any).
	_, entry := s.queued.Load(token)
	if !s.hot.BusyLately(row) {
		o, freed, err := freeResult(c.SendBatch(ctx, s.freeBatch(row, token, entry)), entry)
		if err == nil && freed {
			s.queued.Delete(token)
		}
		if err != nil || freed {
			return o, err
		}
		// Others are queued (token's row is as it was: hand it over), or
		// token has no row (wake the first waiter if the lock is free, and
		// tell Taken from Missing).
	}
	o, _, _, err := releaseResult(c.SendBatch(ctx, s.releaseBatch(row, token)))
	if err == nil {
		s.queued.Delete(token)
	}
	return o, err
}

// freeBatch is the cheap release's statements: lockOwn, dropEntry when
// token may have a queue entry (entry), and freeIfUnqueued.
func (s *pgStore) freeBatch(row, token string, entry bool) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(s.sql.lockOwn, row, token)
	if entry {
		b.Queue(s.sql.dropEntry, row, token)
	}
	b.Queue(s.sql.freeIfUnqueued, row, token)
	return b
}

// freeResult reads a freeBatch's results (entry: it has dropEntry): the ownership token had, when
// freed is true (token's row is deleted); otherwise token's row is as it
// was, or token had none, and Release goes on with the hand-over's batch.
func freeResult(res pgx.BatchResults, entry bool) (o store.Ownership, freed bool, err error) {
	var live, deleted, found bool
	err = res.QueryRow().Scan(&live)
	switch {
	case err == nil:
		found = true
	case errors.Is(err, pgx.ErrNoRows):
		err = nil
	}
	if err == nil && entry {
		_, err = res.Exec()
	}
	if err == nil {
		err = res.QueryRow().Scan(&deleted)
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	}
	if closeErr := res.Close(); err == nil {
		err = closeErr
	}
	switch {
	case err != nil:
		return 0, false, classify(err)
	case !found || !deleted:
		return 0, false, nil
	case live:
		return store.Owned, true, nil
	}
	// token's own row, expired: no other token held the lock.
	return store.Missing, true, nil
}

// releaseBatch is a release's statements.
func (s *pgStore) releaseBatch(row, token string) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(s.sql.release, row, token)
	b.Queue(s.sql.dropEntry, row, token)
	if s.handsInfo {
		b.Queue(s.sql.handOverInfo, row, token, s.n.channel)
	} else {
		b.Queue(s.sql.handOver, row, token, s.n.channel)
	}
	return b
}

// releaseResult reads a releaseBatch's results: the ownership token had,
// how many waiters it notified (0 or 1), and the fence of the holding it
// handed over (0: none).
func releaseResult(res pgx.BatchResults) (store.Ownership, int64, uint64, error) {
	var live *bool
	var other bool
	var notified int64
	var handed *int64
	err := res.QueryRow().Scan(&live)
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil // token has no row
	}
	if err == nil {
		_, err = res.Exec()
	}
	if err == nil {
		err = res.QueryRow().Scan(&other, &notified, &handed)
	}
	// Close reports the batch's first error again: keep one.
	if closeErr := res.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return 0, 0, 0, classify(err)
	}
	var fence uint64
	if handed != nil {
		fence = uint64(*handed)
	}
	switch {
	case live != nil && *live:
		return store.Owned, notified, fence, nil
	case other:
		return store.Taken, notified, fence, nil
	}
	return store.Missing, notified, fence, nil
}

// Renew extends every request's row whose token still holds it unexpired,
// in one statement.
func (s *pgStore) Renew(ctx context.Context, reqs []store.RenewRequest) []store.RenewResult {
	res := make([]store.RenewResult, len(reqs))
	if len(reqs) == 0 {
		return res
	}
	fail := func(err error) []store.RenewResult {
		for i := range res {
			res[i].Err = err
		}
		return res
	}
	ttl := reqs[0].TTL
	rows, tokens, us := make([]string, len(reqs)), make([]string, len(reqs)), make([]int64, len(reqs))
	for i, r := range reqs {
		rows[i], tokens[i], us[i] = name(r.Key), r.Token, micros(r.TTL)
		ttl = min(ttl, r.TTL)
	}
	ctx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	c, err := acquireConn(ctx, s.pool)
	if err != nil {
		return fail(err)
	}
	defer c.Release()
	q, err := c.Query(ctx, s.sql.renew, rows, tokens, us)
	if err != nil {
		return fail(classify(err))
	}
	i := 0
	for q.Next() {
		var owned, taken bool
		if err := q.Scan(&owned, &taken); err != nil {
			q.Close()
			return fail(classify(err))
		}
		if i < len(res) {
			switch {
			case owned:
				res[i].Ownership = store.Owned
			case taken:
				res[i].Ownership = store.Taken
			default:
				res[i].Ownership = store.Missing
			}
		}
		i++
	}
	if err := q.Err(); err != nil {
		return fail(classify(err))
	}
	if i != len(res) {
		return fail(fmt.Errorf("postgres: %d renewal results for %d requests", i, len(res)))
	}
	return res
}

// Enqueue takes the lock for token when it is free or expired and no
// unexpired entry is queued before token's (or at all, if token has none),
// taking token's entry out; otherwise it puts token's entry in the lock's
// queue (keeping its place if it is there). All in one round trip: an
// uncontended acquisition writes no queue row. A token's first Enqueue on
// a lock not found busy lately starts with a plain attempt, and makes the
// queued one only when that finds the lock busy (see "Waiting" in doc.go).
//
// The release race: a waiter W whose transaction is under way while the
// holder H releases must either take the lock or be named by H's
// notification (or handed the lock), else it waits for H's expiry, up to
// a TTL. H's release locks (marks) the row in one statement and reads the
// queue in the next, with a snapshot taken after the marking. W, when no
// entry is before its own, tries the row first (insertLeaseQueued), and
// either
//   - finds it locked by H's release: the insert waits for H's
//     transaction to end (the row's lock), then takes the free lock, or
//     finds it handed (to W itself: its own row, see "Hand-over" in
//     doc.go; to another: W queues behind it); or
//   - finds it held before H's release locked it: the conflict locks the
//     row until W's transaction ends, so H's marking waits for W to
//     commit, and H's queue read then sees W's entry and hands W the lock
//     (or names W), the first waiter.
//
// A waiter with an entry before its own is not the one to wake. The same
// holds for a waiter E before W leaving the queue: W's reading of the
// entry before its own locks it (FOR KEY SHARE), so either E's deletion
// waits for W to commit (and E's release then sees W), or W's read waits
// for E's and skips E's entry, finding the lock free with nobody before
// it: W asks again at once (takeResult).
func (s *pgStore) Enqueue(ctx context.Context, k store.Key, token string, ttl time.Duration, renewed bool) (store.Reply, error) {
	row := name(k)
	if !s.lis.waiting(token) && !s.hot.BusyLately(row) {
		// A token's first request, on a lock this store has not found
		// busy lately: a plain attempt, as TryAcquire's, which is cheaper
		// than the queued one and takes a free lock alike (see "Waiting"
		// in doc.go). Busy, it is followed at once by the queued attempt.
		// It queues nothing, so it needs no listening: a Locker whose
		// locks are free opens no listening connection.
		r, _, err := s.take(ctx, row, token, ttl, firstAttempt)
		if err != nil {
			return store.Reply{}, err
		}
		if r.Acquired {
			return r, nil
		}
	}
	// Listen before the queued attempt runs, so that no release committed
	// after it goes unheard.
	s.lis.register(token)
	r, pred, err := s.take(ctx, row, token, ttl, queuedAttempt)
	if err != nil {
		return store.Reply{}, err
	}
	if r.Acquired {
		s.lis.unregister(token)
		return r, nil
	}
	s.hot.Busy(row)
	r.Predecessor = pred
	if r.Predecessor == "" {
		r.Predecessor = "holder"
	}
	return r, nil
}

// WaitTurn waits for a notification naming token (a release or a departing
// waiter found it first in the queue), the holder's or predecessor's
// expiry, or the end of token's own entry, keeping the entry alive
// meanwhile. A notification that carries a grant (a release handed the
// lock to token's entry) is reported as Acquired, dated from the send of
// the last request that confirmed the entry's expiry (see "Hand-over");
// a grant to another queueing of the token than the one those requests
// confirmed is not (Enqueue then reports what token holds).
func (s *pgStore) WaitTurn(ctx context.Context, k store.Key, token string, ttl time.Duration, r store.Reply) (store.Reply, error) {
	row := name(k)
	wake, connected := s.lis.waiter(token)
	if wake == nil {
		return store.Reply{}, nil // not queued: Enqueue again
	}
	var expiry <-chan time.Time
	if r.HolderTTL > 0 {
		t := time.NewTimer(r.HolderTTL)
		defer t.Stop()
		expiry = t.C
	}
	if !connected {
		// Not listening yet (or any more): look again soon.
		t := time.NewTimer(50*time.Millisecond + mathrand.N(50*time.Millisecond))
		defer t.Stop()
		expiry = t.C
	}
	refresh := time.NewTicker(max(ttl/3, time.Millisecond))
	defer refresh.Stop()
	for {
		select {
		case <-ctx.Done():
			return store.Reply{}, ctx.Err()
		case <-wake:
			return s.lis.granted(token), nil
		case <-expiry:
			return store.Reply{}, nil
		case <-refresh.C:
			alive, err := s.refresh(ctx, row, token, ttl)
			if err != nil && ctx.Err() == nil {
				return store.Reply{}, err
			}
			if !alive {
				return store.Reply{}, nil // the entry expired: queue anew
			}
		}
	}
}

// refresh extends token's queue entry; false when it is gone.
func (s *pgStore) refresh(ctx context.Context, row, token string, ttl time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	c, err := acquireConn(ctx, s.pool)
	if err != nil {
		return false, err
	}
	defer c.Release()
	sent := time.Now()
	var seq int64
	err = c.QueryRow(ctx, s.sql.refresh, row, token, micros(ttl)).Scan(&seq)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, classify(err)
	}
	s.lis.confirmed(token, seq, sent)
	return true, nil
}

// Leave deletes token's queue entry (and its row, if it holds the lock).
func (s *pgStore) Leave(ctx context.Context, k store.Key, token string) error {
	_, err := s.Release(ctx, k, token)
	return err
}

// Close stops the listener and the sweeper; rows left end by their TTL.
func (s *pgStore) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	s.closeMu.Unlock()
	s.stop()
	s.lis.close()
	s.sweeping.Wait()
	return nil
}

// sweepEvery is how often a Locker deletes expired rows (1000 at most of
// each table per sweep): the rows of holders and waiters that never
// released (a crash, a lost connection). An acquisition reuses an expired
// row of its lock anyway; the sweep removes those of locks no one takes
// again.
const sweepEvery = time.Minute

// sweep deletes expired rows until the store closes.
func (s *pgStore) sweep() {
	for {
		t := time.NewTimer(sweepEvery/2 + mathrand.N(sweepEvery))
		select {
		case <-s.stopped.Done():
			t.Stop()
			return
		case <-t.C:
		}
		s.sweepOnce(s.stopped)
	}
}

// sweepOnce deletes expired rows, at most 1000 of each table (claim rows
// once kept long enough: fireclaim.go).
func (s *pgStore) sweepOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, q := range []string{s.sql.sweepLeases, s.sql.sweepQueue, sweepClaims(s.n)} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			return
		}
	}
}

// listener holds the Locker's LISTEN connection, started by the first
// waiter and closed when it has no waiter and had no new one for an idle
// period (or at Close): PostgreSQL signals every listening backend of a
// database at each NOTIFY there, whoever it names, so a Locker that no
// longer waits should not listen.
type listener struct {
	s *pgStore
	// idle is how long the connection waits for a notification before it
	// pings the server, and how often it checks for waiters (listenIdle;
	// tests shorten it).
	idle time.Duration

	mu        sync.Mutex
	byToken   map[string]*waiter
	connected bool
	running   bool
	closing   bool // close was called: no new run starts
	// regs counts registrations, and regsSeen is regs at the last idle
	// check: equal, and no waiter, the listener was idle all along.
	regs, regsSeen uint64
	runs           sync.WaitGroup // run, while it is running (and closing)
}

// waiter is one queued token's wake-up, and what dates a hand-over to it.
type waiter struct {
	wake chan struct{} // buffered 1
	// grant is the last grant notified to the token, if any: kept apart
	// from wake, so that a blind wake-up never stands for it (nor hides it).
	grant *grant
	// seq and sent: the entry's seq, as the last request that confirmed
	// the entry's expiry (an Enqueue, a refresh) reported it, and that
	// request's send time; sent is zero until one did.
	seq  int64
	sent time.Time
}

// grant is a hand-over's notification: the handed row's fence and the seq
// of the entry it was handed to.
type grant struct{ fence, seq int64 }

// grantChannel names a Locker's own channel for grants: lockmw_grant_ and
// 16 random hex digits (a channel name is at most 63 bytes, whatever the
// table's name).
func grantChannel() string {
	var b [8]byte
	_, _ = cryptorand.Read(b[:])
	return "lockmw_grant_" + hex.EncodeToString(b[:])
}

// grantPrefix starts a grant's payload: "g <token> <fence> <seq>". A blind
// wake-up's payload is the token alone (tokens have no spaces), as
// releases before hand-overs sent. Grants go to the waiter's Locker's own
// channel, which Lockers of those releases do not listen on (and none is
// sent to their entries: see "Hand-over").
const grantPrefix = "g "

// parseGrant reads a grant's payload.
func parseGrant(payload string) (token string, g grant, ok bool) {
	f := strings.Fields(strings.TrimPrefix(payload, grantPrefix))
	if !strings.HasPrefix(payload, grantPrefix) || len(f) != 3 {
		return "", grant{}, false
	}
	fence, err1 := strconv.ParseInt(f[1], 10, 64)
	seq, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || fence <= 0 {
		return "", grant{}, false
	}
	return f[0], grant{fence: fence, seq: seq}, true
}

func newListener(s *pgStore) *listener {
	return &listener{s: s, idle: listenIdle, byToken: make(map[string]*waiter)}
}

// register makes token a waiter (draining an earlier wake-up: the
// statement that follows sees what it signalled) and starts the listening
// connection if it is not running.
func (l *listener) register(token string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.regs++
	if w := l.byToken[token]; w != nil {
		select {
		case <-w.wake:
		default:
		}
		w.grant = nil
		return
	}
	l.byToken[token] = &waiter{wake: make(chan struct{}, 1)}
	if !l.running && !l.closing && l.s.stopped.Err() == nil {
		l.running = true
		l.runs.Go(l.run)
	}
}

// waiting reports whether token is a waiter (registered).
func (l *listener) waiting(token string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byToken[token] != nil
}

// waiter returns token's wake-up channel (nil when not registered) and
// whether the connection listens.
func (l *listener) waiter(token string) (<-chan struct{}, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.byToken[token]
	if w == nil {
		return nil, l.connected
	}
	return w.wake, l.connected
}

func (l *listener) unregister(token string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.byToken, token)
}

// confirmed records that the request sent at sent confirmed the expiry of
// token's entry, whose seq is seq.
func (l *listener) confirmed(token string, seq int64, sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.byToken[token]; w != nil {
		w.seq, w.sent = seq, sent
	}
}

// granted returns the hand-over notified to token, as WaitTurn reports it,
// and unregisters token; or, for a blind wake-up, a grant to an entry of
// another seq than the one last confirmed (an earlier queueing), or a
// token whose entry was never confirmed, the zero Reply.
func (l *listener) granted(token string) store.Reply {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.byToken[token]
	if w == nil || w.grant == nil {
		return store.Reply{}
	}
	g := w.grant
	w.grant = nil
	if w.sent.IsZero() || g.seq != w.seq {
		return store.Reply{}
	}
	delete(l.byToken, token)
	return store.Reply{Acquired: true, Fence: uint64(g.fence), ValidFrom: w.sent}
}

// wakeAll wakes every waiter (the connection changed: notifications may
// have been missed); with connected it records the new state.
func (l *listener) wakeAll(connected bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.connected = connected
	for _, w := range l.byToken {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// notify wakes the waiter whose token a notification names, if it is
// this Locker's (every Locker listening on the channel receives it), and
// keeps the grant the notification carries, if any.
func (l *listener) notify(payload string) {
	token, g, isGrant := parseGrant(payload)
	if !isGrant {
		token = payload
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.byToken[token]; w != nil {
		if isGrant {
			w.grant = &g
		}
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// listenIdle is how long the listening connection waits for a
// notification before it checks the connection with a ping, and how
// often it checks whether it still has waiters (stopIdle).
const listenIdle = 5 * time.Second

// errIdle ends a listening connection that has no waiter, and had no new
// one since the check before.
var errIdle = errors.New("postgres: no waiter left to listen for")

// stopIdle reports whether the listener had no waiter since the last
// check, and then records that it no longer runs (a waiter registering
// from now on starts a new one).
func (l *listener) stopIdle() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.byToken) > 0 || l.regs != l.regsSeen {
		l.regsSeen = l.regs
		return false
	}
	l.running, l.connected = false, false
	return true
}

// run keeps a LISTEN connection until the store closes or no waiter is
// left, reconnecting (and waking every waiter) when it breaks.
func (l *listener) run() {
	ctx := l.s.stopped
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := l.listenOnce(ctx)
		if errors.Is(err, errIdle) {
			return
		}
		l.wakeAll(false)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			t := time.NewTimer(backoff/2 + mathrand.N(backoff/2+1))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, time.Second)
		}
	}
}

// listenOnce connects, listens and dispatches notifications until the
// connection fails or ctx ends.
func (l *listener) listenOnce(ctx context.Context) error {
	cfg := l.s.pool.Config().ConnConfig.Copy()
	// A wait's deadline only sets the socket's deadline: no cancel request
	// per idle period, and the connection stays usable.
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = conn.Exec(lctx, "LISTEN "+l.s.n.listen)
	if err == nil {
		_, err = conn.Exec(lctx, "LISTEN "+pgx.Identifier{l.s.grants}.Sanitize())
	}
	cancel()
	if err != nil {
		return err
	}
	l.wakeAll(true)
	checked := time.Now()
	for {
		if time.Since(checked) >= l.idle {
			// Checked every idle period, whatever notifications (for other
			// Lockers' waiters) arrive meanwhile.
			if l.stopIdle() {
				return errIdle
			}
			checked = time.Now()
		}
		wctx, cancel := context.WithTimeout(ctx, l.idle)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			l.notify(n.Payload)
			continue
		case ctx.Err() != nil:
			return nil
		case !errors.Is(err, context.DeadlineExceeded) && !pgconn.Timeout(err):
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return err
		}
	}
}

// close stops the listener and waits for it (and for one closing after
// an idle period).
func (l *listener) close() {
	l.mu.Lock()
	l.closing = true
	l.mu.Unlock()
	l.runs.Wait()
}
