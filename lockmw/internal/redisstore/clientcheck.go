package redisstore

import (
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file looks once, when a Locker is made, at how long its Redis
// client can take to fail one command, and warns when that is slow next
// to the lease TTL: go-redis' defaults (5s timeouts, 3 retries) make a
// stalled Redis surface after tens of seconds, and renewals fail as late,
// while nothing else tells the user why.

// commandBound returns how long one failed command can take on c: its
// read or write timeout (the longer), times one plus its retries (for a
// Cluster client, its redirections, which retry timeouts too). unbounded
// reports a client without a read or write timeout. ok is false for a
// client whose options lockmw does not know.
func commandBound(c redis.UniversalClient) (bound time.Duration, read, write time.Duration, retries int, unbounded, ok bool) {
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		read, write, retries = o.ReadTimeout, o.WriteTimeout, o.MaxRetries
	case *redis.ClusterClient:
		o := c.Options()
		read, write, retries = o.ReadTimeout, o.WriteTimeout, max(o.MaxRetries, 0)+max(o.MaxRedirects, 0)
	default:
		return 0, 0, 0, 0, false, false
	}
	retries = max(retries, 0)
	if read <= 0 || write <= 0 { // go-redis: no deadline at all
		return 0, read, write, retries, true, true
	}
	return max(read, write) * time.Duration(1+retries), read, write, retries, false, true
}

// warnSlowClient logs one warning if on a client of clients one failed
// command can take longer than a third of ttl (see commandBound): an
// outage then surfaces late, as ErrUnavailable and as failed renewals.
// It names the first such client's settings (and, under Redlock, which
// masters' clients are slow).
func warnSlowClient(logger *slog.Logger, clients []redis.UniversalClient, ttl time.Duration) {
	var slow []int
	var attrs []any
	msg := ""
	for i, c := range clients {
		bound, read, write, retries, unbounded, ok := commandBound(c)
		if !ok || (!unbounded && bound <= ttl/3) {
			continue
		}
		slow = append(slow, i)
		if len(slow) > 1 {
			continue
		}
		attrs = []any{slog.Duration("ReadTimeout", read), slog.Duration("WriteTimeout", write), slog.Int("retries", retries)}
		if unbounded {
			msg = "lockmw: the Redis client has no read or write timeout, so a stalled Redis may never be reported; " +
				"give it timeouts of a few hundred milliseconds and MaxRetries: -1"
		} else {
			msg = "lockmw: the Redis client can take longer than a third of the lease TTL to fail one command (its read or write timeout " +
				"times one plus its retries), so a stalled Redis is reported late, as ErrUnavailable and as failed renewals; " +
				"give it timeouts of a few hundred milliseconds and MaxRetries: -1"
			attrs = append(attrs, slog.Duration("failed_command_up_to", bound))
		}
	}
	if len(slow) == 0 {
		return
	}
	attrs = append(attrs, slog.Duration("ttl", ttl),
		slog.String("see", "README, Quickstart (the client settings and why); lockmw package documentation, section \"Redis: client settings\""))
	if len(clients) > 1 {
		attrs = append(attrs, slog.Any("masters", slow))
	}
	logger.Warn(msg, attrs...)
}
