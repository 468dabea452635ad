package lockmw

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/lockmw/internal/store"
	"github.com/redis/go-redis/v9"
)

// This file is the Redis store's side of the store boundary
// (lockmw/internal/store): what every store does, done on one Redis
// deployment. Its hand-overs and fair queues are its store.Granter
// (redis.go).

var (
	_ store.Store       = (*redisStore)(nil)
	_ store.Named       = (*redisStore)(nil)
	_ store.LeftNothing = (*redisStore)(nil)
	_ store.FireClaimer = (*redisStore)(nil)
	_ store.Granter     = (*redisStore)(nil)
)

// Name names the deployment in messages: "Redis" or "Redis Cluster".
func (b *redisStore) Name() string { return redisName(b.client) }

// CheckTTL accepts every TTL: Redis keeps a key for whole milliseconds,
// rounded up (millis), never shorter than asked.
func (b *redisStore) CheckTTL(time.Duration) error { return nil }

// Acquire makes one acquisition attempt (runAcquire). The lease's validity
// counts from the moment before the request leaves (doc.go, "Safety":
// Acquisition). renewed changes nothing: each Redis lock expires on its
// own.
func (b *redisStore) Acquire(ctx context.Context, k store.Key, token string, ttl time.Duration, _ bool) (store.Reply, error) {
	sentAt := time.Now()
	reply, err := b.runAcquire(ctx, newLockRef(k.Prefix, k.Name), token, ttl)
	reply.ValidFrom = sentAt
	return reply, err
}

// Release deletes the lock if token holds it, handing it to the first
// live fair waiter if one is queued, and notifies waiting Lockers.
func (b *redisStore) Release(ctx context.Context, k store.Key, token string) (store.Ownership, error) {
	h, err := b.ReleaseHandoff(ctx, k, token, "", 0)
	return h.Ownership, err
}

// LeftNothing reports that a failed request took nothing: Redis answered
// it with an error, or it never had a connection (mayHaveRun).
func (b *redisStore) LeftNothing(err error) bool { return !mayHaveRun(err) }

// Close stops the store's subscriber.
func (b *redisStore) Close() error {
	b.subs.close()
	return nil
}

// FireClaims keeps cronlock's fire claims on this deployment: the same
// record a Scheduler given this client keeps, kept for the Locker's
// retention after each claim (claimKeep).
func (b *redisStore) FireClaims(prefix string, _ time.Duration) fireclaim.Claims {
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

// Watch subscribes to k's release notifications (grants false), or to
// the grants for this Locker's fair waiters (grants true; the channel
// lingers, see subscriptionLinger).
func (b *redisStore) Watch(ctx context.Context, k store.Key, grants bool) error {
	return b.subs.watch(ctx, b.channel(k, grants), grants)
}

func (b *redisStore) Unwatch(k store.Key, grants bool) { b.subs.unwatch(b.channel(k, grants)) }

// channel names k's release channel, or its grant channel for this Locker.
func (b *redisStore) channel(k store.Key, grants bool) string {
	if grants {
		return lockKeyOf(k) + ":g:" + b.self
	}
	return lockKeyOf(k) + ":n"
}

// route hands a message of the subscriber to the Locker's events: a
// release notification, or a grant ("<token> <fence> <reserved> <entry of
// the waiter next in line>", release.lua and grant.lua).
func (b *redisStore) route(channel, payload string) {
	if base, ok := strings.CutSuffix(channel, ":n"); ok {
		if k, ok := keyOfBase(b.prefix, base); ok {
			b.events.Released(k)
		}
		return
	}
	base, ok := strings.CutSuffix(channel, ":g:"+b.self)
	if !ok {
		return
	}
	k, ok := keyOfBase(b.prefix, base)
	if !ok {
		return
	}
	parts := strings.SplitN(payload, " ", 4)
	var g store.Grant
	var err error
	if len(parts) == 4 {
		g.Token, g.Next = parts[0], parts[3]
		g.Fence, err = strconv.ParseUint(parts[1], 10, 64)
		if err == nil {
			g.Reserved, err = strconv.ParseUint(parts[2], 10, 64)
		}
	}
	b.events.Granted(k, g, len(parts) == 4 && err == nil)
}

// mayHaveRun reports whether a lock-taking request that failed with err
// may run in Redis all the same: it failed without Redis' answer. An error
// reply from Redis (MOVED, TRYAGAIN, READONLY, OOM, ...) means it did not
// run, and a closed client sent nothing. Nor did a request that never had
// a connection: a failed dial or no connection free in the pool (lockmw's
// writes are never re-sent by the client, so the error is that of the only
// attempt, see noretry.go).
// ErrNotReplicated means the lock was taken, and the rollback may not have
// reached Redis.
func mayHaveRun(err error) bool {
	if errors.Is(err, ErrNotReplicated) {
		return true
	}
	var reply redis.Error
	if errors.As(err, &reply) || errors.Is(err, redis.ErrClosed) || errors.Is(err, ErrClosed) {
		return false
	}
	return !neverSent(err)
}

// neverSent reports whether err says that the request found no connection
// to send it on: no connection free in the pool, or a failed dial (Redis
// down: the connection was refused or could not be made). go-redis (v9)
// also fails every command of a pool at once with the pool's last dial
// error, without dialing, once as many dials as the pool has connections
// have failed, until a probe of its own (once a second) gets through: that
// is a failed dial too, and nothing was sent either.
func neverSent(err error) bool {
	return dialFailed(err) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted)
}

// dialFailed reports whether err is a failed dial, or go-redis replaying
// one (see neverSent).
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
