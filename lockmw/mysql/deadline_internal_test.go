package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/lockmw/lockmw/lockmw/internal/store"
	"github.com/lockmw/lockmw/lockmw/mysql/internal/mariatest"
)

// startTablesServer starts MariaDB with the store's tables.
func startTablesServer(t *testing.T) *mariatest.Server {
	t.Helper()
	srv := mariatest.Start(t)
	if err := CreateTable(tctx(t), srv.DB(t, ""), ""); err != nil {
		t.Fatal(err)
	}
	return srv
}

// deadlineStore is a store on srv's pool opened with params.
func deadlineStore(t *testing.T, srv *mariatest.Server, params ...string) *sqlStore {
	t.Helper()
	return storeOn(t, srv.DB(t, "", params...))
}

// storeOn is a store on db.
func storeOn(t *testing.T, db *sql.DB) *sqlStore {
	t.Helper()
	n, _ := namesFor("")
	s := &sqlStore{db: db, n: n, retention: Retention, stop: make(chan struct{}), done: make(chan struct{})}
	go s.cleanLoop(time.Hour)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// noDeadlines is a socket that refuses deadlines, as a dialer's own
// net.Conn may.
type noDeadlines struct{ net.Conn }

var errNoDeadlines = errors.New("this socket takes no deadlines")

func (noDeadlines) SetDeadline(time.Time) error      { return errNoDeadlines }
func (noDeadlines) SetReadDeadline(time.Time) error  { return errNoDeadlines }
func (noDeadlines) SetWriteDeadline(time.Time) error { return errNoDeadlines }

// noDeadlinesNet is the driver's network name for TCP through noDeadlines.
const noDeadlinesNet = "lockmw-test-nodeadlines"

func init() {
	mysqldriver.RegisterDialContext(noDeadlinesNet, func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return noDeadlines{c}, nil
	})
}

// stateOf is the store's state of c's driver connection.
func stateOf(s *sqlStore, c *sql.Conn) *connState {
	var st *connState
	_ = c.Raw(func(dc any) error { st = s.conns.state(dc); return nil })
	return st
}

// The two statements of an uncontended lock and unlock run under a context
// the driver does not watch, bounded by their socket's deadline instead
// (deadline.go); a DSN with a readTimeout or writeTimeout of its own, or a
// socket that takes no deadlines, keeps the driver's watcher.
func TestPreparedStatementsBoundedBySocketDeadline(t *testing.T) {
	t.Parallel()
	srv := startTablesServer(t)
	ctx := tctx(t)
	noDeadlinesDB, err := sql.Open("mysql", strings.Replace(srv.DSN(""), "@tcp(", "@"+noDeadlinesNet+"(", 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = noDeadlinesDB.Close() })
	for _, c := range []struct {
		params []string
		db     *sql.DB // instead of srv's, with params
		socket bool
	}{
		{nil, nil, true},
		{[]string{"interpolateParams=true"}, nil, true},
		{[]string{"readTimeout=30s"}, nil, false},
		{[]string{"writeTimeout=30s"}, nil, false},
		{[]string{"(a socket that refuses deadlines)"}, noDeadlinesDB, false},
	} {
		var s *sqlStore
		if c.db != nil {
			s = storeOn(t, c.db)
		} else {
			s = deadlineStore(t, srv, c.params...)
		}
		k := store.Key{Prefix: "p:", Name: "socket"}
		if _, err := s.take(ctx, k, "tok", time.Second, false); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Release(ctx, k, "tok"); err != nil {
			t.Fatal(err)
		}
		conn, err := s.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := stateOf(s, conn).sock != nil
		_ = conn.Close()
		if got != c.socket {
			t.Errorf("DSN params %v: statements bounded by the socket's deadline: %v, want %v", c.params, got, c.socket)
		}
	}
}

