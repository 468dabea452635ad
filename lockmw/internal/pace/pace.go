// Package pace is how long a lockmw waiter waits before its next attempt,
// whichever way it waits (package lockmw's store policy, the Redis stores'
// own): a jittered, capped backoff after a lost race, and the poll that
// stands in for a lost notification when the holder's TTL runs out.
package pace

import (
	mathrand "math/rand/v2"
	"time"
)

// Jitter returns a pause of about *backoff (half to all of it) and doubles
// *backoff, up to hi.
func Jitter(backoff *time.Duration, hi time.Duration) time.Duration {
	d := *backoff/2 + mathrand.N(*backoff/2+1)
	*backoff = min(*backoff*2, hi)
	return d
}

// PollAfter is when a waiter that waits for the store's word (a
// notification, a turn, a wake, a grant) checks the lock itself, in case
// that word was lost: when the holder's TTL (or, not knowing it, the
// waiter's own, ttl) runs out, plus up to 1/8 of jitter so that waiters
// behind a crashed holder do not all come at once.
func PollAfter(holderTTL, ttl time.Duration) time.Duration {
	d := holderTTL
	if d <= 0 {
		d = ttl
	}
	d = max(d, 10*time.Millisecond)
	return d + mathrand.N(d/8+1)
}
