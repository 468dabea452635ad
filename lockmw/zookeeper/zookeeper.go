package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// DefaultTickTime is ZooKeeper's default tickTime, assumed when
// Config.TickTime is zero.
const DefaultTickTime = 2 * time.Second

// DefaultConnectTimeout bounds how long New waits for a first session.
const DefaultConnectTimeout = 10 * time.Second

// Config says how the store connects to ZooKeeper. Only Servers is
// required.
type Config struct {
	// Servers are the ensemble's client addresses, "host:port".
	Servers []string
	// SessionTimeout is the session timeout to ask for. The server may
	// grant less (it clamps to [2, 20] ticks by default); the store uses
	// what it grants. Zero asks for 3/2 × (the Locker's TTL + TickTime),
	// the shortest that keeps that TTL (see the package documentation).
	SessionTimeout time.Duration
	// TickTime is the servers' tickTime (default DefaultTickTime): the
	// validity of a lease leaves a tick of margin for the leader's
	// session tracking. Set it when the servers tick slower.
	TickTime time.Duration
	// Auth is added to the session (zk.Conn.AddAuth) before any lock is
	// taken, and again on every reconnection.
	Auth []Auth
	// ACL is the ACL of every node the store creates (default
	// zk.WorldACL(zk.PermAll)).
	ACL []zk.ACL
	// Dialer dials the servers (default net.DialTimeout).
	Dialer zk.Dialer
	// Root is the existing node under which lock nodes live (default "/").
	Root string
	// Logger receives go-zookeeper's messages (default: discarded).
	Logger zk.Logger
	// ClaimRetention is how long the fire claim and run records of a
	// cronlock Scheduler's job stay after their last write (default
	// lockmw.DefaultRetention), on servers with TTL nodes
	// (zookeeper.extendedTypesEnabled=true). Elsewhere they persist: one
	// pair of small nodes per job. See the package documentation,
	// "Scheduled jobs".
	ClaimRetention time.Duration
	// ConnectTimeout bounds New's wait for a first session, against which
	// it checks the Locker's TTL (default DefaultConnectTimeout). Without
	// one by then, New returns the Locker all the same, and logs one
	// warning naming the servers and why: acquisitions fail with
	// lockmw.ErrUnavailable until a session exists.
	ConnectTimeout time.Duration
}

// Auth is one authentication of the session: a scheme such as "digest"
// and its credentials ("user:password").
type Auth struct {
	Scheme string
	Secret []byte
}

// New connects to ZooKeeper and returns a Locker keeping its locks there.
// The Locker owns the connection: Locker.Close closes it, which ends the
// session and so deletes every node the Locker still had. Options are
// lockmw's. New waits up to Config.ConnectTimeout for a first session and
// fails with an error matching lockmw.ErrInvalidOption when the session
// the server grants cannot keep the Locker's TTL, or when Config is wrong
// (no Servers, say). It does not fail because the ensemble cannot be
// reached (a service may start before its ZooKeeper): without a session
// by then, it returns the Locker and logs one warning (lockmw.WithLogger)
// naming the servers and the cause (a refused dial, a failed DNS lookup, a
// server that does not answer ZooKeeper's handshake); the Locker's
// acquisitions fail with lockmw.ErrUnavailable, naming the same, until a
// session exists. A server name that does not resolve is dialed again,
// and looked up again, like an unreachable address.
func New(cfg Config, opts ...lockmw.Option) (*lockmw.Locker, error) {
	l, _, err := newLocker(cfg, opts)
	return l, err
}

