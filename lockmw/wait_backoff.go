package lockmw

import (
	mathrand "math/rand/v2"
	"time"
)

// This file is how Acquire waits when the backend cannot notify of
// releases: by retrying with backoff.

// Without release notifications (a backend that has none), waiting retries
// with a jittered, capped exponential backoff, never sleeping past the
// holder's remaining TTL, so a released lock is taken within a few ms.
// These are tuned for Redis' round trip; a store behind the internal store
// boundary may choose its own range (store.Backoff: a database wants
// longer).
const (
	minBackoff = 500 * time.Microsecond
	maxBackoff = 8 * time.Millisecond
)

// waitBackoff waits by retrying with backoff.
func (l *Locker) waitBackoff(a *acquisition, wait bool) (*Lease, error) {
	var (
		timer   *time.Timer
		backoff = minBackoff
	)
	for {
		lease, holderTTL, err := l.attempt(a)
		if lease != nil || err != nil {
			return lease, err
		}
		busy := &NotAcquiredError{Key: a.key, RetryAfter: holderTTL}
		if !wait {
			return nil, busy
		}
		sleep := backoff/2 + mathrand.N(backoff/2+1)
		backoff = min(backoff*2, maxBackoff)
		if holderTTL > 0 {
			sleep = min(sleep, holderTTL)
		}
		if !a.giveUp.IsZero() {
			left := time.Until(a.giveUp)
			if left <= 0 {
				return nil, busy
			}
			sleep = min(sleep, left)
		}
		if timer == nil {
			timer = time.NewTimer(sleep)
			defer timer.Stop()
		} else {
			timer.Reset(sleep)
		}
		select {
		case <-timer.C:
		case <-a.opCtx.Done():
			return nil, ctxErr(a.opCtx, a.key)
		case <-l.closing:
			return nil, ErrClosed
		}
	}
}
