package lockmw

import (
	"context"
	"time"

	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/lockmw/internal/store"
	"github.com/redis/go-redis/v9"
)

// This file is the Redis store's side of the store boundary
// (lockmw/internal/store): what every store does, done on one Redis
// deployment. Its hand-overs and fair queues are the waitBackend of
// backend.go.

var (
	_ store.Store       = (*redisBackend)(nil)
	_ store.Named       = (*redisBackend)(nil)
	_ store.LeftNothing = (*redisBackend)(nil)
	_ store.FireClaimer = (*redisBackend)(nil)
	_ waitBackend       = (*redisBackend)(nil)
)

// Name names the deployment in messages: "Redis" or "Redis Cluster".
func (b *redisBackend) Name() string { return redisName(b.client) }

// CheckTTL accepts every TTL: Redis keeps a key for whole milliseconds,
// rounded up (millis), never shorter than asked.
func (b *redisBackend) CheckTTL(time.Duration) error { return nil }

// Acquire makes one acquisition attempt (runAcquire). The lease's validity
// counts from the moment before the request leaves (doc.go, "Safety":
// Acquisition). renewed changes nothing: each Redis lock expires on its
// own.
func (b *redisBackend) Acquire(ctx context.Context, k store.Key, token string, ttl time.Duration, _ bool) (store.Reply, error) {
	sentAt := time.Now()
	reply, err := b.runAcquire(ctx, newLockRef(k.Prefix, k.Name), token, ttl)
	reply.ValidFrom = sentAt
	return reply, err
}

// Release deletes the lock if token holds it, handing it to the first
// live fair waiter if one is queued, and notifies waiting Lockers.
func (b *redisBackend) Release(ctx context.Context, k store.Key, token string) (store.Ownership, error) {
	h, err := b.releaseHandoff(ctx, newLockRef(k.Prefix, k.Name), token, "", 0)
	return h.ownership, err
}

// LeftNothing reports that a failed request took nothing: Redis answered
// it with an error, or it never had a connection (mayHaveRun).
func (b *redisBackend) LeftNothing(err error) bool { return !mayHaveRun(err) }

// Close stops the store's subscriber.
func (b *redisBackend) Close() error {
	b.subs.close()
	return nil
}

// FireClaims keeps cronlock's fire claims on this deployment: the same
// record a Scheduler given this client keeps, kept for the Locker's
// retention after each claim (claimKeep).
func (b *redisBackend) FireClaims(prefix string, _ time.Duration) fireclaim.Claims {
	return fireclaim.NewRedis(b.client, prefix).WithKeep(b.claimKeep)
}

// lockKeyOf is the Redis key of k's lock (newLockKeys' first name).
func lockKeyOf(k store.Key) string { return k.Prefix + "{" + k.Name + "}" }

// redisName names a Redis deployment in messages.
func redisName(client redis.UniversalClient) string {
	if _, ok := client.(*redis.ClusterClient); ok {
		return "Redis Cluster"
	}
	return "Redis"
}