// newLocker is New, also returning the store.
func newLocker(cfg Config, opts []lockmw.Option) (*lockmw.Locker, *zkStore, error) {
	if len(cfg.Servers) == 0 {
		return nil, nil, fmt.Errorf("%w: zookeeper.Config.Servers is empty: name the ensemble, e.g. []string{\"localhost:2181\"}", lockmw.ErrInvalidOption)
	}
	if cfg.TickTime < 0 || cfg.SessionTimeout < 0 || cfg.ConnectTimeout < 0 || cfg.ClaimRetention < 0 {
		return nil, nil, fmt.Errorf("%w: zookeeper.Config: negative TickTime, SessionTimeout, ConnectTimeout or ClaimRetention", lockmw.ErrInvalidOption)
	}
	if cfg.ClaimRetention > 0 && cfg.ClaimRetention < lockmw.MinRetention {
		return nil, nil, fmt.Errorf("%w: zookeeper.Config.ClaimRetention %v is below lockmw.MinRetention (%v)", lockmw.ErrInvalidOption, cfg.ClaimRetention, lockmw.MinRetention)
	}
	root := cfg.Root
	if root == "" {
		root = "/"
	}
	if !strings.HasPrefix(root, "/") || (root != "/" && strings.HasSuffix(root, "/")) {
		return nil, nil, fmt.Errorf("%w: zookeeper.Config.Root %q must be an absolute node path such as \"/locks\"", lockmw.ErrInvalidOption, cfg.Root)
	}
	s := newStore(cfg, root)
	locker, err := lockmw.NewWithStore(store.Inside{Store: s}, opts...)
	if err != nil {
		return nil, nil, err
	}
	if err := s.connect(); err != nil {
		_ = locker.Close()
		return nil, nil, err
	}
	if err := s.CheckTTL(s.lockerTTL); err != nil {
		_ = locker.Close()
		return nil, nil, err
	}
	return locker, s, nil
}

// zkStore keeps locks as ephemeral sequential nodes of one session.
type zkStore struct {
	cfg  Config
	tick time.Duration
	acl  []zk.ACL
	root string // ends in "/"
	tr   *tracker

	conn      *zk.Conn // nil until connect
	lockerTTL time.Duration

	mu        sync.Mutex
	held      map[string]*entry // by token: nodes that may exist
	abandoned map[string]*entry // by token: creates whose outcome stayed unknown
	noContain bool              // the servers have no container nodes
	noTTL     bool              // the servers have no TTL nodes (fire claim records persist)
	guarded   uint64            // the session epoch whose guard node exists
	// guardRO: the guard cannot be written under Config.ACL, so a create
	// checks its version instead of setting its data, and the node's
	// czxid is read after it (see createIn).
	guardRO bool
	// parentRO: a lock's parent cannot be written under its ACL, so a
	// create does not write it, and its answer does not say whether the
	// node is alone: the queue is read after it (see createIn).
	parentRO bool
	// info is the holder description (UseHolderInfo), the data of every
	// lock node created; nil: nodes have none.
	info   []byte
	closed bool
	logger *slog.Logger                     // the Locker's (store.Logging)
	lost   func(tokens []string, why error) // the Locker's (store.LossNotifier)

	// hook, set by tests, sees each request's outcome and may replace its
	// error (as a lost reply would).
	hook func(op, path string, err error) error
}

// entry is one lock node: a holding or a queue entry.
type entry struct {
	token  string
	parent string
	name   string // the node's name in parent; "" while unknown
	// fence is the node's czxid, learned from its create's answer (the
	// guard's mzxid: one transaction, one zxid) or from a read of its
	// stat; 0 while unknown.
	fence int64
	czxid int64 // the fence, once the node holds the lock; 0 before
	// head is, when the last read of the queue found exactly one lock
	// node below this one, that node's name: its deletion makes this one
	// first (see WaitTurn); "" otherwise.
	head string
	// pred is the lock node just before this one at the last read of
	// the queue; "" when it found none.
	pred string
	// second is, when the last read of the queue found two lock nodes or
	// more below this one, the one just before the predecessor: WaitTurn
	// watches it too, and reads the queue again when it goes, so that
	// head is known before the predecessor's deletion; "" otherwise.
	second string
	// alone is, when the create's answer showed the node as its parent's
	// only child (so first), the send time of that create; zero
	// otherwise, and once the caller has taken it (takeAlone).
	alone time.Time
	sess  sessionState // the session it was created in
	// unknown: a create was sent whose outcome is unknown; the node may
	// exist under a name the store does not know.
	unknown bool
	since   time.Time
	timer   *time.Timer // deletes a holding that is not renewed at its TTL
}

