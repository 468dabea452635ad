package cachelock

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/fetch.lua
	fetchSource string
	//go:embed scripts/install.lua
	installSource string
	//go:embed scripts/abandon.lua
	abandonSource string
	//go:embed scripts/invalidate.lua
	invalidateSource string

	fetchScript      = redis.NewScript(fetchSource)
	installScript    = redis.NewScript(installSource)
	abandonScript    = redis.NewScript(abandonSource)
	invalidateScript = redis.NewScript(invalidateSource)
)

// Entry states, as fetch.lua reports and install.lua stores them.
const (
	replyHit   = "hit"
	replyNeg   = "neg"
	replyStale = "stale"
	replyFill  = "fill"
	replyWait  = "wait"

	stateValue    = "v"
	stateNegative = "n"
)

// fetchReply is fetch.lua's answer.
type fetchReply struct {
	kind  string
	value []byte
	wait  time.Duration // for replyWait: until the current fill lease ends
}

func ms(d time.Duration) int64 {
	m := d.Milliseconds()
	if m < 1 {
		m = 1
	}
	return m
}

func runFetch(ctx context.Context, rdb redis.Scripter, entry, token string, lease time.Duration, stale bool) (fetchReply, error) {
	staleArg := "0"
	if stale {
		staleArg = "1"
	}
	raw, err := fetchScript.Run(ctx, rdb, []string{entry}, token, ms(lease), staleArg).Slice()
	if err != nil {
		return fetchReply{}, err
	}
	if len(raw) == 0 {
		return fetchReply{}, fmt.Errorf("cachelock: unexpected fetch reply %v", raw)
	}
	kind, _ := raw[0].(string)
	r := fetchReply{kind: kind}
	switch kind {
	case replyHit, replyStale:
		if len(raw) < 2 {
			return fetchReply{}, fmt.Errorf("cachelock: unexpected fetch reply %v", raw)
		}
		s, _ := raw[1].(string)
		r.value = []byte(s)
	case replyWait:
		s, _ := raw[1].(string)
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fetchReply{}, fmt.Errorf("cachelock: unexpected fetch reply %v", raw)
		}
		r.wait = time.Duration(n) * time.Millisecond
	case replyNeg, replyFill:
	default:
		return fetchReply{}, fmt.Errorf("cachelock: unexpected fetch reply %v", raw)
	}
	return r, nil
}

// Results of install.lua.
const (
	installed = 1
	revoked   = 0
	expired   = -1
)

func runInstall(ctx context.Context, rdb redis.Scripter, entry, token, state string, value []byte, ttl time.Duration) (int, error) {
	return installScript.Run(ctx, rdb, []string{entry}, token, state, value, ms(ttl)).Int()
}

func runAbandon(ctx context.Context, rdb redis.Scripter, entry, token string) error {
	return abandonScript.Run(ctx, rdb, []string{entry}, token).Err()
}

func runInvalidate(ctx context.Context, rdb redis.Scripter, entry string, staleFor time.Duration) error {
	var staleMS int64
	if staleFor > 0 {
		staleMS = ms(staleFor)
	}
	return invalidateScript.Run(ctx, rdb, []string{entry}, staleMS).Err()
}
