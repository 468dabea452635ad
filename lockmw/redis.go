package lockmw

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The wire protocol: three compare-and-act scripts, loaded by SHA and resent
// in full when a restarted or new node answers NOSCRIPT.
var (
	//go:embed scripts/acquire.lua
	acquireSource string
	//go:embed scripts/release.lua
	releaseSource string
	//go:embed scripts/renew.lua
	renewSource string

	acquireScript = redis.NewScript(acquireSource)
	releaseScript = redis.NewScript(releaseSource)
	renewScript   = redis.NewScript(renewSource)
)

// redisBackend keeps locks on one Redis deployment: a standalone server, a
// Sentinel-managed primary, or a Cluster (every lock's keys share one slot).
type redisBackend struct {
	client redis.UniversalClient
	// waitReplicas and waitTimeout are WithWaitReplicas' arguments; 0
	// replicas: no WAIT.
	waitReplicas int
	waitTimeout  time.Duration
}

func (b *redisBackend) acquire(ctx context.Context, k lockKeys, token string, ttl time.Duration) (acquireReply, error) {
	vals, err := b.runAcquire(ctx, k, token, ttl)
	if err != nil {
		return acquireReply{}, err
	}
	if len(vals) != 2 {
		return acquireReply{}, fmt.Errorf("acquire script returned %d values, want 2", len(vals))
	}
	if vals[0] == 1 {
		return acquireReply{acquired: true, fence: uint64(vals[1])}, nil
	}
	var holder time.Duration
	if vals[1] > 0 {
		holder = time.Duration(vals[1]) * time.Millisecond
	}
	return acquireReply{holderTTL: holder}, nil
}

func (b *redisBackend) release(ctx context.Context, k lockKeys, token string) (ownership, error) {
	v, err := releaseScript.Run(ctx, b.client, []string{k.lock}, token).Int64()
	if err != nil {
		return 0, err
	}
	return ownershipOf(v), nil
}

func (b *redisBackend) renew(ctx context.Context, reqs []renewRequest) []renewResult {
	cmds := make([]*redis.Cmd, len(reqs))
	pipe := b.client.Pipeline()
	for i, r := range reqs {
		cmds[i] = renewScript.EvalSha(ctx, pipe, []string{r.keys.lock}, r.token, millis(r.ttl))
	}
	_, _ = pipe.Exec(ctx) // per-command errors are read below

	// A node that restarted or failed over has no scripts cached: resend
	// those in full, again in one round trip.
	var resend redis.Pipeliner
	for i, c := range cmds {
		if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			if resend == nil {
				resend = b.client.Pipeline()
			}
			r := reqs[i]
			cmds[i] = renewScript.Eval(ctx, resend, []string{r.keys.lock}, r.token, millis(r.ttl))
		}
	}
	if resend != nil {
		_, _ = resend.Exec(ctx)
	}

	results := make([]renewResult, len(reqs))
	for i, c := range cmds {
		v, err := c.Int64()
		if err != nil {
			results[i].err = err
			continue
		}
		results[i].ownership = ownershipOf(v)
	}
	return results
}

func ownershipOf(v int64) ownership {
	switch v {
	case 1:
		return owned
	case 0:
		return missing
	}
	return taken
}

// millis converts d to whole milliseconds for PX/PEXPIRE, rounding up so the
// key never expires before the validity lockmw computed from d.
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