func newStore(cfg Config, root string) *zkStore {
	s := &zkStore{
		cfg:       cfg,
		tick:      cfg.TickTime,
		acl:       cfg.ACL,
		tr:        newTracker(),
		held:      make(map[string]*entry),
		abandoned: make(map[string]*entry),
	}
	s.tr.onExpire = s.sessionExpired
	if s.tick == 0 {
		s.tick = DefaultTickTime
	}
	if len(s.acl) == 0 {
		s.acl = zk.WorldACL(zk.PermAll)
	}
	if root != "/" {
		root += "/"
	}
	s.root = root
	return s
}

// sessionFor is the session timeout to ask for to keep ttl.
func (s *zkStore) sessionFor(ttl time.Duration) time.Duration {
	if s.cfg.SessionTimeout > 0 {
		return s.cfg.SessionTimeout
	}
	return ((ttl+s.tick)*3/2 + time.Millisecond - 1).Truncate(time.Millisecond)
}

// maxTTL is the longest lease TTL a session of timeout T keeps: 2T/3 −
// tick (see the package documentation, "Validity").
func (s *zkStore) maxTTL(timeout time.Duration) time.Duration {
	return timeout*2/3 - s.tick
}

// connect dials the ensemble and waits for the first session.
func (s *zkStore) connect() error {
	dialer := s.cfg.Dialer
	if dialer == nil {
		dialer = net.DialTimeout
	}
	logger := s.cfg.Logger
	if logger == nil {
		logger = log.New(io.Discard, "", 0)
	}
	conn, _, err := zk.Connect(s.cfg.Servers, s.sessionFor(s.lockerTTL), zk.WithHostProvider(newHostProvider(s.tr)),
		zk.WithDialer(s.tr.dialer(dialer)), zk.WithEventCallback(s.tr.event), zk.WithLogger(logger), zk.WithLogInfo(false))
	if err != nil {
		return fmt.Errorf("%w: zookeeper: %v", lockmw.ErrInvalidOption, err)
	}
	s.mu.Lock()
	s.conn = conn
	s.mu.Unlock()
	wait := s.cfg.ConnectTimeout
	if wait == 0 {
		wait = DefaultConnectTimeout
	}
	select {
	case <-s.tr.hasFirst:
	case <-time.After(wait):
		// No session yet (the ensemble is down, or the link): the Locker
		// is made all the same, as a process started during an outage
		// must be; its acquisitions fail with ErrUnavailable until a
		// session exists, and each checks its TTL against that session.
		s.warnNoSession(wait)
		return nil
	}
	for _, a := range s.cfg.Auth {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		_, err := call(ctx, func() error { return conn.AddAuth(a.Scheme, a.Secret) })
		cancel()
		if err != nil {
			return fmt.Errorf("%w: zookeeper: adding %s auth: %v", lockmw.ErrUnavailable, a.Scheme, err)
		}
	}
	return nil
}

