package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"

	"github.com/go-zookeeper/zk"
)

// This file says why the store has no session: New's one warning when no
// session came within Config.ConnectTimeout (the Locker is made all the
// same), the error of a request made without a session, and the
// Diagnoser naming the last dial or handshake error (the tracker records
// them, session.go). It also keeps a failed DNS lookup from failing New:
// go-zookeeper resolves every server once, in zk.Connect, and fails it when
// one lookup fails, though DNS failures can be temporary; the store then
// dials the names as given, resolving them at each dial.

// errNoSessionYet is the error of a request made while the connection has
// no session; it matches errNoSession and names the servers and why there
// is no session (in its text only: the reason is the connection's, not
// the request's).
type errNoSessionYet struct {
	servers string
	why     error
}

func (e *errNoSessionYet) Error() string {
	msg := "zookeeper: no session with " + e.servers + " (connecting or reconnecting)"
	if e.why != nil {
		msg += "; last error: " + e.why.Error()
	}
	return msg
}

func (e *errNoSessionYet) Unwrap() error { return errNoSession }

// noSession returns the error of a request made without a session.
func (s *zkStore) noSession() error {
	return &errNoSessionYet{servers: s.servers(), why: s.tr.why()}
}

// servers names the ensemble as configured.
func (s *zkStore) servers() string { return strings.Join(s.cfg.Servers, ",") }

// why is the reason the connection has no session: the last dial or
// handshake error, or a server that accepted the connection and has not
// answered the handshake; nil when there is a session or no reason known.
func (t *tracker) why() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.cur.id != 0:
		return nil
	case t.greeting != "" && t.lastErr == nil:
		return fmt.Errorf("%s accepted the connection but has not answered the session handshake (not a ZooKeeper server, or a stalled one)", t.greeting)
	}
	return t.lastErr
}

// UseLogger takes the Locker's logger (store.Logging), for New's warning.
func (s *zkStore) UseLogger(logger *slog.Logger) {
	s.mu.Lock()
	s.logger = logger
	s.mu.Unlock()
}

// warnNoSession logs New's one warning that no session came in time.
func (s *zkStore) warnNoSession(waited fmt.Stringer) {
	s.mu.Lock()
	logger := s.logger
	s.mu.Unlock()
	if logger == nil {
		return
	}
	attrs := []any{slog.String("servers", s.servers()), slog.String("waited", waited.String())}
	if why := s.tr.why(); why != nil {
		attrs = append(attrs, slog.Any("error", why))
	}
	logger.Warn("lockmw: ZooKeeper cannot be reached; the Locker is made all the same, and its acquisitions fail with ErrUnavailable until a session exists", attrs...)
}

// Diagnose returns why the connection has no session, or nil when it has
// one (store.Diagnoser).
func (s *zkStore) Diagnose(context.Context) error {
	return s.tr.why()
}

// hostProvider is go-zookeeper's DNS host provider, unless a lookup fails
// at Init: then it hands out the servers as given, for the dialer to
// resolve at each dial, and the tracker records the lookup's error.
type hostProvider struct {
	t   *tracker
	dns *zk.DNSHostProvider

	mu         sync.Mutex
	raw        []string // nil while dns serves
	curr, last int
}

func newHostProvider(t *tracker) *hostProvider {
	return &hostProvider{t: t, dns: zk.NewDNSHostProvider()}
}

// Init resolves servers, or keeps them as given when a lookup fails.
func (p *hostProvider) Init(servers []string) error {
	err := p.dns.Init(servers)
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) {
		return err
	}
	p.t.mu.Lock()
	p.t.lastErr = fmt.Errorf("resolving the ZooKeeper servers: %w", err)
	p.t.mu.Unlock()
	p.mu.Lock()
	p.raw, p.curr, p.last = servers, -1, -1
	p.mu.Unlock()
	return nil
}

// Len is the number of servers.
func (p *hostProvider) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.raw == nil {
		return p.dns.Len()
	}
	return len(p.raw)
}

// Next returns the next server to dial, as DNSHostProvider does.
func (p *hostProvider) Next() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.raw == nil {
		return p.dns.Next()
	}
	p.curr = (p.curr + 1) % len(p.raw)
	retryStart := p.curr == p.last
	if p.last == -1 {
		p.last = 0
	}
	return p.raw[p.curr], retryStart
}

// Connected marks the current server as the last that worked.
func (p *hostProvider) Connected() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.raw == nil {
		p.dns.Connected()
		return
	}
	p.last = p.curr
}
