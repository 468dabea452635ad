package lockmw

import (
	"context"
	"fmt"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/redisstore"
	"github.com/redis/go-redis/v9"
)

// This file is the one place package lockmw knows Redis: the constructors
// of a Locker on one Redis deployment (New) and on independent masters
// (NewRedlock), and their binding of the store to the Locker (redisConfig).
// How the Redis stores work, and why they are safe, is documented in
// package lockmw/internal/redisstore.

// New returns a Locker keeping its locks on one Redis deployment: a
// *redis.Client (standalone, or Sentinel failover from
// redis.NewFailoverClient) or a *redis.ClusterClient. All keys of one lock
// share a hash tag, so they live in one Cluster slot. On a Cluster a
// prefix with braces (WithPrefix) sets the hash tag of every lock (all
// locks then live in one slot), and New refuses one whose first braces are
// empty ("{}"), since no lock's keys would share a slot.
//
// The Locker does not own the client: close the client after the Locker.
// Redis I/O is bounded by the client's ReadTimeout/WriteTimeout (and by
// context deadlines when the client sets ContextTimeoutEnabled).
func New(client redis.UniversalClient, opts ...Option) (*Locker, error) {
	if isNil(client) {
		return nil, fmt.Errorf("%w: New needs a connected client such as redis.NewClient(&redis.Options{Addr: \"localhost:6379\"})", ErrNilClient)
	}
	b := redisstore.New(client)
	l, err := newLocker(b, opts)
	if err != nil {
		return nil, err
	}
	if err := b.Bind(l.redisConfig()); err != nil { // before l's first request
		_ = l.Close()
		return nil, err
	}
	return l, nil
}

// NewRedlock returns a Locker that keeps each lock on a majority of N
// independent Redis masters (the Redlock algorithm), so that the lock
// survives the loss of up to N/2 of them. N must be odd and at least 3, and
// every client must reach a different master: not replicas of each other,
// not Cluster nodes, nothing shared.
//
// An acquisition is sent to all masters in parallel and succeeds once
// N/2+1 grant it; its validity is TTL − elapsed − drift, counted from
// when the request was sent (see WithDriftFactor). A failed acquisition
// releases whatever it got at once, on all masters in parallel. Renewals
// and releases fan out the same way: a lease stays held while a majority
// confirms each renewal, and its context is cancelled with ErrLost when a
// majority no longer holds it or when its validity runs out without a
// majority confirming. A failed attempt reports ErrUnavailable when more
// than N/2 masters failed (so no majority could answer), else
// ErrNotAcquired: other owners hold the lock on enough masters.
//
// Lease.Fence still strictly increases per key across holders, also when
// successive holders win different majorities, as long as the masters keep
// their data (a master restarted without persistence forgets its fence
// counters); the argument is in package lockmw/internal/redisstore
// (redlock_safety.go, "Redlock fences"). Redlock's mutual exclusion
// assumes bounded clock drift, process pauses and network delays; a master restarted without
// persistence must stay down for at least the longest lease TTL before
// rejoining, or two holders can overlap (the restart-delay rule, section
// Redlock of the package documentation). Fence every write to shared state.
//
// An attempt asks the first N/2+1 masters, and the others as soon as one
// of those does not grant it or they have not all answered within a few
// milliseconds; the lease's first renewal (after TTL/3) takes the other
// masters that are free, so a lease held past it survives the loss of up
// to N/2 masters, and one released before it is held on a bare majority
// (the loss of one of its masters then ends it at its deadline). Waiting
// (Acquire) is on wakes, not polling: the first master keeps a wait queue
// of the Lockers' waiters, and a release there wakes the first, which
// then makes an attempt; a waiter whose wake is lost retries when the
// holder's TTL runs out. Fair gives ErrInvalidOption. The Locker does not
// own the clients: close them after the Locker. Each client's ReadTimeout
// bounds how long a paused master can delay its own queue, not the
// decisions the other masters make.
func NewRedlock(clients []redis.UniversalClient, opts ...Option) (*Locker, error) {
	if err := checkRedlockClients(clients); err != nil {
		return nil, err
	}
	b := redisstore.NewRedlock(clients)
	l, err := newLocker(b, opts)
	if err != nil {
		return nil, err
	}
	b.Bind(l.redisConfig()) // before l's first request
	return l, nil
}

// checkRedlockClients checks NewRedlock's clients: an odd number, at
// least 3, none nil, no two the same client or reaching the same address.
func checkRedlockClients(clients []redis.UniversalClient) error {
	n := len(clients)
	if n < 3 || n%2 == 0 {
		return fmt.Errorf("%w: NewRedlock got %d clients: give an odd number, at least 3, of clients to independent masters (3 tolerates 1 lost master, 5 tolerates 2)", ErrInvalidOption, n)
	}
	seen := make(map[redis.UniversalClient]int, n)
	addrs := make(map[string]int, n)
	for i, c := range clients {
		if isNil(c) {
			return fmt.Errorf("%w: NewRedlock: client %d of %d is nil: pass one connected client per master", ErrNilClient, i, n)
		}
		if j, dup := seen[c]; dup {
			return fmt.Errorf("%w: NewRedlock: clients %d and %d are the same client: each must reach a different master", ErrInvalidOption, j, i)
		}
		seen[c] = i
		if rc, ok := c.(*redis.Client); ok {
			addr := rc.Options().Addr
			if j, dup := addrs[addr]; dup {
				return fmt.Errorf("%w: NewRedlock: clients %d and %d both reach %s: each must reach a different master", ErrInvalidOption, j, i, addr)
			}
			addrs[addr] = i
		}
	}
	return nil
}

// redisConfig is what the Locker's Redis or Redlock store takes from it
// (Bind).
func (l *Locker) redisConfig() redisstore.Config {
	return redisstore.Config{
		Self:            l.id,
		Prefix:          l.cfg.prefix,
		Retention:       l.cfg.retained(),
		PermanentFences: l.cfg.permanentFences,
		TTL:             l.cfg.ttl,
		Logger:          l.logger,
		Closing:         l.closing,
		WaitReplicas:    l.cfg.waitReplicas,
		WaitTimeout:     l.cfg.waitTimeout,
		GiveBack: func(key string, until time.Time, try func(context.Context) error) bool {
			return l.cleaner.offer(&cleanup{key: key, until: until, try: try})
		},
	}
}
