package lockmw

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is how the acquire script reaches Redis beyond one plain call:
// it is retried for a moment while the lock's Cluster slot is being moved
// between masters.

// While a Cluster slot migrates, a script that touches several keys of it
// is refused (TRYAGAIN, or ASK/MOVED once go-redis has used up its
// redirections) until all of them are on one master. The acquire script
// touches the lock and its fence counter, so an attempt on a migrating slot
// is retried, with a capped backoff, for up to a quarter of the lease TTL
// (at most reshardPatience): the lease keeps most of its validity. A
// resharding moves one slot's keys in milliseconds; a slot that stays
// half-migrated longer (a stalled or failed resharding) makes attempts fail
// with ErrUnavailable.
const (
	reshardPatience   = time.Second
	reshardBackoffMax = 16 * time.Millisecond
)

// runAcquire runs the acquire script for k and returns its reply, retrying
// while k's Cluster slot is being moved.
func (b *redisBackend) runAcquire(ctx context.Context, k lockKeys, token string, ttl time.Duration) ([]int64, error) {
	backoff := time.Millisecond
	giveUp := time.Now().Add(min(reshardPatience, ttl/4))
	for {
		vals, err := b.runAcquireOnce(ctx, k, token, ttl)
		if err == nil || !slotMoving(err) || time.Now().Add(backoff).After(giveUp) {
			return vals, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return vals, err
		}
		backoff = min(2*backoff, reshardBackoffMax)
	}
}

func (b *redisBackend) runAcquireOnce(ctx context.Context, k lockKeys, token string, ttl time.Duration) ([]int64, error) {
	return acquireScript.Run(ctx, b.client, []string{k.lock, k.fence}, token, millis(ttl)).Int64Slice()
}

// slotMoving reports whether err means a Cluster slot is being migrated
// and the command was not run.
func slotMoving(err error) bool {
	if redis.IsTryAgainError(err) {
		return true
	}
	if _, ok := redis.IsAskError(err); ok {
		return true
	}
	_, ok := redis.IsMovedError(err)
	return ok
}
