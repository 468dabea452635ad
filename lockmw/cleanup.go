package lockmw

import (
	"context"
	"errors"
	"log/slog"
	mathrand "math/rand/v2"
	"sync"
	"time"
)

// This file gives back locks that failed acquisitions may have taken.
//
// An acquisition request that fails without the store's answer (the
// client's read timeout, the caller's context ending while the request was
// on the wire, a broken connection) may run all the same: a paused or slow
// store executes it when it gets to it, and the lock is then held, for a whole
// TTL, by a token no lease was made for. The Locker knows that token, so
// it hands it to its cleaner, which gives the lock back with the ordinary
// compare-and-act release (the lock is deleted, or handed to the next
// waiter, only if that token holds it: another owner's lock is never
// touched). A fair waiter's queue entry is taken out first (the leave a
// store's policy passes with it, store.Host's TakeBack, which also says
// whether the lock was taken or granted for the token).
// Redlock hands over, per master, the masters whose rollback got no answer.
//
// The cleaner tries at once, then retries with a capped, jittered backoff
// until the store has answered twice, or until the lease TTL has passed
// since the failure (a lock set by then has expired by then, unless the
// store stalled longer than the TTL). Why twice: after a stall, a store
// served by one event loop (New's, on whose stalls this was measured)
// reads every connection with a request waiting in one turn of its event
// loop, but in
// no set order, so the cleaner's first answered try may run just before
// the stalled request in that turn. The second try is sent after the first
// answer, so it runs in a later turn, after the stalled request. A request
// held up in the network longer than that can still land later; its lock
// then expires after its TTL, as before. That order holds only where one
// event loop serves every connection: a store that runs each connection on
// a thread or process of its own (MariaDB, PostgreSQL) can answer both
// tries while the request still waits (behind a lock, or for its thread
// after a pause), so its give-back itself first ends the connection of
// the request (stalled.go of lockmw/mysql and lockmw/postgres).
//
// Only tokens for which no lease was made come here (the acquisition
// returned an error, or gave the lock back), so the cleaner never releases
// a live lease's lock; and only those whose request may have reached the
// store (store.LeftNothing): a request that found no free connection, or
// whose dial failed (the store down), took nothing, and is neither given
// back nor logged.
// A lock the cleaner gives up on is warned about once per outage.

// Cleanup retry parameters.
const (
	cleanMinBackoff = 10 * time.Millisecond
	cleanMaxBackoff = time.Second
	// cleanCloseWait bounds the last try Close gives pending cleanups (and
	// a cleanup handed over after Close), on top of the client's timeouts,
	// which bound each store call.
	cleanCloseWait = time.Second
	// cleanParallel is how many cleanups run at once; a store that batches
	// its requests shares round trips among them.
	cleanParallel = 64
)

// cleanup is one lock to give back.
type cleanup struct {
	key   string    // the lock's key (the user's), for logs
	until time.Time // give up then: the lock has expired
	// try makes one attempt; nil means done (the store answered).
	try func(ctx context.Context) error

	next     time.Time
	backoff  time.Duration
	answered bool // one try has been answered; one more follows
}

// cleaner runs a Locker's cleanups on one goroutine, started when there is
// work and gone when there is none.
type cleaner struct {
	logger *slog.Logger
	store  string // names the store in logs
	// closedBy reports that a give-back failed because the store's client
	// was closed (store.ClientCloser); nil when the store cannot tell.
	closedBy func(error) bool

	mu      sync.Mutex
	jobs    []*cleanup // waiting for their next try
	running bool       // the run goroutine is on
	closed  bool
	outage  bool // a give-back failed and none was answered since (see gaveUp)
	wake    chan struct{}
	closing chan struct{}
	wg      sync.WaitGroup
}

func newCleaner(logger *slog.Logger, store string, closedBy func(error) bool) *cleaner {
	return &cleaner{logger: logger, store: store, closedBy: closedBy, wake: make(chan struct{}, 1), closing: make(chan struct{})}
}

// clientClosed reports whether err says that the store's client was closed
// under the Locker: no later try of a give-back can succeed.
func (c *cleaner) clientClosed(err error) bool {
	return c.closedBy != nil && c.closedBy(err)
}

