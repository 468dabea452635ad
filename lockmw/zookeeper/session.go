package zookeeper

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// This file keeps the store's one ZooKeeper session: which session the
// connection has now, its negotiated timeout, and whether a request's
// answer came within one session. go-zookeeper tells none of this
// reliably: it keeps the negotiated timeout private, and its event channel
// drops events when full. So the store reads the server's connect response
// itself (a dialer wrapper parses the first frame of every connection:
// protocol version, timeout, session id) and follows state changes
// through the event callback, which is never skipped. The dialer wrapper
// also records why a connection got no session (a dial error, a handshake
// that failed or was never answered), for the errors and the warning of
// reach.go.
//
// A request ran in session S when the session seen before it was queued
// and after its answer came is the same epoch: go-zookeeper reports the
// new session (StateHasSession, the callback, on its connection loop)
// before it sends anything on that session's connection, so a request
// sent on a later session always sees a later epoch.

// sessionState is a snapshot of the connection's session.
type sessionState struct {
	id      int64         // 0: no session now
	timeout time.Duration // negotiated by the server
	epoch   uint64        // counts sessions the connection has had
}

// tracker follows the connection's session through the event callback.
type tracker struct {
	mu      sync.Mutex
	cur     sessionState
	pending struct { // the last connect response read on the wire
		id      int64
		timeout time.Duration
		passwd  []byte
	}
	passwd   []byte        // the current session's password (tests close the session with it)
	expired  int           // sessions the server reported expired
	changed  chan struct{} // closed and replaced when the session ends or changes
	hasFirst chan struct{} // closed once the first session is established
	first    sync.Once
	// lastErr is the last error seen reaching a server since the last
	// session was established (a dial, a handshake; nil if none), and
	// greeting the server dialed last while it has not answered the
	// handshake: why the connection has no session (see reach.go).
	lastErr  error
	greeting string
	// onExpire, set before the connection exists, is called (on its own
	// goroutine) with the session the server reported expired.
	onExpire func(old sessionState)
}

func newTracker() *tracker {
	return &tracker{changed: make(chan struct{}), hasFirst: make(chan struct{})}
}

// now returns the current session.
func (t *tracker) now() sessionState {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cur
}

// changes returns a channel closed when the session ends or changes.
func (t *tracker) changes() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed
}

// expirations returns how many sessions the server reported expired.
func (t *tracker) expirations() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.expired
}

// same reports whether st is still the current session.
func (t *tracker) same(st sessionState) bool {
	cur := t.now()
	return st.id != 0 && cur.id == st.id && cur.epoch == st.epoch
}

// handshake records a connect response read on the wire.
func (t *tracker) handshake(id int64, timeout time.Duration, passwd []byte) {
	t.mu.Lock()
	t.pending.id, t.pending.timeout, t.pending.passwd = id, timeout, passwd
	t.mu.Unlock()
}

// credentials returns the current session's id and password.
func (t *tracker) credentials() (int64, []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cur.id, t.passwd
}

// event is go-zookeeper's event callback. It must not block.
func (t *tracker) event(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch ev.State {
	case zk.StateHasSession:
		t.lastErr, t.greeting = nil, ""
		p := t.pending
		if p.id == 0 {
			return // cannot be: a session was reported without a handshake
		}
		if p.id != t.cur.id {
			t.cur = sessionState{id: p.id, timeout: p.timeout, epoch: t.cur.epoch + 1}
			close(t.changed)
			t.changed = make(chan struct{})
		} else {
			t.cur.timeout = p.timeout
		}
		t.passwd = p.passwd
		t.first.Do(func() { close(t.hasFirst) })
	case zk.StateExpired:
		t.expired++
		if t.cur.id != 0 {
			old := t.cur
			// The timeout stays: CheckTTL judges TTLs by the last one
			// granted until the next session's.
			t.cur = sessionState{timeout: t.cur.timeout, epoch: t.cur.epoch + 1}
			close(t.changed)
			t.changed = make(chan struct{})
			if t.onExpire != nil {
				go t.onExpire(old) // the callback must not block
			}
		}
	}
}

