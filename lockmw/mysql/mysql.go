package mysql

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/internal/stalls"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

const (
	// MinTTL is the shortest lease TTL the store accepts: a database
	// round trip with a write must fit well inside it.
	MinTTL = 100 * time.Millisecond
	// Retention is how long the row of a lock stays after its holding
	// ended (released or expired) before the store deletes it (see the
	// package documentation, "Rows"). It is also the longest lease TTL:
	// the fence argument needs every TTL to be at most Retention.
	Retention = time.Hour
	// MaxTTL is the longest lease TTL the store accepts.
	MaxTTL = Retention

	// BackoffMin and BackoffMax bound the pause of a default-mode waiter
	// between its attempts on a lock whose holding lasts (jittered,
	// doubling; 5-10ms while the lock changes hands between attempts, see
	// Waiting); BackoffMax also bounds a queued waiter's sleep between
	// polls: MariaDB cannot notify, so waiters poll.
	BackoffMin = 5 * time.Millisecond
	BackoffMax = 100 * time.Millisecond
)

// busyFlag marks an acquisition's LAST_INSERT_ID as "busy": the low 32
// bits are the holder's remaining TTL in microseconds (MaxTTL, 3.6e9 µs,
// fits), and the 28 bits above them the low bits of the holder's fence
// (Reply.Seen: a waiter tells a new holding from the one it saw, see
// poll.go). ownFlag marks it as "held by the caller's token already" (a
// hand-over), with the same bits. queueFlag (takeRowStmt's only) marks a
// free row whose queue must be read. Fences stay far below all three.
const (
	busyFlag  = 1 << 62
	ownFlag   = 1 << 61
	queueFlag = 1 << 60
	leftMask  = 1<<32 - 1
	seenShift = 32
	seenMask  = 1<<28 - 1
)

// cleanupEvery is how often a Locker deletes rows whose holding ended more
// than Retention ago; cleanupBatch bounds one DELETE.
const (
	cleanupEvery = time.Minute
	cleanupBatch = 1000
)

// renewBatch bounds the leases renewed by one statement.
const renewBatch = 256

// New returns a Locker keeping its locks in the table DefaultTable of db's
// database, which must exist (CreateTable). See NewWithTable.
func New(db *sql.DB, opts ...lockmw.Option) (*lockmw.Locker, error) {
	return NewWithTable(db, DefaultTable, opts...)
}

// NewWithTable returns a Locker keeping its locks in table of db's
// database (created by CreateTable or the SQL of Schema). Options are
// lockmw's; the lease TTL must be within [MinTTL, MaxTTL].
//
// It asks the server once (bounded by 10s) whether it is MariaDB 10.3 or
// later (else ErrNotMariaDB) and whether the tables exist (else
// ErrMissingTable, saying how to create them); both match
// lockmw.ErrStoreSetup. A server that cannot be reached, or refuses the
// login, is not an error here (a service often starts before its
// database): New logs one warning (lockmw.WithLogger) with the address
// when it knows it and the cause, and the Locker's requests fail with
// lockmw.ErrUnavailable until the server answers. The Locker does not own
// db: close db after the Locker.
func NewWithTable(db *sql.DB, table string, opts ...lockmw.Option) (*lockmw.Locker, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: mysql.New needs a *sql.DB, e.g. sql.Open(\"mysql\", \"user:pass@tcp(host:3306)/db\")", lockmw.ErrNilClient)
	}
	n, err := namesFor(table)
	if err != nil {
		return nil, err
	}
	s := newStore(db, n)
	l, err := lockmw.NewWithStore(store.Inside{Store: s}, opts...)
	if err != nil {
		return nil, err
	}
	if err := s.check(); err != nil {
		_ = l.Close()
		return nil, err
	}
	return l, nil
}

// UseLogger takes the Locker's logger (store.Logging), for check's warning.
func (s *sqlStore) UseLogger(logger *slog.Logger) { s.logger = logger }