// add hands j over; its first try is due at once. After close, add makes
// one bounded try itself, so that nothing keeps running.
func (c *cleaner) add(j *cleanup) {
	if !c.offer(j) {
		ctx, cancel := context.WithTimeout(context.Background(), cleanCloseWait)
		defer cancel()
		if err := j.try(ctx); err != nil {
			c.gaveUp(j, err)
		}
	}
}

// offer hands j over, as add, but never blocks: after close it reports
// false and does nothing.
func (c *cleaner) offer(j *cleanup) bool {
	j.next, j.backoff = time.Now(), cleanMinBackoff
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	c.jobs = append(c.jobs, j)
	if !c.running {
		c.running = true
		c.wg.Add(1)
		go c.run()
	} else {
		signal(c.wake)
	}
	c.mu.Unlock()
	return true
}

// close gives every pending cleanup one last try (twice if it had not been
// answered yet, bounded by cleanCloseWait and the client's timeouts) and
// returns once the cleaner's goroutine has stopped.
func (c *cleaner) close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.closing)
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// idle reports whether no cleanup is pending and the goroutine is gone.
func (c *cleaner) idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.running
}

func (c *cleaner) run() {
	defer c.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		c.mu.Lock()
		if len(c.jobs) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		final := c.closed
		now := time.Now()
		var due []*cleanup
		rest := c.jobs[:0]
		wait := time.Hour
		for _, j := range c.jobs {
			if final || !j.next.After(now) {
				due = append(due, j)
			} else {
				rest = append(rest, j)
				wait = min(wait, j.next.Sub(now))
			}
		}
		clear(c.jobs[len(rest):])
		c.jobs = rest
		c.mu.Unlock()

		if len(due) == 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-c.wake:
			case <-c.closing:
			}
			continue
		}
		errs := c.tryAll(due, final)

		now = time.Now()
		var again []*cleanup
		for i, j := range due {
			err := errs[i]
			if err == nil {
				c.answered()
			}
			switch {
			case err == nil && !j.answered && !final:
				j.answered, j.next = true, now // once more, after this answer
				again = append(again, j)
			case err == nil:
			case final, !now.Before(j.until), errors.Is(err, ErrClosed), c.clientClosed(err):
				c.gaveUp(j, err)
			default:
				j.next = now.Add(j.backoff/2 + mathrand.N(j.backoff/2+1))
				j.backoff = min(2*j.backoff, cleanMaxBackoff)
				again = append(again, j)
			}
		}
		c.mu.Lock()
		c.jobs = append(c.jobs, again...)
		c.mu.Unlock()
	}
}

// tryAll tries the cleanups in due at once, at most cleanParallel at a
// time, and returns their errors.
func (c *cleaner) tryAll(due []*cleanup, final bool) []error {
	errs := make([]error, len(due))
	sem := make(chan struct{}, cleanParallel)
	var wg sync.WaitGroup
	for i, j := range due {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			var ctx context.Context
			var cancel context.CancelFunc
			if final {
				ctx, cancel = context.WithTimeout(context.Background(), cleanCloseWait)
			} else {
				ctx, cancel = context.WithDeadline(context.Background(), j.until)
			}
			defer cancel()
			errs[i] = j.try(ctx)
			if final && errs[i] == nil && !j.answered {
				// The last try too goes twice (see "Why twice" above):
				// Close often comes just after a stall.
				errs[i] = j.try(ctx)
			}
		}()
	}
	wg.Wait()
	return errs
}

// gaveUp logs a lock that could not be given back: a Warn for the first
// of an outage (until a try of the cleaner is answered again), Debug for
// the others, which an outage makes by the hundred and which say nothing
// new.
func (c *cleaner) gaveUp(j *cleanup, err error) {
	c.mu.Lock()
	first := !c.outage
	c.outage = true
	c.mu.Unlock()
	level, msg := slog.LevelDebug, "lockmw: could not give back a lock that a failed acquisition may have taken; it expires after its TTL"
	if first {
		level = slog.LevelWarn
		msg += " (the next ones are logged at Debug level until " + c.store + " answers the Locker's give-backs again)"
	}
	c.logger.Log(context.Background(), level, msg, slog.String("key", j.key), slog.String("store", c.store), slog.Any("error", err))
}

// answered notes that the store answered a give-back: the outage, if any, is
// over, and the next lock that cannot be given back is warned about.
func (c *cleaner) answered() {
	c.mu.Lock()
	c.outage = false
	c.mu.Unlock()
}

// signal wakes a waiter without blocking; a wake already pending is enough.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
