package lockmw

import (
	"container/heap"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is how a lock is kept alive: one renewScheduler per Locker
// renews every watchdog lease at a third of its TTL, in one pipelined round
// trip per tick, and cancels a lease's context with ErrLost when its key is
// gone or taken, or when its validity deadline passes without a confirmed
// renewal. Acquiring a lock is elsewhere (locker.go, attempt.go).
//
// Validity: a renewal (or the acquisition) sent at monotonic time t and
// confirmed by the store means the lock lives at least until t+TTL on the
// store's clock, so the lease is valid until t + TTL − drift on ours. The
// scheduler enforces that deadline itself, so a lease is cancelled in time
// even while the store does not answer at all.
//
// Its timer can fire late (a loaded host, a starved process), so the
// deadline is also checked, not only timed: a renewal or a hand-over's
// confirmation answered at or after the deadline does not move it, and the
// lease is lost (reason deadline); Lease.Valid, nesting and Release end a
// lease they find past its deadline the same way (expire). This only ever
// ends a lease earlier than the timer would, never keeps one live longer, so
// doc.go's safety argument (the deadline D bounds every live lease) holds as
// it is written.

// leaseState is where a lease is in its life.
type leaseState uint8

const (
	stateHeld leaseState = iota
	stateLost
	stateReleased
	stateClosed // released by Locker.Close
)

// keepState is the scheduler's bookkeeping for one lease, guarded by
// renewScheduler.mu.
type keepState struct {
	state    leaseState
	lost     *LostError
	deadline time.Time     // validity ends: last confirmed send + TTL − drift
	fireAt   time.Time     // next event: renewal due, retry, or deadline
	slack    time.Duration // a renewal may run this much before fireAt, to share a round trip
	inflight bool          // a renewal is on the wire
	pending  bool          // handed over early: no renewal until the hand-over is confirmed
	lastErr  error         // last renewal error since the last success
	index    int           // position in the queue; -1 when not queued
}

// renewScheduler keeps a Locker's leases alive with one goroutine and one
// timer, however many leases there are.
type renewScheduler struct {
	st     store.Store
	store  string          // the store's name in messages (see named)
	diag   store.Diagnoser // nil when the store offers none
	tel    *telemetry
	logger *slog.Logger
	drift  func(ttl time.Duration) time.Duration

	mu     sync.Mutex
	queue  leaseQueue
	closed bool
	// held counts the leases in stateHeld by lock key: whether this Locker
	// holds a lock is what decides how its waiters wait (see holds).
	held   map[store.Key]int
	wakeAt time.Time // when the loop's timer fires next
	// timer is the loop's, set only under mu (with wakeAt): by the loop
	// for the queue's first event, and by add, addPending and confirm
	// when a lease needs it earlier (rearmFor), which wakes no goroutine.
	timer *time.Timer

	wake    chan struct{}
	done    chan struct{}
	stopped chan struct{}

	// ahead, set only by internal tests, moves the clock that deadline
	// checks read (now) ahead of the one the loop's timer runs on: a
	// deadline then passes while its timer has not fired, as on a host where
	// timers fire late.
	ahead atomic.Int64
	// rounds counts the loop's rounds (read by internal tests).
	rounds atomic.Int64
}

// monoEpoch is the origin of Lease.validUntil: a time with a monotonic
// reading, so that deadlines kept as offsets from it keep theirs.
var monoEpoch = time.Now()

// now is the time deadline checks compare a lease's deadline with: the
// monotonic clock (see ahead).
func (s *renewScheduler) now() time.Time {
	return time.Now().Add(time.Duration(s.ahead.Load()))
}

// setDeadline sets l's validity deadline, for the scheduler and for
// Lease.Deadline. Caller holds s.mu.
func setDeadline(l *Lease, d time.Time) {
	l.keep.deadline = d
	l.validUntil.Store(int64(d.Sub(monoEpoch)))
}

func newRenewScheduler(st store.Store, storeName string, tel *telemetry, logger *slog.Logger, drift func(time.Duration) time.Duration) *renewScheduler {
	s := &renewScheduler{
		st:      st,
		store:   storeName,
		tel:     tel,
		logger:  logger,
		drift:   drift,
		wake:    make(chan struct{}, 1),
		held:    make(map[store.Key]int),
		wakeAt:  time.Now().Add(time.Hour), // run's first timer
		timer:   time.NewTimer(time.Hour),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	s.diag, _ = st.(store.Diagnoser)
	go s.run()
	return s
}

// add starts keeping l, acquired by a request sent at sentAt. It reports
// false when the scheduler is closed.
func (s *renewScheduler) add(l *Lease, sentAt time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	k := &l.keep
	k.state = stateHeld
	s.held[l.lock]++
	setDeadline(l, sentAt.Add(l.ttl-s.drift(l.ttl)))
	s.scheduleRenewal(l, sentAt)
	heap.Push(&s.queue, l)
	s.rearmFor(k)
	return true
}

// addPending starts keeping l, handed over before the store confirmed it: it is
// valid until deadline (its predecessor's) and is not renewed until confirm.
// It reports false when the scheduler is closed.
func (s *renewScheduler) addPending(l *Lease, deadline time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	k := &l.keep
	k.state, k.pending = stateHeld, true
	s.held[l.lock]++
	setDeadline(l, deadline)
	k.fireAt, k.slack = deadline, 0
	heap.Push(&s.queue, l)
	s.rearmFor(k)
	return true
}

// confirm ends l's pending state: the store set its lock by a request sent at
// sentAt. A confirmation that comes when l's deadline has passed (its timer
// late) does not revive it: l is lost.
func (s *renewScheduler) confirm(l *Lease, sentAt time.Time) {
	s.mu.Lock()
	k := &l.keep
	if k.state != stateHeld || !k.pending {
		s.mu.Unlock()
		return
	}
	k.pending = false
	if !s.now().Before(k.deadline) {
		s.end(l, &LostError{Key: l.key, Reason: LostDeadline, Err: errConfirmedLate})
		s.mu.Unlock()
		s.finishLost([]*Lease{l})
		return
	}
	if d := sentAt.Add(l.ttl - s.drift(l.ttl)); d.After(k.deadline) {
		setDeadline(l, d)
	}
	s.scheduleRenewal(l, sentAt)
	heap.Fix(&s.queue, k.index)
	s.rearmFor(k)
	s.mu.Unlock()
}

// expire ends l as lost if it is held and its deadline has passed, whether
// or not the timer for that deadline has fired yet. It reports whether l was
// held and within its deadline.
func (s *renewScheduler) expire(l *Lease) bool {
	s.mu.Lock()
	k := &l.keep
	if k.state != stateHeld {
		s.mu.Unlock()
		return false
	}
	if s.now().Before(k.deadline) {
		s.mu.Unlock()
		return true
	}
	s.end(l, s.deadlineLost(l))
	s.mu.Unlock()
	s.finishLost([]*Lease{l})
	return false
}

// end marks the held lease l lost with cause and stops keeping it; the
// caller then tells its owner (finishLost). Caller holds s.mu.
func (s *renewScheduler) end(l *Lease, cause *LostError) {
	k := &l.keep
	k.state, k.lost = stateLost, cause
	s.unhold(l)
	if k.index >= 0 {
		heap.Remove(&s.queue, k.index)
	}
}

// deadlineLost is the cause of l's loss at its deadline. Caller holds s.mu.
func (s *renewScheduler) deadlineLost(l *Lease) *LostError {
	k := &l.keep
	reason := LostDeadline
	if !l.watchdog {
		reason = LostExpired // it was meant to expire: no renewal was due
	}
	why := k.lastErr
	if why == nil && k.inflight {
		why = s.named(errRenewalUnanswered)
	}
	return &LostError{Key: l.key, Reason: reason, Err: why}
}

// lose marks l lost with cause, if it is still held, and tells its owner.
func (s *renewScheduler) lose(l *Lease, cause *LostError) {
	s.mu.Lock()
	if l.keep.state != stateHeld {
		s.mu.Unlock()
		return
	}
	s.end(l, cause)
	s.mu.Unlock()
	s.finishLost([]*Lease{l})
}

// loseTokens ends, as lost (LostExpired, with why), every held lease whose
// token is among tokens: a store reported their holdings ended
// (store.LossNotifier). It only ends leases earlier than their deadline
// would, so the safety argument is unchanged.
func (s *renewScheduler) loseTokens(tokens []string, why error) {
	if len(tokens) == 0 {
		return
	}
	set := make(map[string]bool, len(tokens))
	for _, t := range tokens {
		set[t] = true
	}
	s.mu.Lock()
	var lost []*Lease
	for _, l := range s.queue {
		if set[l.token] && l.keep.state == stateHeld {
			lost = append(lost, l)
		}
	}
	for _, l := range lost {
		s.end(l, &LostError{Key: l.key, Reason: LostExpired, Err: why})
	}
	s.mu.Unlock()
	s.finishLost(lost)
}

// scheduleRenewal sets l's next event after a confirmed acquisition or
// renewal sent at sentAt. Caller holds s.mu.
func (s *renewScheduler) scheduleRenewal(l *Lease, sentAt time.Time) {
	k := &l.keep
	if l.watchdog {
		k.fireAt = sentAt.Add(l.ttl / 3)
		k.slack = l.ttl / 6
	} else {
		k.fireAt, k.slack = k.deadline, 0
	}
}

// remove stops keeping l because its owner releases it. It returns the
// state l was in (a lost lease stays lost, with its cause) and, for a held
// lease whose lock the store has confirmed, its validity deadline.
func (s *renewScheduler) remove(l *Lease) (leaseState, *LostError, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := &l.keep
	if k.state != stateHeld {
		return k.state, k.lost, time.Time{}
	}
	var deadline time.Time
	if !k.pending {
		deadline = k.deadline
	}
	k.state = stateReleased // still counted in held until released (see released)
	if k.index >= 0 {
		heap.Remove(&s.queue, k.index)
	}
	return stateHeld, nil, deadline
}

// close stops the scheduler and returns the leases it was keeping, now
// marked closed. Their owners' Release returns ErrClosed.
func (s *renewScheduler) close() []*Lease {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	clear(s.held)
	held := make([]*Lease, 0, len(s.queue))
	for _, l := range s.queue {
		l.keep.state = stateClosed
		l.keep.index = -1
		held = append(held, l)
	}
	s.queue = nil
	s.mu.Unlock()
	close(s.done)
	<-s.stopped
	return held
}

// unhold uncounts l, which leaves stateHeld. Caller holds s.mu.
func (s *renewScheduler) unhold(l *Lease) {
	if s.held[l.lock]--; s.held[l.lock] <= 0 {
		delete(s.held, l.lock)
	}
}

// released uncounts l, which remove took out of stateHeld, once its
// release is done: until then the lock is still this Locker's to hand
// over, and a new Acquire of it waits in the room for that.
func (s *renewScheduler) released(l *Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.unhold(l)
	}
}

// holds reports whether a lease of this Locker holds the lock k, or is
// being released.
func (s *renewScheduler) holds(k store.Key) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[k] > 0
}