// check asks the server what it is and whether the tables exist; it
// returns only definite refusals, and warns once when the server cannot be
// asked.
func (s *sqlStore) check() error {
	db, n := s.db, s.n
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		s.warnUnreachable(classify(err))
		return nil // not reachable now: requests will tell
	}
	if !mariaDB103(version) {
		return fmt.Errorf("%w: the server says VERSION() = %q; MySQL has no SEQUENCE, from which the store's fences come", ErrNotMariaDB, version)
	}
	for _, t := range []string{n.locks, n.fence, n.queue, n.claims} {
		if _, err := db.ExecContext(ctx, "SELECT 1 FROM "+t+" LIMIT 0"); err != nil {
			if err := classify(err); errors.Is(err, ErrMissingTable) {
				return fmt.Errorf("%w; create the store's tables with mysql.CreateTable(ctx, db, %q) or run the SQL of mysql.Schema(%q)", err, n.plain, n.plain)
			}
			s.warnUnreachable(classify(err))
			return nil
		}
	}
	// Hand-overs need the queue's column handover, and acquisitions the
	// lock table's column queue_seen (schema.go): a table without it was
	// made by an earlier version.
	columns := []struct{ table, column, since string }{
		{n.queue, "handover", "made before waiters took hand-overs"},
		{n.locks, "queue_seen", "made before plain attempts skipped the queue of a lock no Fair waiter queued for"},
	}
	if s.info != "" {
		// A Locker given lockmw.WithHolderInfo writes its description
		// with each holding (inspect.go); one without it writes neither
		// column, and runs on a table without them.
		columns = append(columns, struct{ table, column, since string }{n.locks, "holder, held_since", "made before Lockers kept a holder description (lockmw.WithHolderInfo)"})
	}
	for _, c := range columns {
		if _, err := db.ExecContext(ctx, "SELECT "+c.column+" FROM "+c.table+" LIMIT 0"); err != nil {
			var me *driver.MySQLError
			if errors.As(err, &me) && me.Number == erBadField {
				return fmt.Errorf("%w: %s has no column %s (%s); migrate with mysql.CreateTable(ctx, db, %q), idempotent, or run the ALTER TABLE statements of mysql.Schema(%q): Lockers of the earlier version keep working beside it", ErrOldSchema, c.table, c.column, c.since, n.plain, n.plain)
			}
			s.warnUnreachable(classify(err))
			return nil
		}
	}
	return nil
}

// warnUnreachable logs, once, that New could not ask the server, with the
// address when the error names it (database/sql keeps the DSN to itself).
func (s *sqlStore) warnUnreachable(err error) {
	if s.logger == nil {
		return
	}
	attrs := []any{slog.Any("error", err)}
	if a := addressOf(err); a != "" {
		attrs = append([]any{slog.String("address", a)}, attrs...)
	}
	s.logger.Warn("lockmw: MariaDB cannot be reached or refused the login; the Locker is made all the same, and its requests fail with ErrUnavailable until MariaDB answers", attrs...)
}

// addressOf is the address a failed dial names, or "".
func addressOf(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Addr != nil {
		return op.Addr.String()
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.Name
	}
	return ""
}

// mariaDB103 reports whether VERSION() names MariaDB 10.3 or later.
func mariaDB103(version string) bool {
	if !strings.Contains(version, "MariaDB") {
		return false
	}
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return err1 == nil && err2 == nil && (major > 10 || major == 10 && minor >= 3)
}

// sqlStore is the store on one *sql.DB.
type sqlStore struct {
	db        *sql.DB
	n         names
	retention time.Duration

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	logger *slog.Logger          // the Locker's (store.Logging), for check's warning
	conns  conns                 // the pool's connections: server ids, prepared statements (prepared.go)
	stalls stalls.Notes[stalled] // connections of statements never answered, by token (stalled.go)

	queuedMu  sync.Mutex
	queued    map[string]time.Time // tokens that may have a queue entry, since when (queue.go)
	dequeuing sync.WaitGroup       // winners' entries being deleted (Close waits)
	// closing is set, under queuedMu, when Close begins: no delete joins
	// dequeuing after it (a WaitGroup's Add must not race its Wait).
	closing bool

	pacesMu sync.Mutex
	paces   map[store.Key]time.Duration // what waiters saw of each key's hand-overs (queue.go)

	pace pacer // when default-mode waiters try again (poll.go)

	rows rowKinds // what the store last saw of keys' rows: whether takeRow may decide

	texts texts // the prepared statements' texts (prepared.go)

	info string // the Locker's holder description (UseHolderInfo), "" for none: set before the first acquisition
}

var (
	_ store.Store       = (*sqlStore)(nil)
	_ store.LeftNothing = (*sqlStore)(nil)
	_ store.Logging     = (*sqlStore)(nil)
	_ store.Backoff     = (*sqlStore)(nil)
	_ store.Notifier    = (*sqlStore)(nil)
	_ store.Queue       = (*sqlStore)(nil)
	_ store.FairOnly    = (*sqlStore)(nil)
	_ store.FireClaimer = (*sqlStore)(nil)
)

