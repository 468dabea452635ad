package lockmw

import (
	"time"

	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// The claims of cronlock's Scheduler in a Locker's own store (see package
// internal/fireclaim): a Scheduler given no Redis client claims fires
// there.
func init() {
	fireclaim.Of = func(locker any) fireclaim.Claims {
		l, _ := locker.(*Locker)
		if l == nil {
			return nil
		}
		return l.fireClaims()
	}
	fireclaim.Prefix = func(locker any) string {
		l, _ := locker.(*Locker)
		if l == nil {
			return ""
		}
		return l.cfg.prefix
	}
	fireclaim.Retention = func(locker any) time.Duration {
		l, _ := locker.(*Locker)
		if l == nil || l.cfg.retention == 0 {
			return DefaultRetention
		}
		return l.cfg.retention
	}
}

// fireClaims returns the fire claims kept in the Locker's store, or nil
// when it has no one store to keep them in.
func (l *Locker) fireClaims() fireclaim.Claims {
	switch b := l.backend.(type) {
	case *redisBackend:
		// The same record as a Scheduler given this client keeps.
		return fireclaim.NewRedis(b.client, l.cfg.prefix).WithKeep(fireclaim.KeepOf(l))
	case *storeBackend:
		if c, ok := b.st.(store.FireClaimer); ok {
			return c.FireClaims(b.prefix, l.cfg.ttl)
		}
	}
	// Redlock: a record on one master alone would not survive that
	// master's loss as the lock does, and one on every master would need
	// a quorum protocol of its own.
	return nil
}