// rearmFor sets the loop's timer for k's lease when that lease is first in
// the queue and needs the loop earlier than the timer is set for: the loop
// wakes then, not now. (Waking it at each acquisition, to set the timer
// itself, cost a goroutine's and often an idle thread's wake-up per lock,
// mostly spent after the lease's release on finding nothing to do.) Caller
// holds s.mu, and has pushed or fixed k's lease in the queue.
func (s *renewScheduler) rearmFor(k *keepState) {
	if k.index != 0 || !k.fireAt.Before(s.wakeAt) {
		return
	}
	s.wakeAt = k.fireAt
	s.timer.Reset(time.Until(k.fireAt))
}

// poke wakes the scheduler loop to look at the queue again.
func (s *renewScheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *renewScheduler) run() {
	defer close(s.stopped)
	defer s.timer.Stop()
	for {
		s.rounds.Add(1)
		now := time.Now()
		s.mu.Lock()
		batch, lost := s.collect(now)
		next := time.Hour
		if len(s.queue) > 0 {
			next = s.queue[0].keep.fireAt.Sub(now)
		}
		// Set under mu, so that a rearm for an earlier event, by a lease
		// added after collect, is never undone.
		s.wakeAt = now.Add(next)
		s.timer.Reset(next)
		s.mu.Unlock()

		s.finishLost(lost)
		if len(batch) > 0 {
			// The round trip runs beside the loop, so a store that does not
			// answer cannot delay any lease's deadline.
			go s.renew(batch, now)
		}
		select {
		case <-s.timer.C:
		case <-s.wake:
		case <-s.done:
			return
		}
	}
}