func newStore(db *sql.DB, n names) *sqlStore {
	s := &sqlStore{db: db, n: n, retention: Retention, stop: make(chan struct{}), done: make(chan struct{})}
	go s.cleanLoop(cleanupEvery)
	return s
}

// hexLit is s as a MariaDB hex literal: statements carry the caller's
// strings this way, so that no quoting is needed and one statement is one
// round trip whatever the DSN (no server-side prepare).
func hexLit(s string) string { return "X'" + hex.EncodeToString([]byte(s)) + "'" }

// bounded prefixes a statement with MariaDB's per-statement time limit:
// four fifths of ttl, so that the server's answer (ErrStatementTimeout)
// comes before the caller's own deadline of ttl.
func bounded(ttl time.Duration, q string) string {
	d := max(ttl*4/5, time.Millisecond)
	return "SET STATEMENT max_statement_time=" + strconv.FormatFloat(d.Seconds(), 'f', 6, 64) + " FOR " + q
}

// micros is d in whole microseconds, at least 1.
func micros(d time.Duration) string { return strconv.FormatInt(max(d.Microseconds(), 1), 10) }

func (s *sqlStore) CheckTTL(ttl time.Duration) error {
	switch {
	case ttl < MinTTL:
		return fmt.Errorf("%w: lease TTL %v is under the MariaDB store's minimum %v (a database round trip must fit well inside it): use at least %v", lockmw.ErrInvalidOption, ttl, MinTTL, MinTTL)
	case ttl > MaxTTL:
		return fmt.Errorf("%w: lease TTL %v is over the MariaDB store's maximum %v (its rows' retention): use at most %v, with the watchdog renewing", lockmw.ErrInvalidOption, ttl, MaxTTL, MaxTTL)
	}
	return nil
}

// LeftNothing reports that a failed acquisition took nothing, so that the
// Locker neither gives it back nor warns that it could not: its statement
// (take's, the first of Enqueue) never reached the server or was refused
// before it ran (notRun). Every other failure (a timeout, a broken
// connection) may have written the row.
func (s *sqlStore) LeftNothing(err error) bool {
	var u *unsentError
	return errors.As(err, &u)
}

func (s *sqlStore) Backoff() (time.Duration, time.Duration) { return BackoffMin, BackoffMax }

func checkKey(k store.Key) error {
	if len(k.Prefix) > 512 {
		return fmt.Errorf("%w: the prefix is %d bytes; the MariaDB store keeps at most 512", lockmw.ErrInvalidKey, len(k.Prefix))
	}
	return nil
}

// exec runs q on a connection of the pool, bounded by d, telling an
// exhausted pool from a server that does not answer. A statement InnoDB
// chose as a deadlock's victim was rolled back whole (it wrote nothing):
// it is sent again, a few times, within d.
func (s *sqlStore) exec(ctx context.Context, d time.Duration, q string) (sql.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return s.execOn(ctx, s.db, q)
}

// execOn is exec on e, bounded by ctx.
func (s *sqlStore) execOn(ctx context.Context, e execer, q string) (sql.Result, error) {
	for try := 1; ; try++ {
		res, err := e.ExecContext(ctx, q)
		if try < deadlockTries && isDeadlock(err) && ctx.Err() == nil {
			continue
		}
		return res, s.classify(ctx, err)
	}
}

// deadlockTries bounds how often exec sends a statement that deadlocked.
const deadlockTries = 5

// isDeadlock reports whether err is InnoDB's deadlock error.
func isDeadlock(err error) bool {
	var me *driver.MySQLError
	return errors.As(err, &me) && me.Number == erLockDeadlock
}

// classify is classify, telling an exhausted pool (the statement's context
// ended while every connection of a bounded pool was in use) apart.
func (s *sqlStore) classify(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		if st := s.db.Stats(); st.MaxOpenConnections > 0 && st.InUse >= st.MaxOpenConnections && st.WaitCount > 0 {
			return fmt.Errorf("%w: all %d connections (SetMaxOpenConns) stayed in use: %w", ErrPoolExhausted, st.MaxOpenConnections, err)
		}
	}
	return classify(err)
}

// Acquire is one INSERT … SELECT … ON DUPLICATE KEY UPDATE that passes no
// unexpired Fair waiter (see the package documentation, "Acquisition").
func (s *sqlStore) Acquire(ctx context.Context, k store.Key, token string, ttl time.Duration, _ bool) (store.Reply, error) {
	return s.take(ctx, k, token, ttl, false)
}

