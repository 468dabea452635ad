package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	mathrand "math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
)

// This file runs the two statements of an uncontended lock and unlock
// (takeRowStmt, the UPDATE of a known row, which is also every default
// waiter's poll; releasePlainStmt) as server-side prepared statements, one
// per statement text and driver connection, prepared on the connection's
// first use of it. They keep the pool's connections: each holds at most
// maxStmts of a store's statements, counted against the server's
// max_prepared_stmt_count, until it closes. MariaDB then parses them once per connection instead of
// at every call: the acquisition's UPDATE is about a kilobyte of SQL with
// three IFs, and the two statements of a lock and unlock, prepared, took
// about a fifth less time than as text (MariaDB 10.11, interleaved runs on
// one connection).
//
// The statements are the same: their strings travel as parameters, hex
// text decoded by UNHEX(?) (ASCII, which no character-set conversion
// between the client's and the connection's changes), where the text
// protocol's statements have the hex literal X'…' of the same bytes
// (query.literal writes that statement; a test holds the two alike). The
// time bound and the TTL stay in the text (a statement per TTL and
// connection). A server that refuses to prepare more statements
// (max_prepared_stmt_count) gets the literal statement instead, as a text
// query; one that lost the statement (its handle unknown: it ran nothing)
// gets it prepared again.
//
// Each connection's statements carry, in a comment, a mark of that
// connection (a random name given when the store first used it), since
// their text no longer holds the token: stalled.go finds a statement that
// may still run by its connection's id and mark. Their context bounds
// them through their connection's socket (deadline.go), not the driver's
// watcher, where the connection allows it.

// maxStmts bounds the statements the store keeps prepared on one
// connection; past it, they are closed and prepared again as used.
const maxStmts = 16

// erUnknownStmt is the server's error for a prepared statement's handle it
// does not know (the statement ran nothing); erMaxPreparedStmts, its
// refusal to prepare one more (max_prepared_stmt_count).
const (
	erUnknownStmt      = 1243
	erMaxPreparedStmts = 1461
)

// query is a statement whose placeholders take args, in order: the hex of
// each string value.
type query struct {
	text string
	args []any
}

// literal is q with each placeholder's value written in, as a hex literal:
// the statement the server runs for q, sent as text.
func (q query) literal() string {
	if len(q.args) == 0 {
		return q.text
	}
	parts := strings.Split(q.text, placeholder)
	var b strings.Builder
	for i, p := range parts {
		b.WriteString(p)
		if i < len(q.args) && i < len(parts)-1 {
			b.WriteString("X'" + q.args[i].(string) + "'")
		}
	}
	return b.String()
}

// placeholder is a string value's place in a query's text: its hex
// travels as the parameter.
const placeholder = "UNHEX(?)"

// The statements whose text texts keeps.
const (
	takeRow = iota
	releasePlain
)

// textKey names a query text: the statement, and what its text depends on
// besides the table (the TTL; whether a queued waiter's).
type textKey struct {
	kind   int
	ttl    time.Duration
	queued bool
}

// maxTexts bounds the texts the store keeps; past it, they are written
// again as used.
const maxTexts = 64

// texts keeps the store's query texts, written once each: a text is the
// same for every key and token.
type texts struct {
	mu sync.Mutex
	of map[textKey]string
}

// get returns k's text, written by write when not kept yet.
func (t *texts) get(k textKey, write func(textKey) string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if q, ok := t.of[k]; ok {
		return q
	}
	if t.of == nil || len(t.of) >= maxTexts {
		t.of = make(map[textKey]string)
	}
	q := write(k)
	t.of[k] = q
	return q
}

// connState is what the store knows of one driver connection of the pool.
// Only the goroutine holding the connection reads or writes its fields.
type connState struct {
	id    int64                  // CONNECTION_ID(); 0 until asked (stalled.go)
	sock  net.Conn               // the socket, when statements are bounded by its deadline (deadline.go)
	mark  string                 // the connection's name in its statements' comment
	stmts map[string]driver.Stmt // prepared on it, by query text
}

// maxConns bounds the connections the store keeps a state of; past it the
// states are forgotten (ids are asked again, statements prepared again).
const maxConns = 4096