// collect takes from the queue every lease whose renewal is due (or due
// soon enough to share this round trip) and every lease whose deadline has
// passed. Caller holds s.mu.
func (s *renewScheduler) collect(now time.Time) (batch, lost []*Lease) {
	for len(s.queue) > 0 {
		l := s.queue[0]
		k := &l.keep
		if k.fireAt.Add(-k.slack).After(now) {
			break
		}
		if !now.Before(k.deadline) {
			s.end(l, s.deadlineLost(l))
			lost = append(lost, l)
			continue
		}
		if l.watchdog && !k.inflight {
			k.inflight = true
			batch = append(batch, l)
		}
		// Until the renewal is answered, the next event is the deadline.
		k.fireAt, k.slack = k.deadline, 0
		heap.Fix(&s.queue, 0)
	}
	return batch, lost
}

// errFewerResults stands for the results a store's Renew did not return.
var errFewerResults = errors.New("the store returned fewer renewal results than requests")

// renew sends one round trip renewing batch, sent at sentAt (taken before
// the request left, so validity computed from it is never too long).
func (s *renewScheduler) renew(batch []*Lease, sentAt time.Time) {
	reqs := make([]store.RenewRequest, len(batch))
	var longest time.Duration
	for i, l := range batch {
		reqs[i] = store.RenewRequest{Key: l.lock, Token: l.token, TTL: l.ttl}
		longest = max(longest, l.ttl)
	}
	// A reply later than the longest TTL cannot save any lease in the batch.
	ctx, cancel := bound(context.Background(), longest)
	results := s.st.Renew(ctx, reqs)
	for len(results) < len(reqs) {
		results = append(results, store.RenewResult{Err: errFewerResults})
	}
	var named *unansweredError // the first failure, named; one diagnosis serves all
	for i := range results {
		switch err := results[i].Err; {
		case err == nil:
		case named == nil:
			if named, _ = unanswered(boundEnded(ctx), s.store, s.diag, "the renewal", longest, err).(*unansweredError); named != nil {
				results[i].Err = named
			}
		default:
			e := *named
			e.err = err
			results[i].Err = &e
		}
	}
	cancel()

	now := time.Now()
	checked := s.now() // = now, unless a test moved the check clock ahead
	var ok, failed int
	var failure error
	var lost []*Lease
	s.mu.Lock()
	for i, l := range batch {
		k := &l.keep
		k.inflight = false
		if k.state != stateHeld {
			continue // released, lost or closed meanwhile
		}
		r := results[i]
		switch {
		case r.Err != nil:
			failed++
			failure = r.Err
			k.lastErr = r.Err
			// Retry soon, but the deadline still stands.
			k.fireAt, k.slack = now.Add(retryDelay(l.ttl)), 0
			if k.fireAt.After(k.deadline) {
				k.fireAt = k.deadline
			}
			heap.Fix(&s.queue, k.index)
		case r.Ownership == owned && !checked.Before(k.deadline):
			// Confirmed, but only once the deadline had passed (its timer
			// is late): the lease ended there, and is not revived.
			s.end(l, &LostError{Key: l.key, Reason: LostDeadline, Err: s.named(errRenewalLate)})
			lost = append(lost, l)
		case r.Ownership == owned:
			ok++
			k.lastErr = nil
			if d := sentAt.Add(l.ttl - s.drift(l.ttl)); d.After(k.deadline) {
				setDeadline(l, d)
			}
			s.scheduleRenewal(l, sentAt)
			heap.Fix(&s.queue, k.index)
		default:
			s.end(l, &LostError{Key: l.key, Reason: lostReason(r.Ownership)})
			lost = append(lost, l)
		}
	}
	s.mu.Unlock()
	s.poke()

	s.tel.renewed(context.Background(), ok, failed, failure)
	if failed > 0 {
		s.logger.Warn("lockmw: lease renewal failed; retrying until the validity deadline",
			slog.String("store", s.store), slog.Int("leases", failed), slog.Any("error", failure))
	}
	s.finishLost(lost)
}

