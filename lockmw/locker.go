package lockmw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is the Locker's API: newLocker, behind the constructors (New
// and NewRedlock in redis.go, NewWithStore in store.go), with the policy
// its store's waiters wait by (newPolicy); Acquire, TryAcquire, Do and
// Close. What a Locker holds is in state.go.

// newLocker returns a Locker on s, and finds what s offers beyond
// store.Store. It closes s when it fails.
func newLocker(s store.Store, opts []Option) (l *Locker, err error) {
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	cfg := config{ttl: DefaultTTL, prefix: DefaultPrefix, driftFactor: DefaultDriftFactor, logger: slog.Default()}
	for _, o := range opts {
		if o != nil {
			o.applyLocker(&cfg)
		}
	}
	if err := errors.Join(append(cfg.errs, cfg.checkRetention())...); err != nil {
		return nil, err
	}
	tel, err := newTelemetry(cfg.tp, cfg.mp)
	if err != nil {
		return nil, fmt.Errorf("lockmw: creating metric instruments: %w", err)
	}
	storeName := "the store" // names s in messages (its store.Named name)
	if n, ok := s.(store.Named); ok && n.Name() != "" {
		storeName = n.Name()
	}
	if cfg.holderInfo != "" {
		in, ok := s.(store.Inspector)
		if !ok {
			return nil, fmt.Errorf("%w: WithHolderInfo: %s keeps no holder descriptions", ErrInvalidOption, storeName)
		}
		in.UseHolderInfo(cfg.holderInfo)
	}
	c := caps{backoffMin: minBackoff, backoffMax: maxBackoff}
	c.notifier, _ = s.(store.Notifier)
	c.queue, _ = s.(store.Queue)
	_, c.fairOnly = s.(store.FairOnly)
	c.leftNothing, _ = s.(store.LeftNothing)
	c.diagnoser, _ = s.(store.Diagnoser)
	var clientClosed func(error) bool
	if cc, ok := s.(store.ClientCloser); ok {
		clientClosed = cc.ClientClosed
	}
	if bo, ok := s.(store.Backoff); ok {
		lo, hi := bo.Backoff()
		if lo <= 0 || hi < lo {
			return nil, fmt.Errorf("%w: the store's backoff range [%v, %v] is not 0 < min <= max", ErrInvalidOption, lo, hi)
		}
		c.backoffMin, c.backoffMax = lo, hi
	}
	l = &Locker{
		cfg:     cfg,
		id:      newToken()[:16],
		st:      s,
		caps:    c,
		tel:     tel,
		logger:  cfg.logger,
		closing: make(chan struct{}),
		store:   storeName,
		cleaner: newCleaner(cfg.logger, storeName, clientClosed),
	}
	l.closedCtx, l.closeCause = context.WithCancelCause(context.Background())
	l.policy = newPolicy(l)
	l.keeper = newRenewScheduler(s, storeName, tel, cfg.logger, cfg.drift)
	if lg, ok := s.(store.Logging); ok {
		lg.UseLogger(cfg.logger)
	}
	return l, nil
}

// Acquire takes the lock named key, waiting while another owner holds it:
// until ctx ends (the context's error is returned) or until WithWait runs out
// (ErrNotAcquired). A store failure ends the wait at once with an error
// matching ErrUnavailable.
//
// A request that failed without the store's answer (a timeout, ctx ending
// while it was on the wire) may still take the lock when the store gets to
// it; the Locker then gives that lock back as soon as the store answers
// again (retrying for up to the lease TTL), so the key is not held by nobody
// for a TTL.
//
// If ctx descends from the Context of a lease this Locker holds on key, and
// that lease (its outermost lease, if it is nested) is still held, Acquire
// returns a nested lease at once: it shares the lock and fence, and ends
// when the outermost lease ends (see Lease.Context and Lease.Release). A
// context that outlived its lease (say, made with context.WithoutCancel
// from a lease context that was released or lost since) does not nest:
// Acquire then waits for the lock like any other caller.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	return l.acquire(ctx, key, true, opts)
}

// TryAcquire makes one attempt to take the lock named key. If another owner
// holds it, the error matches ErrNotAcquired and RetryAfter tells how long
// the holder's lease has left. Reentrancy works as for Acquire.
func (l *Locker) TryAcquire(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	return l.acquire(ctx, key, false, opts)
}

