package mysql

import (
	"context"
	"database/sql/driver"
	"net"
	"reflect"
	"time"
	"unsafe"

	mysqldriver "github.com/go-sql-driver/mysql"
)

// This file bounds the prepared statements of an uncontended lock and
// unlock (prepared.go) by their context without go-sql-driver's watcher.
//
// The driver bounds a statement whose context can end with a goroutine of
// the connection (its watcher), handed the context before the statement
// is sent and told when its answer is read: two goroutine wake-ups per
// statement, which in a process with an idle processor each start an idle
// thread too (the package documentation, "Compared with a ShedLock-style
// loop"). Here the statement runs under a context that cannot end, so the
// driver does not watch it, and context.AfterFunc (a callback, no
// goroutine until the context ends) sets a past deadline on the
// connection's socket when the statement's context ends (deadline or
// cancel): a read or write in flight then fails at once, as the watcher's
// close of the socket makes it fail, and the driver marks the connection
// broken, so the pool drops it. The caller gets the context's error, as
// from the watcher, at the same instant (the context's end), and what
// follows is as before: a statement cut off without its answer may still
// run in the server, so its connection is noted against its token for the
// give-back to end (stalled.go). When the callback ran, the store waits
// for it and clears the deadline: a statement answered whole leaves its
// connection usable; one cut off left it broken. Nothing else changes:
// the statement, its connection and its server-side bound are the same.
//
// The socket is the driver connection's field netConn, read once per
// connection (connState) by reflection, since the driver exports no way to
// reach it. Only a go-sql-driver connection whose fields are as this
// file expects, whose DSN sets no readTimeout or writeTimeout (the
// driver would then set its own deadline before each read or write,
// replacing the store's), and whose socket takes deadlines, is bounded
// this way; any other runs under its context, watched by the driver as
// before. (Should the socket refuse the past deadline after all, the
// callback closes it, as the watcher does.)

// pastDeadline is a deadline long passed: a read or write fails at once.
var pastDeadline = time.Unix(1, 0)

// The types deadlineConn checks the driver connection's fields against.
var (
	netConnType = reflect.TypeFor[net.Conn]()
	configType  = reflect.TypeFor[*mysqldriver.Config]()
)

// deadlineConn returns dc's socket when a statement on dc can be bounded
// by its deadline (see the file's comment), else nil.
func deadlineConn(dc any) net.Conn {
	v := reflect.ValueOf(dc)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	e := v.Elem()
	if t := e.Type(); t.PkgPath() != "github.com/go-sql-driver/mysql" || t.Name() != "mysqlConn" {
		return nil
	}
	nf, cf := e.FieldByName("netConn"), e.FieldByName("cfg")
	if !nf.IsValid() || nf.Type() != netConnType || !cf.IsValid() || cf.Type() != configType {
		return nil
	}
	nc := *(*net.Conn)(unsafe.Pointer(nf.UnsafeAddr()))
	cfg := *(**mysqldriver.Config)(unsafe.Pointer(cf.UnsafeAddr()))
	if nc == nil || cfg == nil || cfg.ReadTimeout != 0 || cfg.WriteTimeout != 0 {
		return nil
	}
	// A socket that refuses deadlines (a dialer's own net.Conn may) is
	// watched by the driver. Clearing the deadline of a connection not in
	// use changes nothing: the driver set none.
	if nc.SetDeadline(time.Time{}) != nil {
		return nil
	}
	return nc
}

// execDeadline executes stmt with args on the connection whose socket is
// nc, bounded by ctx through nc's deadline (see the file's comment).
func execDeadline(ctx context.Context, nc net.Conn, stmt driver.StmtExecContext, args []driver.NamedValue) (driver.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ended := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		if nc.SetDeadline(pastDeadline) != nil {
			_ = nc.Close() // unblocks a read or write in flight too
		}
		close(ended)
	})
	res, err := stmt.ExecContext(context.Background(), args)
	if stop() {
		return res, err
	}
	<-ended
	_ = nc.SetDeadline(time.Time{})
	if err != nil {
		// Cut off by the deadline (the driver closed the connection), or
		// failed as the context ended: the context's error, as the
		// driver's watcher gives.
		return nil, ctx.Err()
	}
	return res, nil
}
