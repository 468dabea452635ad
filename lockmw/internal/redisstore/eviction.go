package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is the check that Redis will not evict lock keys, which no
// expiry can make safe (the expiries are keyExpiry's, from the Locker's
// retention: lockmw's retention.go).

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