// Do runs fn while holding the lock named key, acquired as by Acquire. fn
// gets the lease context: it is cancelled if the lock is lost, and fn should
// stop then. The lock is released when fn returns or panics, even if ctx has
// ended. Do returns fn's error; if the lock was lost while fn ran, the error
// also matches ErrLost, even when fn returned nil.
func (l *Locker) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...AcquireOption) (err error) {
	if fn == nil {
		return fmt.Errorf("%w: Do needs a non-nil function", ErrInvalidOption)
	}
	lease, err := l.Acquire(ctx, key, opts...)
	if err != nil {
		return err
	}
	defer func() {
		rerr := lease.Release(ctx) // reaches the store even if ctx has ended
		switch {
		case err == nil:
			err = rerr
		case errors.Is(rerr, ErrLost):
			err = errors.Join(err, rerr)
		}
	}()
	return fn(lease.Context())
}

// Close releases every lease the Locker holds (their contexts end with cause
// ErrClosed), stops its watchdog, and makes every later call return
// ErrClosed. Waiting Acquire calls return ErrClosed. Locks that failed
// acquisitions may have taken, and that the Locker is still giving back
// (see Acquire), get one last try, bounded by a second and the client's
// timeouts; nothing keeps running after Close returns. It does not close the
// store's client. Close returns the errors of releases that could not reach
// the store (those locks expire after their TTL); calling it again returns
// nil.
func (l *Locker) Close() error {
	var err error
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		close(l.closing)
		l.closeCause(ErrClosed)
		err = l.releaseAll(l.keeper.close())
		// Releases that were under way, and locks handed to waiters that
		// now give them back, reach the store before Close returns.
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.ttl)
		l.flights.wait(ctx)
		cancel()
		l.cleaner.close() // the store is still open for its last tries
		if cerr := l.st.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	})
	return err
}

// releaseAll releases leases that Close took from the watchdog.
func (l *Locker) releaseAll(held []*Lease) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, 16)
	)
	for _, s := range held {
		s.cancel(ErrClosed)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ctx, cancel := context.WithTimeout(context.Background(), s.ttl)
			defer cancel()
			if s.early != nil {
				s.early.Wait(ctx) // the release goes after the hand-over
			}
			if _, err := l.policy.release(ctx, s.lock, s.token, s.fair); err != nil {
				mu.Lock()
				errs = append(errs, unavailable("release", s.key, err))
				mu.Unlock()
			}
			l.tel.leaseEnded(ctx, &s.leaseRecord, outcomeOK)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (l *Locker) acquire(ctx context.Context, key string, wait bool, opts []AcquireOption) (*Lease, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	ac := acquireConfig{watchdog: true}
	for _, o := range opts {
		if o != nil {
			o.applyAcquire(&ac)
		}
	}
	if err := errors.Join(ac.errs...); err != nil {
		return nil, err
	}
	if ac.ttl == 0 {
		ac.ttl = l.cfg.ttl
	}
	if ac.name == "" {
		ac.name = key
	}
	if ctx.Err() != nil {
		return nil, ctxErr(ctx, key)
	}
	if nested := l.nestIn(ctx, key); nested != nil {
		return nested, nil
	}
	if ctx.Err() != nil {
		return nil, ctxErr(ctx, key) // nestIn found ctx's lease past its deadline and ended it
	}

	start := time.Now()
	opCtx, span := l.tel.startSpan(ctx, spanAcquire, ac.name)
	var lease *Lease
	err := l.raiseFence(opCtx, key, &ac)
	if err == nil {
		lease, err = l.wait(opCtx, ctx, key, &ac, wait, start)
	}

	outcome := outcomeAcquired
	var fence uint64
	switch {
	case lease != nil:
		fence = lease.fence
	case errors.Is(err, ErrNotAcquired) && !wait:
		outcome = outcomeBusy
	case errors.Is(err, ErrNotAcquired), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		outcome = outcomeTimeout
	default:
		outcome = outcomeError
	}
	l.tel.acquireDone(opCtx, span, ac.name, outcome, time.Since(start), fence, err)
	return lease, err
}

// newPolicy returns the policy for the Locker's store: the store's own
// (store.Waits), or storePolicy.
func newPolicy(l *Locker) policy {
	if w, ok := l.st.(store.Waits); ok {
		return newOwnPolicy(l, w)
	}
	return storePolicy{l}
}