// A prepared statement sent to a server that does not answer (paused)
// ends at its context's deadline with the context's error, and its
// connection, cut off, is not used again.
func TestSocketDeadlineBoundsStatementOnPausedServer(t *testing.T) {
	t.Parallel()
	srv := startTablesServer(t)
	s := deadlineStore(t, srv)
	ctx := tctx(t)
	k := store.Key{Prefix: "p:", Name: "paused"}
	if _, err := s.take(ctx, k, "tok", time.Second, false); err != nil { // inserts the row
		t.Fatal(err)
	}
	c := oneConn(t, ctx, s.db)
	defer c.Close()
	q := s.takeRowStmt(k, "tok2", time.Second, false)
	if _, err := s.run(ctx, c, q); err != nil { // prepares it
		t.Fatal(err)
	}
	if stateOf(s, c).sock == nil {
		t.Fatal("the connection's statements are not bounded by its socket's deadline")
	}
	srv.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume(t)
		}
	}()
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.run(rctx, c, q)
	took := time.Since(start)
	srv.Resume(t)
	resumed = true
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("statement on a paused server: %v after %v, want context.DeadlineExceeded", err, took)
	}
	if took > 5*time.Second {
		t.Fatalf("statement on a paused server returned after %v, its deadline 300ms", took)
	}
	// The driver marked the connection broken: the pool drops it.
	if err := c.Raw(func(dc any) error {
		if dc.(driver.Validator).IsValid() {
			return errors.New("the connection cut off by its deadline is still valid: the pool would use it again")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A prepared statement whose context is cancelled while the server works
// on it (SLEEP) ends at once with context.Canceled.
func TestSocketDeadlineEndsStatementAtCancel(t *testing.T) {
	t.Parallel()
	srv := startTablesServer(t)
	s := deadlineStore(t, srv)
	ctx := tctx(t)
	c := oneConn(t, ctx, s.db)
	defer c.Close()
	st, err := s.connState(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = s.db.ExecContext(context.Background(), "KILL "+strconv.FormatInt(st.id, 10)) })
	q := query{text: "DO SLEEP(60 + LENGTH(" + placeholder + "))", args: []any{"00"}}
	rctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err = s.run(rctx, c, q)
	if took := time.Since(start); !errors.Is(err, context.Canceled) || took > 10*time.Second {
		t.Fatalf("statement cancelled after 200ms: %v after %v, want context.Canceled at once", err, took)
	}
}

// cancelAfterExec is a driver statement that cancels its caller's context
// once the server answered it, before execDeadline stops its callback.
type cancelAfterExec struct {
	driver.StmtExecContext
	cancel context.CancelFunc
}

func (c cancelAfterExec) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	res, err := c.StmtExecContext.ExecContext(ctx, args)
	c.cancel()
	return res, err
}

// A statement answered whole whose context ended before the callback was
// stopped gets its result, and leaves its connection usable: the deadline
// the callback set is cleared.
func TestSocketDeadlineClearedAfterAnswer(t *testing.T) {
	t.Parallel()
	srv := startTablesServer(t)
	s := deadlineStore(t, srv)
	ctx := tctx(t)
	c := oneConn(t, ctx, s.db)
	defer c.Close()
	err := c.Raw(func(dc any) error {
		sock := deadlineConn(dc)
		if sock == nil {
			return errors.New("no socket to bound statements by")
		}
		stmt, err := dc.(driver.ConnPrepareContext).PrepareContext(ctx, "DO LENGTH(?)")
		if err != nil {
			return err
		}
		defer stmt.Close()
		args := []driver.NamedValue{{Ordinal: 1, Value: "x"}}
		rctx, cancel := context.WithCancel(ctx)
		if _, err := execDeadline(rctx, sock, cancelAfterExec{stmt.(driver.StmtExecContext), cancel}, args); err != nil {
			return err
		}
		if !dc.(driver.Validator).IsValid() {
			return errors.New("the connection of an answered statement is broken")
		}
		if _, err := stmt.(driver.StmtExecContext).ExecContext(ctx, args); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