// dialer wraps d so that the tracker reads each connection's connect
// response, and records why a dial or a handshake failed.
func (t *tracker) dialer(d zk.Dialer) zk.Dialer {
	return func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c, err := d(network, addr, timeout)
		t.mu.Lock()
		defer t.mu.Unlock()
		if err != nil {
			t.lastErr, t.greeting = err, ""
			return nil, err
		}
		t.greeting = addr
		return &handshakeConn{Conn: c, t: t, addr: addr}, nil
	}
}

// failed records err, a handshake's failure with the server at addr.
func (t *tracker) failed(addr string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.greeting == addr {
		t.greeting = ""
	}
	t.lastErr = err
}

// maxConnectResponse bounds the length of a connect response: a server
// that claims more (an HTTP server's "HTTP" read as a length is 1.2 GB) is
// not ZooKeeper, and its connection is dropped before go-zookeeper
// allocates that much.
const maxConnectResponse = 1 << 16

// handshakeConn parses the first frame the server sends on a connection,
// the connect response: length, protocol version (int32), timeout in ms
// (int32), session id (int64), password (int32 length, bytes). go-zookeeper
// reads it whole before anything else, from one goroutine.
type handshakeConn struct {
	net.Conn
	t    *tracker
	addr string
	buf  []byte
	done bool
}

func (h *handshakeConn) Read(p []byte) (int, error) {
	n, err := h.Conn.Read(p)
	if !h.done && err != nil {
		h.done = true
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			err = fmt.Errorf("%s accepted the connection but did not answer the session handshake: %w", h.addr, err)
		} else {
			err = fmt.Errorf("%s closed the connection before answering the session handshake: %w", h.addr, err)
		}
		h.t.failed(h.addr, err)
		return n, err
	}
	if !h.done && n > 0 {
		h.buf = append(h.buf, p[:n]...)
		if len(h.buf) >= 4 {
			if l := int32(binary.BigEndian.Uint32(h.buf[:4])); l < 20 || l > maxConnectResponse {
				h.done = true
				err := fmt.Errorf("%s answered %q, not a ZooKeeper connect response: is it a ZooKeeper client port?", h.addr, printable(h.buf))
				h.t.failed(h.addr, err)
				return 0, err
			}
		}
		if len(h.buf) >= 4+20 {
			plen := int(int32(binary.BigEndian.Uint32(h.buf[20:24])))
			if plen < 0 || plen > 64 {
				plen = 0 // not a password: keep none
			}
			if len(h.buf) >= 24+plen {
				h.done = true
				timeout := time.Duration(int32(binary.BigEndian.Uint32(h.buf[8:12]))) * time.Millisecond
				id := int64(binary.BigEndian.Uint64(h.buf[12:20]))
				passwd := append([]byte(nil), h.buf[24:24+plen]...)
				h.buf = nil
				h.t.handshake(id, timeout, passwd)
			}
		}
	}
	return n, err
}

// call runs one go-zookeeper request, which has no context, and returns its
// error, or ctx's when ctx ends first (the request's outcome is then
// unknown: it may still be applied). It reports the send time: no later
// than the request left.
func call(ctx context.Context, do func() error) (sent time.Time, err error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	done := make(chan error, 1)
	sent = time.Now()
	go func() { done <- do() }()
	select {
	case err := <-done:
		return sent, err
	case <-ctx.Done():
		return sent, ctx.Err()
	}
}

// definite reports whether err says for sure what a write did: applied
// (nil) or refused by the server. Otherwise (a lost connection, a
// deadline) it may or may not have been applied.
func definite(err error) bool {
	switch {
	case err == nil:
		return true
	case errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrSessionExpired),
		errors.Is(err, zk.ErrClosing), errors.Is(err, zk.ErrNoServer),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, zk.ErrSessionMoved):
		return false
	}
	var ne net.Error
	return !errors.As(err, &ne)
}

// printable returns b's first bytes for a message, as text when they are
// printable ASCII.
func printable(b []byte) string {
	b = b[:min(len(b), 16)]
	for _, c := range b {
		if c < 0x20 || c >= 0x7f {
			return fmt.Sprintf("% x", b)
		}
	}
	return string(b)
}
