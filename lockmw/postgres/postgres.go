package postgres

import (
	"context"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockmw/lockmw/lockmw"
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
	s := newStore(pool, n)
	l, err := lockmw.NewWithStore(store.Inside{Store: s}, opts...)
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	return l, nil
}

// pgStore keeps locks in rows.
type pgStore struct {
	pool *pgxpool.Pool
	n    names
	sql  statements

	lis *listener

	stop     context.CancelFunc
	stopped  context.Context
	sweeping sync.WaitGroup
	closeMu  sync.Mutex
	closed   bool
}

// statements are the store's SQL, with the Schema's names in.
type statements struct {
	insertLease, insertLeaseQueued, fence, release, renew,
	enqueue, refresh, sweepLeases, sweepQueue string
}

func newStatements(n names) statements {
	// $3 (or the ttl argument) is microseconds: validity is computed by
	// the server's clock (clock_timestamp(), the time the statement runs,
	// never now(), the start of the transaction).
	const until = `clock_timestamp() + $3::bigint * interval '1 microsecond'`
	upsert := func(where string) string {
		return `INSERT INTO ` + n.table + ` AS l (name, token, fence, expires_at)
SELECT $1, $2, 0, ` + until + where + `
ON CONFLICT (name) DO UPDATE SET token = excluded.token, fence = 0, expires_at = excluded.expires_at
WHERE l.expires_at <= clock_timestamp()`
	}
	return statements{
		// A plain attempt passes no unexpired waiter.
		insertLease: upsert(`
WHERE NOT EXISTS (SELECT 1 FROM ` + n.queue + ` q WHERE q.name = $1 AND q.expires_at > clock_timestamp())`),
		// A queued attempt passes no unexpired waiter queued before it.
		insertLeaseQueued: upsert(`
WHERE NOT EXISTS (SELECT 1 FROM ` + n.queue + ` q JOIN ` + n.queue + ` me ON me.name = q.name AND me.token = $2
	WHERE q.name = $1 AND q.seq < me.seq AND q.expires_at > clock_timestamp())`),
		// The fence is drawn while the row is locked by the statement
		// before, in the same transaction (see "Safety").
		fence: `WITH u AS (
	UPDATE ` + n.table + ` SET fence = nextval(` + n.seqLit + `) WHERE name = $1 AND token = $2 RETURNING fence
), dq AS (
	DELETE FROM ` + n.queue + ` WHERE name = $1 AND token = $2 AND $3::bool AND EXISTS (SELECT 1 FROM u)
)
SELECT (SELECT fence FROM u),
	(SELECT (extract(epoch FROM expires_at - clock_timestamp()) * 1e6)::bigint FROM ` + n.table + `
		WHERE name = $1 AND expires_at > clock_timestamp()),
	p.token, (extract(epoch FROM p.expires_at - clock_timestamp()) * 1e6)::bigint,
	-- A queued waiter that finds the lock free but others before it
	-- wakes the first (a release's notification may have missed it: it
	-- named the first waiter the release saw).
	(SELECT count(pg_notify($4, f.token)) FROM (
		SELECT token FROM ` + n.queue + ` WHERE name = $1 AND token <> $2 AND expires_at > clock_timestamp()
		ORDER BY seq LIMIT 1) f
	WHERE $3::bool AND NOT EXISTS (SELECT 1 FROM u)
		AND NOT EXISTS (SELECT 1 FROM ` + n.table + ` WHERE name = $1 AND expires_at > clock_timestamp()))
FROM (SELECT 1) one LEFT JOIN LATERAL (
	SELECT q.token, q.expires_at FROM ` + n.queue + ` q JOIN ` + n.queue + ` me ON me.name = q.name AND me.token = $2
	WHERE q.name = $1 AND q.seq < me.seq AND q.expires_at > clock_timestamp()
	ORDER BY q.seq DESC LIMIT 1) p ON true`,
		// A release, or a waiter leaving, wakes the first waiter still
		// queued (only it may take the lock), by its token.
		release: `WITH d AS (
	DELETE FROM ` + n.table + ` WHERE name = $1 AND token = $2 RETURNING expires_at > clock_timestamp() AS live
), dq AS (
	DELETE FROM ` + n.queue + ` WHERE name = $1 AND token = $2 RETURNING 1
)
SELECT (SELECT live FROM d),
	EXISTS (SELECT 1 FROM ` + n.table + ` WHERE name = $1 AND token <> $2 AND expires_at > clock_timestamp()),
	(SELECT count(pg_notify($3, f.token)) FROM (
		SELECT token FROM ` + n.queue + ` WHERE name = $1 AND token <> $2 AND expires_at > clock_timestamp()
		ORDER BY seq LIMIT 1) f
	WHERE EXISTS (SELECT 1 FROM d) OR EXISTS (SELECT 1 FROM dq))`,
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
		// An expired entry queues anew (a new seq); a live one keeps its
		// place.
		enqueue: `INSERT INTO ` + n.queue + ` AS q (name, token, seq, expires_at)
VALUES ($1, $2, nextval(` + n.seqLit + `), ` + until + `)
ON CONFLICT (name, token) DO UPDATE SET
	seq = CASE WHEN q.expires_at > clock_timestamp() THEN q.seq ELSE excluded.seq END,
	expires_at = excluded.expires_at`,
		refresh: `UPDATE ` + n.queue + ` SET expires_at = ` + until + `
WHERE name = $1 AND token = $2 AND expires_at > clock_timestamp()`,
		sweepLeases: `DELETE FROM ` + n.table + ` WHERE ctid = ANY (ARRAY (
	SELECT ctid FROM ` + n.table + ` WHERE expires_at < clock_timestamp() LIMIT 1000))`,
		sweepQueue: `DELETE FROM ` + n.queue + ` WHERE ctid = ANY (ARRAY (
	SELECT ctid FROM ` + n.queue + ` WHERE expires_at < clock_timestamp() LIMIT 1000))`,
	}
}

