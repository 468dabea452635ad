package lockmw

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file runs a Locker on a store behind the internal boundary
// (lockmw/internal/store), such as the etcd store of package lockmw/etcd.
// The store does one step on its own objects per call; leases, the
// watchdog, validity deadlines, nesting, waiting and telemetry are the
// Locker's, as for Redis.
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
//   - Renewal (store.Renew, sent at s, Owned): D = max(D, s + TTL − drift),
//     as for Redis (keepalive.go).
//   - Nested lease: as for Redis, it shares the outermost lease's token and
//     fence while that lease is live.
//
// No transfer or early hand-over exists here: a waiter's lease always comes
// from its own acquisition or queue entry, confirmed by the store.

// NewWithStore returns a Locker keeping its locks in in.Store, configured
// by opts. It is how this repository's store packages (lockmw/etcd,
// lockmw/zookeeper, lockmw/postgres, lockmw/mysql) make their Lockers:
// code outside this repository cannot call it, as it cannot name a
// store.Inside; use a store package's constructor instead. It does not
// close the store when it fails.
func NewWithStore(in store.Inside, opts ...Option) (*Locker, error) {
	return newStoreLocker(in.Store, opts)
}

// newStoreLocker returns a Locker keeping its locks in s. It does not
// close s when it fails, unless the Locker was made.
func newStoreLocker(s store.Store, opts []Option) (*Locker, error) {
	if isNil(s) {
		return nil, fmt.Errorf("%w: no store given", ErrNilClient)
	}
	b := &storeBackend{st: s}
	b.notifier, _ = s.(store.Notifier)
	b.queue, _ = s.(store.Queue)
	b.backoffMin, b.backoffMax = minBackoff, maxBackoff
	if bo, ok := s.(store.Backoff); ok {
		lo, hi := bo.Backoff()
		if lo <= 0 || hi < lo {
			return nil, fmt.Errorf("%w: the store's backoff range [%v, %v] is not 0 < min <= max", ErrInvalidOption, lo, hi)
		}
		b.backoffMin, b.backoffMax = lo, hi
	}
	name := "the store"
	if n, ok := s.(store.Named); ok && n.Name() != "" {
		name = n.Name()
	}
	l, err := newLocker(b, name, opts)
	if err != nil {
		return nil, err
	}
	if n, ok := s.(store.LossNotifier); ok {
		n.NotifyLoss(l.keeper.loseTokens)
	}
	if l.cfg.waitReplicas > 0 {
		_ = l.Close()
		return nil, fmt.Errorf("%w: WithWaitReplicas waits for Redis replicas; %s replicates on its own: drop the option", ErrInvalidOption, name)
	}
	if err := s.CheckTTL(l.cfg.ttl); err != nil {
		_ = l.Close()
		return nil, err
	}
	l.id = newToken()[:16]
	return l, nil
}

// storeBackend adapts a store.Store to the Locker's backend.
type storeBackend struct {
	st       store.Store
	notifier store.Notifier // nil: waiters back off
	queue    store.Queue    // nil: no Fair
	// backoffMin and backoffMax bound a waiter's backoff between attempts:
	// the store's (store.Backoff), else minBackoff and maxBackoff.
	backoffMin, backoffMax time.Duration

	gatesMu sync.Mutex
	gates   map[string]*gate // default-mode waiters by key (see enterGate)
}

// acquire is not used: a Locker on a store acquires through storeAttempt
// and waitQueue, which date the lease from the store's ValidFrom (it may
// precede the request's send time, which attempt would use instead).
func (b *storeBackend) acquire(context.Context, lockRef, string, time.Duration) (acquireReply, error) {
	return acquireReply{}, errStoreAcquire
}

// errStoreAcquire reports a store acquisition made through the generic
// backend path.
var errStoreAcquire = errors.New("lockmw: internal error: a store's locks are acquired through storeAttempt")

func (b *storeBackend) release(ctx context.Context, k lockRef, token string) (ownership, error) {
	o, err := b.st.Release(ctx, k.Key, token)
	return ownershipOfStore(o), err
}

func (b *storeBackend) renew(ctx context.Context, reqs []renewRequest) []renewResult {
	sreqs := make([]store.RenewRequest, len(reqs))
	for i, r := range reqs {
		sreqs[i] = store.RenewRequest{Key: r.keys.Key, Token: r.token, TTL: r.ttl}
	}
	sres := b.st.Renew(ctx, sreqs)
	res := make([]renewResult, len(reqs))
	for i := range res {
		if i >= len(sres) {
			res[i].err = errors.New("the store returned fewer renewal results than requests")
			continue
		}
		res[i] = renewResult{ownership: ownershipOfStore(sres[i].Ownership), err: sres[i].Err}
	}
	return res
}

// close is called by Locker.Close once its releases are done.
func (b *storeBackend) close() { _ = b.st.Close() }

func ownershipOfStore(o store.Ownership) ownership {
	switch o {
	case store.Owned:
		return owned
	case store.Taken:
		return taken
	}
	return missing
}

// storeErr is the error for a store call of an acquisition that failed:
// the context's when it ended, the store's own when it already matches a
// lockmw sentinel (an option the store cannot use), else ErrUnavailable.
func storeErr(opCtx context.Context, key string, err error) error {
	switch {
	case opCtx.Err() != nil:
		return ctxErr(opCtx, key)
	case errors.Is(err, ErrInvalidOption), errors.Is(err, ErrClosed), errors.Is(err, ErrInvalidKey):
		return err
	}
	return unavailable("acquire", key, err)
}
