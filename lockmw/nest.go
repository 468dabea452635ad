package lockmw

import (
	"context"
	"time"
)

// This file is reentrancy: a lease nested in one that this Locker holds
// on the same key, found on the chain of lease contexts.
//
// Safety (doc.go, "Safety: how a lease becomes live": Nested lease): a
// nested lease shares the outermost lease's token and fence, is made only
// while that lease is live, and ends when it ends.

// nestIn returns a lease nested in the lock that a lease on ctx's chain
// holds for l on key, or nil when no such lease is live: a lease whose
// context outlived it (context.WithoutCancel keeps the values) does not
// nest, and the caller then acquires as anyone else would. Nor does one
// past its deadline whose timer has not fired yet: Valid ends it as lost.
func (l *Locker) nestIn(ctx context.Context, key string) *Lease {
	s, _ := ctx.Value(leaseContextKey{}).(*Lease)
	for ; s != nil; s = s.enclosing {
		if s.locker == l && s.key == key && s.Valid() {
			if n := l.nest(ctx, s); n != nil {
				return n
			}
		}
	}
	return nil
}

// nest returns a lease nested in the lock of found (or of its outermost
// lease), with its context made under ctx, or nil if the outermost lease
// has ended meanwhile. The nested lease ends when the outermost one does
// (see Lease.cancel), whatever ctx is.
func (l *Locker) nest(ctx context.Context, found *Lease) *Lease {
	outer := found
	if found.outer != nil {
		outer = found.outer
	}
	s := &Lease{
		leaseRecord: leaseRecord{name: outer.name, fence: outer.fence, acquiredAt: time.Now()},
		locker:      l,
		key:         outer.key,
		lock:        outer.lock,
		token:       outer.token,
		ttl:         outer.ttl,
		watchdog:    outer.watchdog,
		outer:       outer,
	}
	s.keep.index = -1
	s.bindContext(ctx)
	if !outer.adopt(s) {
		s.stop(nil) // never handed out
		return nil
	}
	return s
}

// leaseContextKey marks a lease's context: its value is the innermost lease
// on the context chain.
type leaseContextKey struct{}

// bindContext creates s's context under parent, linked to the leases
// already on parent's chain.
func (s *Lease) bindContext(parent context.Context) {
	s.enclosing, _ = parent.Value(leaseContextKey{}).(*Lease)
	s.ctx, s.stop = context.WithCancelCause(context.WithValue(parent, leaseContextKey{}, s))
}