// take is one acquisition attempt: the lock's row is written for token
// when it is missing or expired and no unexpired queue entry is before
// token's (queued), or queued at all (!queued). Passing the queue only
// decides whether the row is written; what makes the lease safe is the
// row (see "Safety" in the package documentation).
func (s *sqlStore) take(ctx context.Context, k store.Key, token string, ttl time.Duration, queued bool) (store.Reply, error) {
	if err := checkKey(k); err != nil {
		return store.Reply{}, err
	}
	if s.rows.of(k) == rowPlain {
		// The row exists, and no Fair waiter had queued for it when last
		// seen: one UPDATE of it decides (takeRowStmt), without the
		// queue's subquery nor an insert attempt.
		r, decided, err := s.takeRow(ctx, k, token, ttl, queued)
		if err != nil || decided {
			return r, err
		}
	}
	q := s.takeStmt(k, token, ttl, queued)
	sent := time.Now()
	res, err := s.send(ctx, ttl, token, query{text: q})
	if err != nil {
		if notRun(err) {
			err = &unsentError{err}
		}
		return store.Reply{}, err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return store.Reply{}, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return store.Reply{}, err
	}
	switch {
	case id&busyFlag != 0:
		if queued {
			s.rows.saw(k, rowQueued, false) // the attempt set queue_seen
		} else {
			s.rows.saw(k, rowPlain, false) // the row exists: the next attempt may take it by takeRow
		}
		return store.Reply{HolderTTL: time.Duration(id&leftMask) * time.Microsecond, Seen: 1 + id>>seenShift&seenMask}, nil
	case id&ownFlag != 0:
		// The row holds token, live: a release handed it the lock (see
		// Release), and its waiter did not learn it from a poll. The
		// statement wrote nothing; the holding is reported as it is.
		return s.ownDescribed(ctx, k, token, ttl)
	}
	if id <= 0 || n < 1 || n > 2 {
		return store.Reply{}, fmt.Errorf("lockmw/mysql: acquisition answered %d rows affected, id %d: not an answer of this store's statement", n, id)
	}
	// Inserted (1 row affected): queue_seen = 0. A row taken over may
	// have queue_seen = 1: takeRow then says so (queueFlag), once.
	s.rows.saw(k, rowPlain, n == 1)
	return store.Reply{Acquired: true, Fence: uint64(id), ValidFrom: sent}, nil
}

// takeRow is a plain attempt on k's existing row (takeRowStmt), for a key
// whose row the store saw with queue_seen = 0: decided is false when the
// statement found no row (the cleanup deleted it) or a row a Fair waiter
// queued for, and free: take then sends its full statement, which reads
// the queue or inserts.
func (s *sqlStore) takeRow(ctx context.Context, k store.Key, token string, ttl time.Duration, queued bool) (r store.Reply, decided bool, err error) {
	sent := time.Now()
	res, err := s.send(ctx, ttl, token, s.takeRowStmt(k, token, ttl, queued))
	if err != nil {
		if notRun(err) {
			err = &unsentError{err}
		}
		return store.Reply{}, true, err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return store.Reply{}, true, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return store.Reply{}, true, err
	}
	switch {
	case id == 0:
		// No row (the cleanup deleted it): the full statement inserts.
		s.rows.saw(k, rowUnknown, false)
		return store.Reply{}, false, nil
	case id&queueFlag != 0:
		// Free, and a Fair waiter queued for it once: the full
		// statement reads the queue.
		s.rows.saw(k, rowQueued, false)
		return store.Reply{}, false, nil
	case id&busyFlag != 0:
		if queued {
			s.rows.saw(k, rowQueued, false) // the attempt set queue_seen
		}
		return store.Reply{HolderTTL: time.Duration(id&leftMask) * time.Microsecond, Seen: 1 + id>>seenShift&seenMask}, true, nil
	case id&ownFlag != 0:
		r, err := s.ownDescribed(ctx, k, token, ttl)
		return r, true, err
	}
	if n != 1 {
		return store.Reply{}, true, fmt.Errorf("lockmw/mysql: acquisition answered %d rows affected, id %d: not an answer of this store's statement", n, id)
	}
	return store.Reply{Acquired: true, Fence: uint64(id), ValidFrom: sent}, true, nil
}