func newStore(pool *pgxpool.Pool, n names) *pgStore {
	ctx, cancel := context.WithCancel(context.Background())
	s := &pgStore{pool: pool, n: n, sql: newStatements(n), stop: cancel, stopped: ctx}
	s.lis = newListener(s)
	s.sweeping.Go(s.sweep)
	return s
}

// CheckTTL accepts every TTL lockmw does: rows expire by the microsecond.
func (s *pgStore) CheckTTL(time.Duration) error { return nil }

// name is the row name of lock k. Like Redis keys, the prefix and the key
// are joined as they are.
func name(k store.Key) string { return k.Prefix + k.Name }

// micros is ttl in microseconds, at least 1.
func micros(ttl time.Duration) int64 { return max(ttl.Microseconds(), 1) }

// Acquire takes the lock for token when its row is missing or expired and
// no waiter is queued.
func (s *pgStore) Acquire(ctx context.Context, k store.Key, token string, ttl time.Duration, renewed bool) (store.Reply, error) {
	r, _, err := s.take(ctx, s.sql.insertLease, name(k), token, ttl, false)
	return r, err
}

// take runs one acquisition transaction: the lease row's upsert (insert,
// one of insertLease and insertLeaseQueued) and the fence draw, in one
// round trip (a batch, which PostgreSQL runs as one implicit transaction).
// It also reports the queue entry just before token's, if any.
//
// Taking a pool connection (or making one) may take up to connectWait
// (or ctx's end): the lease's validity counts from the send, so it costs
// nothing but the caller's time. The batch itself is bounded by ttl: an
// answer later than that is worthless.
func (s *pgStore) take(ctx context.Context, insert, row, token string, ttl time.Duration, queued bool) (store.Reply, string, error) {
	cctx, cancel := context.WithTimeout(ctx, max(ttl, connectWait))
	c, err := s.conn(cctx)
	cancel()
	if err != nil {
		return store.Reply{}, "", err
	}
	defer c.Release()
	ctx, cancel = context.WithTimeout(ctx, ttl)
	defer cancel()
	var b pgx.Batch
	if queued {
		b.Queue(s.sql.enqueue, row, token, micros(ttl))
	}
	b.Queue(insert, row, token, micros(ttl))
	b.Queue(s.sql.fence, row, token, queued, s.n.channel)
	sent := time.Now()
	res := c.SendBatch(ctx, &b)
	var (
		fence          *int64
		holderUs       *int64
		pred           *string
		predUs         *int64
		passed         int64
		execErr, qrErr error
	)
	for range b.Len() - 1 {
		if _, execErr = res.Exec(); execErr != nil {
			break
		}
	}
	if execErr == nil {
		qrErr = res.QueryRow().Scan(&fence, &holderUs, &pred, &predUs, &passed)
	}
	closeErr := res.Close()
	if err := errors.Join(execErr, qrErr); err != nil {
		return store.Reply{}, "", classify(err)
	}
	if closeErr != nil {
		return store.Reply{}, "", classify(closeErr)
	}
	if fence != nil {
		return store.Reply{Acquired: true, Fence: uint64(*fence), ValidFrom: sent}, "", nil
	}
	r := store.Reply{}
	if holderUs != nil {
		r.HolderTTL = time.Duration(*holderUs) * time.Microsecond
	}
	p := ""
	if pred != nil {
		p = *pred
		if r.HolderTTL == 0 && predUs != nil {
			r.HolderTTL = time.Duration(*predUs) * time.Microsecond
		}
	}
	return r, p, nil
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

// Release deletes token's row and queue entry, and notifies the lock's
// channel when another waiter is queued.
func (s *pgStore) Release(ctx context.Context, k store.Key, token string) (store.Ownership, error) {
	s.lis.unregister(token)
	row := name(k)
	c, err := acquireConn(ctx, s.pool)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	var live *bool
	var other bool
	var notified int64
	err = c.QueryRow(ctx, s.sql.release, row, token, s.n.channel).Scan(&live, &other, &notified)
	switch {
	case err != nil:
		return 0, classify(err)
	case live != nil && *live:
		return store.Owned, nil
	case other:
		return store.Taken, nil
	}
	return store.Missing, nil
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

// Enqueue puts token's entry in the lock's queue (keeping its place if it
// is there) and, when no unexpired entry is before it, takes the lock and
// takes the entry out, all in one round trip.
func (s *pgStore) Enqueue(ctx context.Context, k store.Key, token string, ttl time.Duration, renewed bool) (store.Reply, error) {
	row := name(k)
	// Listen before the statement runs, so that no release committed
	// after it goes unheard.
	s.lis.register(token)
	r, pred, err := s.take(ctx, s.sql.insertLeaseQueued, row, token, ttl, true)
	if err != nil {
		return store.Reply{}, err
	}
	if r.Acquired {
		s.lis.unregister(token)
		return r, nil
	}
	r.Predecessor = pred
	if r.Predecessor == "" {
		r.Predecessor = "holder"
	}
	return r, nil
}

// WaitTurn waits for a notification naming token (a release or a departing
// waiter found it first in the queue), the holder's or predecessor's
// expiry, or the end of token's own entry, keeping the entry alive
// meanwhile.
func (s *pgStore) WaitTurn(ctx context.Context, k store.Key, token string, ttl time.Duration, r store.Reply) error {
	row := name(k)
	wake, connected := s.lis.waiter(token)
	if wake == nil {
		return nil // not queued: Enqueue again
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
			return ctx.Err()
		case <-wake:
			return nil
		case <-expiry:
			return nil
		case <-refresh.C:
			alive, err := s.refresh(ctx, row, token, ttl)
			if err != nil && ctx.Err() == nil {
				return err
			}
			if !alive {
				return nil // the entry expired: queue anew
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
	tag, err := c.Exec(ctx, s.sql.refresh, row, token, micros(ttl))
	if err != nil {
		return false, classify(err)
	}
	return tag.RowsAffected() == 1, nil
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

// sweepOnce deletes expired rows, at most 1000 of each table.
func (s *pgStore) sweepOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, q := range []string{s.sql.sweepLeases, s.sql.sweepQueue} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			return
		}
	}
}

// listener holds the Locker's LISTEN connection, started by the first
// waiter and kept until Close.
type listener struct {
	s *pgStore

	mu        sync.Mutex
	byToken   map[string]*waiter
	connected bool
	running   bool
	done      chan struct{}
}

// waiter is one queued token's wake-up.
type waiter struct {
	wake chan struct{} // buffered 1
}

func newListener(s *pgStore) *listener {
	return &listener{s: s, byToken: make(map[string]*waiter)}
}

// register makes token a waiter (draining an earlier wake-up: the
// statement that follows sees what it signalled) and starts the listening
// connection if it is not running.
func (l *listener) register(token string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.byToken[token]; w != nil {
		select {
		case <-w.wake:
		default:
		}
		return
	}
	l.byToken[token] = &waiter{wake: make(chan struct{}, 1)}
	if !l.running && l.s.stopped.Err() == nil {
		l.running = true
		l.done = make(chan struct{})
		go l.run()
	}
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
// this Locker's (every Locker listening on the channel receives it).
func (l *listener) notify(token string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.byToken[token]; w != nil {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// listenIdle is how long the listening connection waits for a
// notification before it checks the connection with a ping.
const listenIdle = 5 * time.Second

// run keeps a LISTEN connection until the store closes, reconnecting (and
// waking every waiter) when it breaks.
func (l *listener) run() {
	defer close(l.done)
	ctx := l.s.stopped
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := l.listenOnce(ctx)
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
	cancel()
	if err != nil {
		return err
	}
	l.wakeAll(true)
	for {
		wctx, cancel := context.WithTimeout(ctx, listenIdle)
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

// close stops the listener and waits for it.
func (l *listener) close() {
	l.mu.Lock()
	running, done := l.running, l.done
	l.mu.Unlock()
	if running {
		<-done
	}
}
