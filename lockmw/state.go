package lockmw

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is what a Locker and its leases hold: their fields, the seam to
// the way the store's waiters wait (policy), and the count of work under way
// that Close waits for (flights). Their methods are in the files of each
// part: locker.go (the API), lease.go, keepalive.go (the watchdog), wait.go
// and the policies' files.

// A Locker hands out leases on named locks kept in one store: one of the
// two constructors of redis.go (New, NewRedlock), or a store of the
// packages beside this one (etcd, ZooKeeper, PostgreSQL, MariaDB).
// Create one per process (or per store) and share it: it is safe for
// concurrent use, and it runs a single watchdog for all of its leases.
//
// Lockers exclude each other when they use the same store and the same key
// prefix; leases of one Locker exclude each other too, except a nested lease
// acquired through a lease's context (see Lease.Context).
type Locker struct {
	cfg     config
	id      string      // names this Locker to its store (its waiters' grants)
	st      store.Store // where the locks are kept
	caps    caps        // what st offers beyond store.Store (caps.go)
	policy  policy      // how st's waiters wait and its locks are handed on (below)
	store   string      // names the store in messages: see newLocker
	keeper  *renewScheduler
	cleaner *cleaner // gives back locks that failed acquisitions may have taken
	tel     *telemetry
	logger  *slog.Logger

	gatesMu sync.Mutex
	gates   map[store.Key]*gate // store waiters by lock (see enterGate)

	// flights counts releases and hand-overs under way; Close waits for
	// them, so that it leaves no lock of its own behind.
	flights flights

	closed    atomic.Bool
	closing   chan struct{}
	closeOnce sync.Once
	// closedCtx ends, with cause ErrClosed, when Close begins: requests
	// that Close must not wait out are made under endAtClose.
	closedCtx  context.Context
	closeCause context.CancelCauseFunc
}

// endAtClose returns a context derived from ctx that also ends, with
// cause ErrClosed, when Close begins.
func (l *Locker) endAtClose(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.closedCtx, func() { cancel(ErrClosed) })
	return c, func() { stop(); cancel(nil) }
}

// newToken returns a random 128-bit owner token.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand panics instead
	return hex.EncodeToString(b[:])
}

// isNil reports whether v is nil or a typed nil pointer.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// flights counts work under way that must reach the store before Close
// returns: releases, and locks handed to waiters until each becomes a lease
// or is given back. Unlike a sync.WaitGroup, it may be started while
// waited for.
type flights struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0, while someone waits
}

func (f *flights) start() {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
}

func (f *flights) done() {
	f.mu.Lock()
	if f.n--; f.n == 0 && f.idle != nil {
		close(f.idle)
		f.idle = nil
	}
	f.mu.Unlock()
}

// wait returns when no flight is under way, or when ctx ends.
func (f *flights) wait(ctx context.Context) {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return
	}
	if f.idle == nil {
		f.idle = make(chan struct{})
	}
	idle := f.idle
	f.mu.Unlock()
	select {
	case <-idle:
	case <-ctx.Done():
	}
}

// A Lease is one holding of a lock. It is kept alive by the Locker's
// watchdog until Release, and its Context ends as soon as the lock is
// released or lost. A Lease is safe for concurrent use.
type Lease struct {
	leaseRecord // name, fence, acquiredAt
	locker      *Locker
	key         string
	lock        store.Key
	token       string // random 128-bit owner id, hex
	ttl         time.Duration
	watchdog    bool
	fair        bool // acquired with Fair: its Locker tracks it until release
	// state is what the store's own policy keeps on the lease
	// (store.Held.State), or nil.
	state any
	// early is the hand-over this lease came by before the store confirmed it,
	// or nil: the lease's release waits until it is settled, so that the
	// release never reaches the store before the transfer it depends on.
	early store.Settling

	ctx  context.Context
	stop context.CancelCauseFunc // cancels ctx; see cancel

	// outer is the outermost lease this one is nested in (reentrant
	// acquisition through the context), nil for an outermost lease. A
	// nested lease shares its outermost lease's lock, token and fence.
	outer *Lease
	// enclosing is the innermost lease on the context chain this lease's
	// context was made from, of any key or Locker: the chain nestIn walks.
	enclosing *Lease

	// The end of the lease, apart from its context, which also ends with
	// the context passed to Acquire while the lease is still held.
	endMu    sync.Mutex
	ended    bool                // released, lost or closed (nested: or its outer lease ended)
	endCause error               // when ended: context.Canceled (released), a *LostError, ErrClosed
	nested   map[*Lease]struct{} // outermost lease: its nested leases not yet ended

	keep keepState                 // owned by the Locker's renewScheduler
	lost atomic.Pointer[LostError] // set once the lock is known lost
	// validUntil is keep.deadline as an offset from monoEpoch, readable
	// without the scheduler's lock (Deadline, Valid).
	validUntil atomic.Int64

	releaseOnce sync.Once
	releaseErr  error
}

