package lockmw

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is how a lock leaves nothing behind in Redis: the retention
// after which an idle lock's fence counter and queue expire (the lock key
// has its lease's TTL), the one exception (WithPermanentFences), and the
// check that Redis will not evict lock keys, which no expiry can make
// safe.
//
// Safety (doc.go, "Redis: how a lease becomes live", Fence counters): a
// counter that expired, or was lost, is seeded from the server clock in
// microseconds when it is next drawn from (scripts/fence.lua), so fences
// still rise.

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
// On the Redis stores (New, NewRedlock) it is how long a lock's fence
// counter and fair queue stay after their last write: a lock released and
// idle for d leaves no key behind. Every acquisition, hand-over and queued
// waiter refreshes the expiry; keep d above the longest lease TTL in use
// (WithLeaseTTL), so that a queue does not expire under its waiters, who
// refresh it at least once per holder's TTL. A counter that expired (or
// was lost otherwise: evicted, deleted, or gone in a restart without
// persistence) restarts from the Redis server's clock in microseconds, so
// fences keep rising as long as the clocks of the servers that hold the
// lock's counter (a promoted replica, the Redlock masters) never step back,
// nor differ from each other, by more than d minus one second (the package
// documentation, "Redis: how a lease becomes live", Fence counters). All
// Lockers that share a prefix must use the same fence mode: with expiring
// counters, as here, or with WithPermanentFences.
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

// keyExpiry is what the scripts are told about expiry: counter is the
// fence counter's expiry in milliseconds ("" when counters never expire:
// fence.lua's fence_keep), queue the fair queue's.
type keyExpiry struct {
	counter string
	queue   string
}

// expiry is the Locker's keyExpiry.
func (c *config) expiry() keyExpiry {
	r := c.retention
	if r == 0 {
		r = DefaultRetention
	}
	ms := strconv.FormatInt(millis(r), 10)
	if c.permanentFences {
		return keyExpiry{queue: ms}
	}
	return keyExpiry{counter: ms, queue: ms}
}

// evictionCheckTimeout bounds the check of the servers' eviction policy,
// which starts evictionCheckDelay after New: by then a Locker's first
// acquisitions have their connections, so the check does not dial beside
// them, and a Locker closed sooner is not checked.
const (
	evictionCheckTimeout = 5 * time.Second
	evictionCheckDelay   = time.Second
)

// warnEviction reads maxmemory-policy on every node that may hold lock
// keys (every Cluster master, every Redlock master), in the background, and
// logs one warning naming the nodes whose policy lets Redis evict keys.
// Eviction can drop a held lock's key, which no client can make safe (and,
// with WithPermanentFences, a counter: fences then fall). A node that
// refuses CONFIG GET (managed services often do) is skipped, at Debug
// level. It returns at once; the check starts evictionCheckDelay later,
// unless closing is closed first.
func warnEviction(logger *slog.Logger, clients []redis.UniversalClient, closing <-chan struct{}) {
	go func() {
		t := time.NewTimer(evictionCheckDelay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-closing:
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), evictionCheckTimeout)
		defer cancel()
		var (
			mu      sync.Mutex
			checked int
			evict   []string
			unknown []string
		)
		check := func(ctx context.Context, c redis.UniversalClient, name string) {
			policy, err := evictionPolicy(ctx, c)
			mu.Lock()
			defer mu.Unlock()
			checked++
			switch {
			case err != nil:
				unknown = append(unknown, fmt.Sprintf("%s (%v)", name, err))
			case policy != "noeviction":
				evict = append(evict, name+" maxmemory-policy "+policy)
			}
		}
		for i, c := range clients {
			name := "Redis"
			if len(clients) > 1 {
				name = fmt.Sprintf("master %d", i)
			}
			if cc, ok := c.(*redis.ClusterClient); ok {
				_ = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
					check(ctx, m, "Cluster master "+m.Options().Addr)
					return nil
				})
				continue
			}
			if rc, ok := c.(*redis.Client); ok {
				name += " " + rc.Options().Addr
			}
			check(ctx, c, name)
		}
		if len(unknown) > 0 {
			slices.Sort(unknown)
			logger.Debug("lockmw: could not read maxmemory-policy (CONFIG GET); check that Redis does not evict lock keys",
				slog.String("nodes", strings.Join(unknown, "; ")))
		}
		if len(evict) > 0 {
			slices.Sort(evict)
			logger.Warn("lockmw: Redis may evict lock keys: an evicted lock can be taken by a second holder while the first still works. "+
				"Give locks a Redis with maxmemory-policy noeviction, or one of their own (package documentation, Redis keys)",
				slog.String("nodes", strings.Join(evict, "; ")))
		}
		logger.Debug("lockmw: checked maxmemory-policy", slog.Int("nodes", checked), slog.Int("evicting", len(evict)))
	}()
}

// evictionPolicy reads c's maxmemory-policy.
func evictionPolicy(ctx context.Context, c redis.Cmdable) (string, error) {
	cfg, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return "", err
	}
	p, ok := cfg["maxmemory-policy"]
	if !ok {
		return "", fmt.Errorf("CONFIG GET maxmemory-policy returned no value")
	}
	return p, nil
}