// finishLost tells the owners of lost leases: their contexts are cancelled
// with the LostError as cause.
func (s *renewScheduler) finishLost(lost []*Lease) {
	for _, l := range lost {
		cause := l.keep.lost // written under s.mu before l was handed here; never changed after
		l.lost.Store(cause)
		l.cancel(cause)
		s.tel.leaseLost(context.Background(), &l.leaseRecord, cause)
		attrs := []any{slog.String("key", l.key), slog.String("store", s.store), slog.String("reason", string(cause.Reason)), slog.Uint64("fence", l.fence)}
		if cause.Err != nil {
			attrs = append(attrs, slog.Any("error", cause.Err))
		}
		s.logger.Warn("lockmw: lock lost; its lease context is cancelled", attrs...)
	}
}

// errRenewalUnanswered explains a deadline that passed while a renewal was
// still waiting for the store's answer.
var errRenewalUnanswered = errors.New("the store has not answered the last renewal")

// errRenewalLate explains a deadline that passed before the store's
// confirmation of a renewal came in.
var errRenewalLate = errors.New("the store confirmed the last renewal only after the validity deadline")

// named returns err (errRenewalUnanswered or errRenewalLate) naming the
// Locker's store: "the store" becomes its store.Named name, say
// "ZooKeeper". errors.Is still finds err.
func (s *renewScheduler) named(err error) error {
	if s.store == "" {
		return err
	}
	return &storeNamed{name: s.store, err: err}
}