// conns is the store's connStates, by the driver's connection (database/sql's
// Conn.Raw).
type conns struct {
	mu sync.Mutex
	of map[any]*connState
}

// state returns dc's state, made on first use with a fresh mark.
func (cs *conns) state(dc any) *connState {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if st, ok := cs.of[dc]; ok {
		return st
	}
	if cs.of == nil || len(cs.of) >= maxConns {
		cs.of = make(map[any]*connState)
	}
	st := &connState{mark: "lockmw-conn-" + strconv.FormatUint(mathrand.Uint64(), 16), stmts: make(map[string]driver.Stmt), sock: deadlineConn(dc)}
	cs.of[dc] = st
	return st
}

// forget drops dc's state (a connection that broke).
func (cs *conns) forget(dc any) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	delete(cs.of, dc)
}

// run executes q on c, a connection held by the caller, bounded by ctx: a
// query with arguments as the connection's prepared statement, one without
// as text. A statement InnoDB chose as a deadlock's victim, or whose
// prepared handle the server no longer knew, ran nothing and is sent
// again, a few times, within ctx.
func (s *sqlStore) run(ctx context.Context, c *sql.Conn, q query) (sql.Result, error) {
	if len(q.args) == 0 {
		return s.execOn(ctx, c, q.text)
	}
	for try := 1; ; try++ {
		var res sql.Result
		err := c.Raw(func(dc any) error {
			var err error
			res, err = s.runPrepared(ctx, dc, q)
			if err != nil && !answered(err) {
				// The connection may be broken: database/sql closes it
				// (driver.ErrBadConn) or will find it closed; a new
				// connection gets a new state.
				s.conns.forget(dc)
			}
			return err
		})
		if try < deadlockTries && (isDeadlock(err) || isMySQLError(err, erUnknownStmt)) && ctx.Err() == nil {
			continue
		}
		return res, s.classify(ctx, err)
	}
}

// runPrepared executes q as dc's prepared statement, preparing it first
// when dc has not yet.
func (s *sqlStore) runPrepared(ctx context.Context, dc any, q query) (sql.Result, error) {
	st := s.conns.state(dc)
	stmt, ok := st.stmts[q.text]
	if !ok {
		if len(st.stmts) >= maxStmts {
			for text, old := range st.stmts {
				_ = old.Close()
				delete(st.stmts, text)
			}
		}
		pc, ok := dc.(driver.ConnPrepareContext)
		if !ok {
			return nil, errors.New("lockmw/mysql: the driver's connection cannot prepare statements")
		}
		var err error
		stmt, err = pc.PrepareContext(ctx, q.text+" /*"+st.mark+"*/")
		if isMySQLError(err, erMaxPreparedStmts) {
			// The server keeps no more statements: the same statement,
			// as text.
			if ec, ok := dc.(driver.ExecerContext); ok {
				return ec.ExecContext(ctx, q.literal()+" /*"+st.mark+"*/", nil)
			}
		}
		if err != nil {
			return nil, err
		}
		st.stmts[q.text] = stmt
	}
	ec, ok := stmt.(driver.StmtExecContext)
	if !ok {
		return nil, errors.New("lockmw/mysql: the driver's statements cannot run with a context")
	}
	args := make([]driver.NamedValue, len(q.args))
	for i, a := range q.args {
		args[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	var res driver.Result
	var err error
	if st.sock != nil {
		res, err = execDeadline(ctx, st.sock, ec, args)
	} else {
		res, err = ec.ExecContext(ctx, args)
	}
	if isMySQLError(err, erUnknownStmt) {
		_ = stmt.Close()
		delete(st.stmts, q.text)
	}
	return res, err
}

// execQuery runs q on a connection of the pool, bounded by d (exec, for a
// query).
func (s *sqlStore) execQuery(ctx context.Context, d time.Duration, q query) (sql.Result, error) {
	if len(q.args) == 0 {
		return s.exec(ctx, d, q.text)
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	c, err := s.db.Conn(ctx)
	if err != nil {
		return nil, s.classify(ctx, err)
	}
	defer c.Close()
	return s.run(ctx, c, q)
}

// isMySQLError reports whether err is the server's error number.
func isMySQLError(err error, number uint16) bool {
	var me *mysqldriver.MySQLError
	return errors.As(err, &me) && me.Number == number
}