// CheckTTL accepts a TTL that the session keeps: at most 2/3 of the
// negotiated session timeout less a tick. Before the connection exists (New
// asks for the Locker's TTL first) it records the TTL the session is for.
func (s *zkStore) CheckTTL(ttl time.Duration) error {
	s.mu.Lock()
	if s.conn == nil {
		if s.lockerTTL == 0 {
			s.lockerTTL = ttl
		}
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	timeout := s.tr.now().timeout
	if timeout == 0 {
		return nil // no session yet: each create checks its TTL against its session
	}
	if limit := s.maxTTL(timeout); ttl > limit {
		// Printed to the millisecond, rounded down: still a TTL it keeps.
		limit = max(limit, 0).Truncate(time.Millisecond)
		return fmt.Errorf("%w: TTL %v: the ZooKeeper session (timeout %v as granted by the server, tick %v) keeps a lock only %v after its last confirmed request: "+
			"use a TTL of at most %v, or a longer zookeeper.Config.SessionTimeout (which the server's maxSessionTimeout, 20 ticks by default, bounds)",
			lockmw.ErrInvalidOption, ttl, timeout, s.tick, limit, limit)
	}
	return nil
}

// Errors of the store's own.
var (
	errNoSession      = errors.New("zookeeper: no session (connecting or reconnecting)") // see noSession
	errSessionChanged = errors.New("zookeeper: the session ended (expired) during the request")
	errEntryGone      = errors.New("zookeeper: the lock node is gone")
	errUnknownCreate  = errors.New("zookeeper: a create's reply was lost and its node was not found; it is given up")
	// errExpired is why a holding ended at its session's expiry.
	errExpired = fmt.Errorf("zookeeper: the server expired the session, deleting its lock nodes: %w", zk.ErrSessionExpired)
)

// do runs one request bounded by ctx, through the test hook.
func (s *zkStore) do(ctx context.Context, op, path string, fn func() error) (time.Time, error) {
	sent, err := call(ctx, fn)
	if h := s.hook; h != nil {
		err = h(op, path, err)
	}
	return sent, err
}

// parentOf is the node under which the lock k's nodes live.
func (s *zkStore) parentOf(k store.Key) string {
	name := escape(k.Prefix) + escape(k.Name)
	switch {
	case name == "." || name == "..":
		name = strings.ReplaceAll(name, ".", "%2E")
	case s.root == "/" && name == "zookeeper":
		name = "%7Aookeeper" // /zookeeper is ZooKeeper's own
	}
	return s.root + name
}

// escape writes '%', '/', control characters and every non-ASCII byte as
// %XX (upper-case hex), so that a name is a valid node name and no two
// (prefix, key) pairs share one; "%c" never appears in an escaped name.
func escape(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '%' || c == '/' || c < 0x20 || c >= 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' || c == '/' || c < 0x20 || c >= 0x7f {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// nodePrefix is the name of token's node before ZooKeeper's sequence.
func nodePrefix(token string) string { return "lock-" + token + "-" }

// lockNode is one lock node of a parent's children.
type lockNode struct {
	name  string
	token string
	seq   int32
}

// parseNode parses a lock node's name, "lock-" + token + "-" + sequence
// (ZooKeeper's %010d of the parent's 32-bit child version, negative once
// it wrapped). Other names are not lock nodes.
func parseNode(name string) (lockNode, bool) {
	rest, ok := strings.CutPrefix(name, "lock-")
	if !ok {
		return lockNode{}, false
	}
	i := strings.IndexByte(rest, '-')
	if i <= 0 || len(rest)-i-1 < 10 {
		return lockNode{}, false
	}
	seq, err := strconv.ParseInt(rest[i+1:], 10, 32)
	if err != nil {
		return lockNode{}, false
	}
	return lockNode{name: name, token: rest[:i], seq: int32(seq)}, true
}

// before reports whether sequence a was given before b: serial number
// arithmetic on the 32-bit counter, right across its wrap while the live
// nodes of a parent span less than 2^31 sequences (they span a few).
func before(a, b int32) bool { return int32(uint32(b)-uint32(a)) > 0 }

// predecessor returns the lock node queued just before own among
// children, "" when own is first, and how many lock nodes are before own.
// Names that are not lock nodes are ignored.
func predecessor(children []string, own lockNode) (string, int) {
	pred, _, below := predecessors(children, own)
	return pred, below
}

// predecessors is predecessor, also returning the lock node queued just
// before pred ("" when pred is the only one below own).
func predecessors(children []string, own lockNode) (pred, second string, below int) {
	var p, pp lockNode
	for _, c := range children {
		n, ok := parseNode(c)
		if !ok || n.name == own.name || !before(n.seq, own.seq) {
			continue
		}
		switch {
		case below == 0 || before(p.seq, n.seq):
			pp, p = p, n
		case below == 1 || before(pp.seq, n.seq):
			pp = n
		}
		below++
	}
	if below == 0 {
		return "", "", 0
	}
	if below == 1 {
		return p.name, "", 1
	}
	return p.name, pp.name, below
}
