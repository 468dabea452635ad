package lockmw

import (
	"fmt"
	"time"
)

// This file is how a lock leaves nothing behind in its store: the retention
// after which what an idle lock keeps beyond its holding (a fence counter, a
// queue) expires, and the one exception (WithPermanentFences). The check
// that the store will not evict a held lock, which no expiry can make safe,
// is the store's (lockmw/internal/redisstore, eviction.go).
//
// Safety (doc.go, "Redis keys"; argued in lockmw/internal/redisstore,
// safety.go, "Fence counters"): a counter that expired, or was lost, is
// seeded from the server clock in microseconds when it is next drawn from,
// so fences still rise.

const (
	// DefaultRetention is the retention (WithRetention) when WithRetention
	// is not given.
	DefaultRetention = 24 * time.Hour
	// MinRetention is the shortest retention accepted.
	MinRetention = time.Second
)

// WithRetention sets how long what a lock keeps in the store beyond its
// holding stays there after its last write (default DefaultRetention, at
// least MinRetention and the Locker's TTL, else the constructor fails with
// ErrInvalidOption): a lock released and idle for d leaves nothing behind.
// Fire claims of cronlock's Scheduler kept in the Locker's store
// (FireClaimsOf) are kept that long; the store packages say what else, if
// anything, they keep for it.
//
// On the stores of New and NewRedlock it is how long a lock's fence counter
// and fair queue stay after their last write: a lock released and idle for d
// leaves no key behind. Every acquisition, hand-over and queued waiter
// refreshes the expiry; keep d above the longest lease TTL in use
// (WithLeaseTTL), so that a queue does not expire under its waiters, who
// refresh it at least once per holder's TTL. A counter that expired (or was
// lost otherwise: evicted, deleted, or gone in a restart without
// persistence) restarts from the server's clock in microseconds, so fences
// keep rising as long as the clocks of the servers that hold the lock's
// counter (a promoted replica, the Redlock masters) never step back, nor
// differ from each other, by more than d minus one second (doc.go, "Redis
// keys"; the argument: lockmw/internal/redisstore, safety.go, "Fence
// counters"). All Lockers that share a prefix must use the same fence mode:
// with expiring counters, as here, or with WithPermanentFences.
func WithRetention(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < MinRetention {
			c.errs = append(c.errs, fmt.Errorf("%w: WithRetention(%v): the retention must be at least %v", ErrInvalidOption, d, MinRetention))
			return
		}
		c.retention = d
	})
}

// WithPermanentFences keeps the fence counters of the Redis stores (New,
// NewRedlock) forever, counting from 1, as lockmw did before counters
// expired: the one exception to "an idle lock leaves nothing behind" (its
// fair queue still expires after the retention). It is for users who cannot
// accept the clock assumption of expiring counters (see WithRetention); the
// price is one key per distinct lock name for ever, and a counter lost
// anyway (evicted, deleted by hand, a restart without persistence) restarts
// at 1, so fences then fall. Give such a Redis noeviction and persistence.
// All Lockers that share a prefix must use the same fence mode.
func WithPermanentFences() Option {
	return optionFunc(func(c *config) { c.permanentFences = true })
}

// checkRetention refuses a retention shorter than the Locker's TTL: a
// queued waiter refreshes the queue's expiry when it checks the lock, at
// least once per holder's TTL, and a queue that expired under its waiters
// would lose their order.
func (c *config) checkRetention() error {
	if c.retention != 0 && c.retention < c.ttl {
		return fmt.Errorf("%w: WithRetention(%v) is shorter than the lease TTL %v: keep it above the longest lease TTL", ErrInvalidOption, c.retention, c.ttl)
	}
	return nil
}

// retained is the Locker's retention: DefaultRetention unless
// WithRetention.
func (c *config) retained() time.Duration {
	if c.retention == 0 {
		return DefaultRetention
	}
	return c.retention
}
