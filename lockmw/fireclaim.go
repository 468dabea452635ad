package lockmw

import (
	"time"

	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// FireClaimsOf tells this repository's cron adapters (cronlock's
// Scheduler, gocronlock) where l's fire claims are kept (see package
// internal/fireclaim): in l's own store when it can keep them (a Scheduler
// given no client of its own claims there), and under l's prefix with l's
// retention. Code outside this repository cannot call it, as it cannot
// name a fireclaim.Inside.
func FireClaimsOf(l *Locker, _ fireclaim.Inside) fireclaim.Home {
	h := fireclaim.Home{Prefix: l.cfg.prefix, Keep: l.cfg.claimKeep()}
	h.Own = l.fireClaims
	return h
}

// claimKeep is how long a fire claim record is kept after a claim: the
// Locker's retention.
func (c *config) claimKeep() time.Duration { return c.retained() }

// fireClaims returns the fire claims kept in the Locker's store, or nil
// when it has no one store to keep them in. (Redlock keeps none: a record
// on one master alone would not survive that master's loss as the lock
// does, and one on every master would need a quorum protocol of its own.)
func (l *Locker) fireClaims() fireclaim.Claims {
	if c, ok := l.st.(store.FireClaimer); ok {
		return c.FireClaims(l.cfg.prefix, l.cfg.ttl, max(l.cfg.claimKeep(), fireclaim.MinKeep))
	}
	return nil
}