// takeRowStmt is a plain attempt as one UPDATE of k's row, matched by its
// key alone: it takes the row when it is expired and no Fair waiter ever
// queued for it (queue_seen = 0), as take's full statement would (its
// update branch without the queue's subquery, which a row with queue_seen
// = 0 never reads), drawing the fence under the row's lock. Its insert id
// says what it found: the new fence; busyFlag or ownFlag with the
// holder's time left and fence bits, as take's; queueFlag for a free row
// with queue_seen = 1 (the queue must be read); 0 when no row matched.
// The three assignments decide alike: each tests the row's expires_at and
// queue_seen, which only the last one writes, after its test, and
// UTC_TIMESTAMP(6) is the statement's start throughout; so no session
// variable carries the decision. A queued attempt (a Fair waiter's) that
// finds the row held by another token sets queue_seen before its waiter's
// entry is queued (see take): that assignment changes queue_seen only on
// a live row, where the decision is "busy" either way.
func (s *sqlStore) takeRowStmt(k store.Key, token string, ttl time.Duration, queued bool) query {
	// The strings are parameters (prepared.go), in the order of their
	// placeholders in takeRowText: the text is the same for every key and
	// token, written once per TTL and prepared once per connection.
	tok := hex.EncodeToString([]byte(token))
	args := make([]any, 0, 6)
	args = append(args, tok)
	if s.info != "" {
		args = append(args, hex.EncodeToString([]byte(token+sinceTaken+s.info)))
	}
	if queued {
		args = append(args, tok)
	}
	args = append(args, tok, hex.EncodeToString([]byte(k.Prefix)), hex.EncodeToString([]byte(k.Name)))
	return query{text: s.texts.get(textKey{takeRow, ttl, queued}, s.takeRowText), args: args}
}

// takeRowText is takeRowStmt's text, its strings placeholders.
func (s *sqlStore) takeRowText(tk textKey) string {
	free := "expires_at <= UTC_TIMESTAMP(6)"
	take := "(" + free + " AND queue_seen = 0)"
	mark := ""
	if tk.queued {
		mark = "queue_seen = IF(" + free + " OR token = " + placeholder + ", queue_seen, 1), "
	}
	return bounded(tk.ttl, "UPDATE "+s.n.locks+" SET "+
		"fence = IF("+take+", LAST_INSERT_ID(NEXTVAL("+s.n.fence+")), fence), "+
		"token = IF("+take+", "+placeholder+", token), "+
		s.describeRow(take)+
		mark+
		"expires_at = IF("+take+", UTC_TIMESTAMP(6) + INTERVAL "+micros(tk.ttl)+" MICROSECOND, "+
		"IF(LAST_INSERT_ID(IF("+free+", "+strconv.FormatInt(queueFlag, 10)+", IF(token = "+placeholder+", "+strconv.FormatInt(ownFlag, 10)+", "+strconv.FormatInt(busyFlag, 10)+") + "+
		"((fence & "+strconv.Itoa(seenMask)+") << "+strconv.Itoa(seenShift)+") + "+
		"GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), 0))) IS NULL, NULL, expires_at))"+
		" WHERE prefix = "+placeholder+" AND name = "+placeholder)
}

// maxRowsSeen bounds the keys whose row the store remembers; past it,
// they are forgotten (and learnt again).
const maxRowsSeen = 4096

// What the store last saw of a key's row (rowKinds).
const (
	rowUnknown = iota // the full statement: it inserts, or reads the queue
	rowPlain          // the row exists with queue_seen = 0: takeRow
	rowQueued         // the row has queue_seen = 1: the full statement
)

// rowKinds is what the store last saw of each key's row, safe for
// concurrent use. It only chooses a statement: a wrong guess costs a
// round trip, never a decision (each statement reads the row itself).
type rowKinds struct {
	mu   sync.Mutex
	keys map[store.Key]uint8
}

func (rk *rowKinds) of(k store.Key) uint8 {
	rk.mu.Lock()
	defer rk.mu.Unlock()
	return rk.keys[k]
}

// saw notes kind for k; rowPlain does not replace rowQueued unless
// inserted says the row was just made (with queue_seen = 0).
func (rk *rowKinds) saw(k store.Key, kind uint8, inserted bool) {
	rk.mu.Lock()
	defer rk.mu.Unlock()
	if kind == rowPlain && rk.keys[k] == rowQueued && !inserted {
		return
	}
	if rk.keys == nil || len(rk.keys) >= maxRowsSeen {
		rk.keys = make(map[store.Key]uint8)
	}
	rk.keys[k] = kind
}