// policy is the seam between the Locker and the way its store's waiters
// wait and its locks are handed on, chosen once per Locker from what the
// store offers (newPolicy). Acquire, a lease's release, Close and
// the cleaner call the policy; only the policy's own files know how a store
// waits:
//
//   - storePolicy (wait.go): attempts, with backoff, the store's release
//     notifications (store.Notifier) or its queue (store.Queue), whose
//     hand-overs it reports; every store but Redis's;
//   - ownPolicy (host.go): the store's own (store.Waits: New's and
//     NewRedlock's stores, whose policies are in lockmw/internal/redisstore),
//     which makes and ends leases through the Locker's store.Host.
//
// Whatever the policy, a lease becomes live only in one of the ways of
// doc.go ("Safety: how a lease becomes live"), and every one ends in
// newLease (newlease.go) or, for a hand-over the store has not confirmed
// yet, newEarlyLease (host.go).
type policy interface {
	// acquire runs the attempts and waits of one Acquire (wait) or
	// TryAcquire call.
	acquire(a *acquisition, wait bool) (*Lease, error)
	// release ends token's holding of lock (a lease's, acquired with Fair
	// when fair, or a lock given back), handing the lock on where the
	// store does; it reports what the store found.
	release(ctx context.Context, lock store.Key, token string, fair bool) (ownership, error)
	// releaseLease releases s, valid until deadline: as release does, or
	// by handing the lock to a waiter of this Locker before the store
	// confirms it.
	releaseLease(ctx context.Context, s *Lease, deadline time.Time) (ownership, error)
	// released runs after the release of token's holding of lock (a
	// lease's, or a give-back), fair as for release.
	released(lock store.Key, token string, fair bool)
	// holdEnded runs once a lease of lock that held it until its release
	// no longer counts as holding it (renewScheduler.holds).
	holdEnded(lock store.Key)
}

// acquisition is one Acquire or TryAcquire call under way: what each step
// of its wait needs, made once by Locker.wait. Its store.Acquisition (Ctx,
// which carries the acquire span, Key, TTL, Fair, GiveUp) is what a store's
// own policy sees of it.
type acquisition struct {
	store.Acquisition
	leaseParent context.Context // the caller's context: the lease context derives from it
	cfg         *acquireConfig
	// waiting is set once the call waits (lockmw.waiting counts it until
	// the call returns): before its first pause, or at a busy gate.
	waiting bool
}

// gate lets one default-mode waiter per key and Locker wait for the
// store's notification and retry; the others wait for the gate, so that a
// release sets off one attempt per Locker, not one per waiting goroutine.
type gate struct {
	turn chan struct{} // holds a token while nobody is through the gate
	refs int           // waiters through or at the gate; guarded by Locker.gatesMu
}

// cancel ends s: it cancels s's context with cause (nil: released) and, for
// an outermost lease, the leases nested in it, with the same cause, first:
// whoever sees s's context ended finds its nested leases ended too, so no
// nested lease outlives its outermost one, however late a goroutine runs.
// Every end of a lease (release, loss, Close) comes through here.
func (s *Lease) cancel(cause error) {
	ended := cause
	if ended == nil {
		ended = context.Canceled // what context.Cause of a released lease says
	}
	s.endMu.Lock()
	if s.ended {
		s.endMu.Unlock()
		s.stop(cause)
		return
	}
	s.ended, s.endCause = true, ended
	nested := s.nested
	s.nested = nil
	s.endMu.Unlock()
	for n := range nested {
		n.cancel(cause)
	}
	s.stop(cause)
}
