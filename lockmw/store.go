package lockmw

import (
	"fmt"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file makes a Locker on a store behind the boundary of package
// lockmw/internal/store: every store is, New's and NewRedlock's
// included, and the stores of packages lockmw/etcd,
// lockmw/zookeeper, lockmw/postgres and lockmw/mysql. The store does one
// step on its own objects per call; leases, the watchdog, validity
// deadlines, nesting, waiting and telemetry are the Locker's.
//
// Safety on a store. The store's contract (see package store) is: when an
// acquisition reports the lock acquired with ValidFrom v, nothing but this
// Locker's own release of that token ends the holding before v + TTL on
// the store's clock, no earlier than v + TTL − drift on ours; and its
// fence is above every earlier holding's. The ways a lease becomes live:
//
//   - Acquisition (store.Acquire, or store.Queue.Enqueue when the entry is
//     first): the lease's deadline is D = v + TTL − drift, v being no later
//     than the request's send time or the send time of the last confirmed
//     renewal of what keeps the lock alive (newLease; a reply that comes
//     after D is given back, never returned). While the lease is live, the
//     store holds the lock for its token, so no other acquisition is
//     reported acquired: at most one lease is live. The fence is the
//     store's, above every earlier holder's by the contract.
//   - Renewal (store.Renew, sent at s, Owned): D = max(D, s + TTL − drift)
//     (keepalive.go).
//   - Nested lease: it shares the outermost lease's token and fence while
//     that lease is live (nest.go).
//   - Hand-overs, on a store that waits its own way (store.Waits: New's
//     store): a transfer, a fair grant, an early hand-over, made by the
//     store's policy through the Locker's store.Host (NewLease,
//     NewEarlyLease), each argued in lockmw/internal/redisstore (safety.go,
//     "How a lease becomes live"); on a store with a queue, a hand-over
//     its WaitTurn reports (wait.go, queueWay.handed). On every other
//     store a waiter's lease comes from its own acquisition or queue
//     entry, confirmed by the store; Redlock's policy only wakes a waiter,
//     whose lease then comes from its own attempt.

// NewWithStore returns a Locker keeping its locks in in.Store, configured
// by opts. It is how this repository's store packages (lockmw/etcd,
// lockmw/zookeeper, lockmw/postgres, lockmw/mysql) make their Lockers:
// code outside this repository cannot call it, as it cannot name a
// store.Inside; use a store package's constructor instead. It closes the
// store when it fails.
func NewWithStore(in store.Inside, opts ...Option) (*Locker, error) {
	return newStoreLocker(in.Store, opts)
}

// newStoreLocker returns a Locker keeping its locks in s. It closes s when
// it fails.
func newStoreLocker(s store.Store, opts []Option) (*Locker, error) {
	if isNil(s) {
		return nil, fmt.Errorf("%w: no store given", ErrNilClient)
	}
	l, err := newLocker(s, opts)
	if err != nil {
		return nil, err
	}
	if n, ok := s.(store.LossNotifier); ok {
		n.NotifyLoss(l.keeper.loseTokens)
	}
	if l.cfg.waitReplicas > 0 {
		_ = l.Close()
		return nil, fmt.Errorf("%w: WithWaitReplicas waits for Redis replicas; %s replicates on its own: drop the option", ErrInvalidOption, l.store)
	}
	if err := s.CheckTTL(l.cfg.ttl); err != nil {
		_ = l.Close()
		return nil, err
	}
	return l, nil
}