// takeStmt is take's statement (see take and the package documentation,
// "Acquisition").
func (s *sqlStore) takeStmt(k store.Key, token string, ttl time.Duration, queued bool) string {
	// @lockmw_take, a variable of the statement's connection, holds the
	// decision, made once by the first assignment: the row is free
	// (expired) and the queue lets token pass. The last assignment reads
	// it a last time and sets it to NULL, as if never set: the pool's
	// connection is the application's too.
	//
	// A queued attempt marks the row only when it does not take it: its
	// waiter then queues an entry, after the mark. A row inserted is
	// taken: queue_seen = 0.
	seen, mark := "0", ""
	if queued {
		mark = "queue_seen = IF(@lockmw_take, queue_seen, 1), "
	}
	//
	// A Locker with a holder description writes it, and the holding's
	// start, in the inserted row and in a row taken over (describeRow);
	// one without writes neither column.
	cols, vals, described := "", "", ""
	if s.info != "" {
		cols, vals = ", holder, held_since", ", "+s.holderLit(token, sinceTaken)+", UTC_TIMESTAMP(6)"
		described = "holder = IF(@lockmw_take, VALUES(holder), holder), held_since = IF(@lockmw_take, VALUES(held_since), held_since), "
	}
	return bounded(ttl, "INSERT INTO "+s.n.locks+" (prefix, name, token, fence, expires_at, queue_seen"+cols+") VALUES ("+
		hexLit(k.Prefix)+", "+hexLit(k.Name)+", "+hexLit(token)+", LAST_INSERT_ID(NEXTVAL("+s.n.fence+")), "+
		"UTC_TIMESTAMP(6) + INTERVAL "+micros(ttl)+" MICROSECOND, "+seen+vals+")"+
		" ON DUPLICATE KEY UPDATE "+
		"token = IF(@lockmw_take := (expires_at <= UTC_TIMESTAMP(6) AND (queue_seen = 0 OR "+s.queueClear(k, token, queued)+")), VALUES(token), token), "+
		mark+
		"fence = IF(@lockmw_take, LAST_INSERT_ID(NEXTVAL("+s.n.fence+")), fence), "+
		described+
		"expires_at = IF(IF(@lockmw_take, (@lockmw_take := NULL) IS NULL, (@lockmw_take := NULL) IS NOT NULL), VALUES(expires_at), "+
		"IF(LAST_INSERT_ID(IF(token = VALUES(token), "+strconv.FormatInt(ownFlag, 10)+", "+strconv.FormatInt(busyFlag, 10)+") + "+
		"((fence & "+strconv.Itoa(seenMask)+") << "+strconv.Itoa(seenShift)+") + "+
		"GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), 0)) IS NULL, NULL, expires_at))")
}

// Release ends the holding: the row keeps its place (see "Rows"), with no
// token and an expiry of now. A token that may have a queue entry (a Fair
// waiter's) has it deleted first.
func (s *sqlStore) Release(ctx context.Context, k store.Key, token string) (store.Ownership, error) {
	if err := checkKey(k); err != nil {
		return 0, err
	}
	// A statement of token that was never answered must not run after
	// this release (stalled.go).
	if err := s.endStalled(ctx, token); err != nil {
		return 0, err
	}
	if err := s.dequeue(ctx, k, token); err != nil {
		return 0, err
	}
	q := s.releasePlainStmt(k, token)
	if s.contended(k) {
		q = query{text: s.releaseStmt(k, token)}
	}
	res, err := s.execQuery(ctx, time.Minute, q)
	if err != nil {
		return 0, err
	}
	if n, err := res.RowsAffected(); err != nil {
		return 0, err
	} else if n == 1 {
		return store.Owned, nil
	}
	found, err := s.holders(ctx, []store.Key{k})
	if err != nil {
		return 0, err
	}
	return found[k].ownership(token), nil
}

// releasePlainStmt ends token's holding of k's row, leaving the row free
// (no token, expired now): one UPDATE matched on token and an unexpired
// row, its strings parameters (prepared.go).
func (s *sqlStore) releasePlainStmt(k store.Key, token string) query {
	return query{
		text: s.texts.get(textKey{kind: releasePlain}, s.releasePlainText),
		args: []any{hex.EncodeToString([]byte(k.Prefix)), hex.EncodeToString([]byte(k.Name)), hex.EncodeToString([]byte(token))},
	}
}

