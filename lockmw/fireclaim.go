package lockmw

import (
	"time"

	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// FireClaimsOf tells this repository's cron adapters (cronlock's
// Scheduler, gocronlock) where l's fire claims are kept (see package
// internal/fireclaim): in l's own store when it can keep them (a Scheduler
// given no Redis client claims there), and under l's prefix with l's
// retention. Code outside this repository cannot call it, as it cannot
// name a fireclaim.Inside.
func FireClaimsOf(l *Locker, _ fireclaim.Inside) fireclaim.Home {
	h := fireclaim.Home{Prefix: l.cfg.prefix, Keep: l.cfg.retention}
	if h.Keep == 0 {
		h.Keep = DefaultRetention
	}
	h.Own = func() fireclaim.Claims { return l.fireClaims(h.Keep) }
	return h
}

// fireClaims returns the fire claims kept in the Locker's store, records
// kept for keep after a claim, or nil when it has no one store to keep
// them in.
func (l *Locker) fireClaims(keep time.Duration) fireclaim.Claims {
	switch b := l.backend.(type) {
	case *redisBackend:
		// The same record as a Scheduler given this client keeps.
		return fireclaim.NewRedis(b.client, l.cfg.prefix).WithKeep(keep)
	case *storeBackend:
		if c, ok := b.st.(store.FireClaimer); ok {
			return c.FireClaims(l.cfg.prefix, l.cfg.ttl)
		}
	}
	// Redlock: a record on one master alone would not survive that
	// master's loss as the lock does, and one on every master would need
	// a quorum protocol of its own.
	return nil
}
