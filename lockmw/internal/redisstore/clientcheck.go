package redisstore

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file looks once, when a Locker is made, at how long its Redis
// client can take to report a stalled Redis, and warns when that is slow
// next to the lease TTL: go-redis' defaults (5s timeouts, 3 retries) make
// a stalled Redis surface after tens of seconds, and renewals fail as late,
// and its pipeline pool (PipelinePoolSize not -1) makes every acquisition
// on a paused Redis wait out two timeouts, while nothing else tells the
// user why. The warning's advice names every setting checked here, so a
// client that follows it passes.

// clientSettings are the settings of a client that the check reads.
type clientSettings struct {
	read, write time.Duration // ≤ 0: no timeout (go-redis keeps -1 as 0, -2 as -1)
	// retries: MaxRetries, plus MaxRedirects on a Cluster client, which
	// retries timeouts too (go-redis keeps MaxRetries -1 as 0).
	retries   int
	redirects int  // MaxRedirects, on a Cluster client
	cluster   bool // a Cluster client
	// ownPipelinePool: PipelinePoolSize ≥ 0, go-redis' default: pipelines
	// have a pool of their own (see the warning).
	ownPipelinePool bool
	pipelinePool    int // PipelinePoolSize as set (0: go-redis' default size)
}

// settingsOf returns c's settings; ok is false for a client whose options
// lockmw does not know.
func settingsOf(c redis.UniversalClient) (s clientSettings, ok bool) {
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		s.read, s.write, s.retries, s.pipelinePool = o.ReadTimeout, o.WriteTimeout, o.MaxRetries, o.PipelinePoolSize
	case *redis.ClusterClient:
		o := c.Options()
		s.read, s.write, s.pipelinePool = o.ReadTimeout, o.WriteTimeout, o.PipelinePoolSize
		s.cluster, s.redirects = true, max(o.MaxRedirects, 0)
		s.retries = max(o.MaxRetries, 0) + s.redirects
	default:
		return s, false
	}
	s.retries = max(s.retries, 0)
	s.ownPipelinePool = s.pipelinePool >= 0
	return s, true
}

// unbounded reports a client without a read or write timeout: go-redis
// then sets no deadline at all.
func (s clientSettings) unbounded() bool { return s.read <= 0 || s.write <= 0 }

// bound is how long one failed command can take: the read or write timeout
// (the longer) times one plus the retries.
func (s clientSettings) bound() time.Duration {
	return max(s.read, s.write) * time.Duration(1+s.retries)
}

// timeoutText prints a timeout as go-redis reads it: ≤ 0 is no timeout.
func timeoutText(d time.Duration) string {
	if d <= 0 {
		return "none (no timeout)"
	}
	return d.String()
}

// warnSlowClient logs one warning if a client of clients reports a stalled
// Redis late: it has no read or write timeout; or one failed command can
// take longer than a third of ttl (see bound), so an outage surfaces late,
// as ErrUnavailable and as failed renewals; or its pipelines have a pool of
// their own, so each acquisition on a paused Redis waits out two timeouts.
// It names the first such client's settings and what to set (and, under
// Redlock, which masters' clients are slow).
func warnSlowClient(logger *slog.Logger, clients []redis.UniversalClient, ttl time.Duration) {
	var slow []int
	var first clientSettings
	for i, c := range clients {
		s, ok := settingsOf(c)
		if !ok || (!s.unbounded() && s.bound() <= ttl/3 && !s.ownPipelinePool) {
			continue
		}
		if len(slow) == 0 {
			first = s
		}
		slow = append(slow, i)
	}
	if len(slow) == 0 {
		return
	}
	s := first
	var why []string
	switch {
	case s.unbounded():
		which := "read or write"
		if s.read > 0 {
			which = "write"
		} else if s.write > 0 {
			which = "read"
		}
		why = append(why, "it has no "+which+" timeout, so a stalled Redis may never be reported")
	case s.bound() > ttl/3:
		why = append(why, fmt.Sprintf("one failed command can take %v (its read or write timeout times one plus its retries), "+
			"longer than a third of the lease TTL, so a stalled Redis is reported late, as ErrUnavailable and as failed renewals", s.bound()))
	}
	if s.ownPipelinePool {
		why = append(why, "its pipelines have a connection pool of their own (PipelinePoolSize is not -1), "+
			"so on a paused Redis each of lockmw's pipelined calls (every acquisition, on one server) waits out two timeouts: "+
			"the new connection's on that pool, then another on the main pool")
	}
	// The advice: every setting checked above, with the timeout that passes
	// for this TTL.
	most := (ttl / 3 / time.Duration(1+s.redirects)).Truncate(time.Millisecond)
	advice := fmt.Sprintf("give it ReadTimeout and WriteTimeout of a few hundred milliseconds (at most %v for this TTL), MaxRetries: -1 and PipelinePoolSize: -1", most)
	if s.cluster {
		advice += fmt.Sprintf(" (on a Cluster client the %d MaxRedirects count as retries of a timeout)", s.redirects)
	}
	attrs := []any{
		slog.String("ReadTimeout", timeoutText(s.read)),
		slog.String("WriteTimeout", timeoutText(s.write)),
		slog.Int("retries", s.retries),
		slog.Int("PipelinePoolSize", s.pipelinePool),
		slog.Duration("ttl", ttl),
		slog.String("see", "README, Quickstart (the client settings and why); lockmw package documentation, section \"Redis: client settings\""),
	}
	if !s.unbounded() {
		attrs = append(attrs, slog.Duration("failed_command_up_to", s.bound()))
	}
	if len(clients) > 1 {
		attrs = append(attrs, slog.Any("masters", slow))
	}
	logger.Warn("lockmw: the Redis client reports a stalled Redis late: "+strings.Join(why, "; and ")+"; "+advice, attrs...)
}