// releasePlainText is releasePlainStmt's text, its strings placeholders.
func (s *sqlStore) releasePlainText(textKey) string {
	return "UPDATE " + s.n.locks + " SET token = X'', expires_at = UTC_TIMESTAMP(6) WHERE prefix = " + placeholder + " AND name = " + placeholder +
		" AND token = " + placeholder + " AND expires_at > UTC_TIMESTAMP(6)"
}

// releaseStmt, for a lock that waiters of this store queued for (a plain
// release, which leaves the row free, costs the server less: the
// hand-over's subqueries cost more to plan than to run, and an
// uncontended lock has nobody to hand to; a waiter of another Locker
// then finds the lock free at its next poll), ends token's holding of k's row in one UPDATE, under the
// row's lock, matched on token and an unexpired row: when the first live
// queue entry of another token takes hand-overs, the row becomes that
// token's, with a fence drawn in the statement and the entry's expiry;
// otherwise the row is left free (no token, expired now). See the package
// documentation, "Safety: how a lease becomes live", Hand-over.
func (s *sqlStore) releaseStmt(k store.Key, token string) string {
	// The assignments run left to right, later ones seeing earlier ones'
	// results (as in take): token becomes the first live entry's of
	// another token, if that entry takes hand-overs, else "" (free); the
	// fence is drawn only for a hand-over, and the expiry is that entry's
	// (a primary-key read), else now. Two subqueries: each costs the
	// statement more to plan than to run.
	first := "SELECT IF(q.handover = 1, q.token, NULL) FROM " + s.n.queue + " q WHERE " + keyWhere("q", k) +
		" AND q.expires_at > UTC_TIMESTAMP(6) AND q.token <> " + hexLit(token) + " ORDER BY q.seq LIMIT 1"
	expiry := "SELECT e.expires_at FROM " + s.n.queue + " e WHERE " + keyWhere("e", k) + " AND e.token = " + s.n.locks + ".token"
	return "UPDATE " + s.n.locks + " SET token = IFNULL((" + first + "), X''), " +
		"fence = IF(token = X'', fence, NEXTVAL(" + s.n.fence + ")), " +
		"expires_at = IF(token = X'', UTC_TIMESTAMP(6), (" + expiry + "))" +
		" WHERE prefix = " + hexLit(k.Prefix) + " AND name = " + hexLit(k.Name) + " AND token = " + hexLit(token) + " AND expires_at > UTC_TIMESTAMP(6)"
}

// own reports token's live holding of k's row, read at once: Acquired
// with the row's fence, its validity dated from the read's send time plus
// what the row says is left, minus ttl (so it ends no later than the row);
// a zero reply when the row no longer holds token.
func (s *sqlStore) own(ctx context.Context, k store.Key, token string, ttl time.Duration) (store.Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	var fence uint64
	var leftUs int64
	sent := time.Now()
	err := s.db.QueryRowContext(ctx, "SELECT fence, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) FROM "+s.n.locks+
		" WHERE prefix = "+hexLit(k.Prefix)+" AND name = "+hexLit(k.Name)+" AND token = "+hexLit(token)+" AND expires_at > UTC_TIMESTAMP(6)").Scan(&fence, &leftUs)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Reply{}, nil
	}
	if err != nil {
		return store.Reply{}, s.classify(ctx, err)
	}
	return handedReply(sent, fence, time.Duration(leftUs)*time.Microsecond, ttl), nil
}

// handedReply is the reply for a holding of token that a read sent at
// sent found with left to run: valid from sent + left - ttl, so that the
// lease ends no later than the row (the read ran after sent, and the row
// then had left to run).
func handedReply(sent time.Time, fence uint64, left, ttl time.Duration) store.Reply {
	return store.Reply{Acquired: true, Fence: fence, ValidFrom: sent.Add(min(left, ttl) - ttl)}
}

// holder is what a lock's row says.
type holder struct {
	token string
	live  bool // unexpired
}

func (h holder) ownership(token string) store.Ownership {
	switch {
	case h.token == token && h.live:
		return store.Owned
	case h.token != token && h.token != "" && h.live:
		return store.Taken
	}
	return store.Missing
}