// storeNamed is an error of the scheduler's with the store named.
type storeNamed struct {
	name string
	err  error
}

func (e *storeNamed) Error() string {
	return strings.Replace(e.err.Error(), "the store", e.name, 1)
}

func (e *storeNamed) Unwrap() error { return e.err }

// errConfirmedLate explains a lease handed over early whose hand-over was
// confirmed only after its validity deadline.
var errConfirmedLate = errors.New("the store confirmed the hand-over only after the validity deadline")

// retryDelay is how long the watchdog waits after a failed renewal.
func retryDelay(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 5*time.Millisecond), time.Second)
}

// leaseQueue is a min-heap of leases by their next event.
type leaseQueue []*Lease

func (q leaseQueue) Len() int           { return len(q) }
func (q leaseQueue) Less(i, j int) bool { return q[i].keep.fireAt.Before(q[j].keep.fireAt) }
func (q leaseQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].keep.index = i
	q[j].keep.index = j
}

func (q *leaseQueue) Push(x any) {
	l := x.(*Lease)
	l.keep.index = len(*q)
	*q = append(*q, l)
}

func (q *leaseQueue) Pop() any {
	old := *q
	n := len(old)
	l := old[n-1]
	old[n-1] = nil
	l.keep.index = -1
	*q = old[:n-1]
	return l
}