// holders reads the rows of keys.
func (s *sqlStore) holders(ctx context.Context, keys []store.Key) (map[store.Key]holder, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var in strings.Builder
	for i, k := range keys {
		if i > 0 {
			in.WriteString(", ")
		}
		in.WriteString("(" + hexLit(k.Prefix) + ", " + hexLit(k.Name) + ")")
	}
	rows, err := s.db.QueryContext(ctx, "SELECT prefix, name, token, expires_at > UTC_TIMESTAMP(6) FROM "+s.n.locks+" WHERE (prefix, name) IN ("+in.String()+")")
	if err != nil {
		return nil, s.classify(ctx, err)
	}
	defer rows.Close()
	out := make(map[store.Key]holder, len(keys))
	for rows.Next() {
		var k store.Key
		var h holder
		if err := rows.Scan(&k.Prefix, &k.Name, &h.token, &h.live); err != nil {
			return nil, err
		}
		out[k] = h
	}
	return out, classify(rows.Err())
}

// Renew extends the holdings in one UPDATE per renewBatch leases; when it
// did not change as many rows as it was given, one SELECT tells each
// lease's fate (see "Renewal").
func (s *sqlStore) Renew(ctx context.Context, reqs []store.RenewRequest) []store.RenewResult {
	res := make([]store.RenewResult, len(reqs))
	for from := 0; from < len(reqs); from += renewBatch {
		to := min(from+renewBatch, len(reqs))
		s.renew(ctx, reqs[from:to], res[from:to])
	}
	return res
}

func (s *sqlStore) renew(ctx context.Context, reqs []store.RenewRequest, res []store.RenewResult) {
	fail := func(err error) {
		for i := range res {
			res[i].Err = err
		}
	}
	var ttl, shortest time.Duration
	var cases, in strings.Builder
	keys := make([]store.Key, len(reqs))
	for i, r := range reqs {
		if err := checkKey(r.Key); err != nil {
			fail(err)
			return
		}
		keys[i] = r.Key
		ttl = max(ttl, r.TTL)
		if shortest == 0 || r.TTL < shortest {
			shortest = r.TTL
		}
		cases.WriteString(" WHEN " + hexLit(r.Token) + " THEN " + micros(r.TTL))
		if i > 0 {
			in.WriteString(", ")
		}
		in.WriteString("(" + hexLit(r.Key.Prefix) + ", " + hexLit(r.Key.Name) + ", " + hexLit(r.Token) + ")")
	}
	q := bounded(shortest, "UPDATE "+s.n.locks+" SET expires_at = UTC_TIMESTAMP(6) + INTERVAL (CASE token"+cases.String()+" END) MICROSECOND"+
		" WHERE (prefix, name, token) IN ("+in.String()+") AND expires_at > UTC_TIMESTAMP(6)")
	r, err := s.exec(ctx, ttl, q)
	if err != nil {
		fail(err)
		return
	}
	if n, err := r.RowsAffected(); err == nil && n == int64(len(reqs)) {
		for i := range res {
			res[i].Ownership = store.Owned
		}
		return
	}
	found, err := s.holders(ctx, keys)
	if err != nil {
		fail(err)
		return
	}
	for i, r := range reqs {
		res[i].Ownership = found[r.Key].ownership(r.Token)
	}
}

// Close stops the cleanup and waits for the deletes of winners' queue
// entries under way.
func (s *sqlStore) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
		s.queuedMu.Lock()
		s.closing = true
		s.queuedMu.Unlock()
		s.dequeuing.Wait()
	})
	return nil
}

// cleanLoop deletes, every period, rows whose holding ended more than
// retention ago, and claim rows past their keep (fireclaim.go), in bounded
// batches.
func (s *sqlStore) cleanLoop(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.cleanup()
			s.cleanupClaims()
		}
	}
}

// cleanup deletes up to ten batches of long-ended rows, and expired queue
// entries (waiters that stopped keeping them alive: a crash, a lost
// link); it reports how many lock rows it deleted.
func (s *sqlStore) cleanup() int64 {
	s.sweepQueue()
	return s.deleteBatches("DELETE FROM " + s.n.locks + " WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL " + micros(s.retention) + " MICROSECOND LIMIT " + strconv.Itoa(cleanupBatch))
}

// deleteBatches runs del, a DELETE … LIMIT cleanupBatch, up to ten times
// while it deletes a full batch and the store is open; it reports how
// many rows it deleted.
func (s *sqlStore) deleteBatches(del string) int64 {
	var total int64
	for range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := s.exec(ctx, time.Minute, del)
		cancel()
		if err != nil {
			return total
		}
		n, _ := res.RowsAffected()
		total += n
		if n < cleanupBatch {
			return total
		}
		select {
		case <-s.stop:
			return total
		default:
		}
	}
	return total
}
