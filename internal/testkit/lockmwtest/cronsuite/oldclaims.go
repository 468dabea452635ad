package cronsuite

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/fireclaim"
)

// claimV0Source is claim.lua of the releases before the prefix scoping,
// unchanged: the script an instance still running such a release runs.
//
//go:embed claim_v0.lua
var claimV0Source string

var claimV0 = redis.NewScript(claimV0Source)

// OldClaims are the claims of a release before the prefix scoping, for
// tests of a rolling upgrade: one record per job, "cronlock:{JOB}:fired"
// (fireclaim.LegacyKey), whatever the Locker's prefix, raised by that
// release's script.
type OldClaims struct{ rdb redis.UniversalClient }

var _ fireclaim.Claims = OldClaims{}

// NewOldClaims returns the claims an older release keeps in rdb.
func NewOldClaims(rdb redis.UniversalClient) OldClaims { return OldClaims{rdb: rdb} }

// Claim is that release's Redis.Claim.
func (o OldClaims) Claim(ctx context.Context, job string, at time.Time, instance string) (fireclaim.Claim, error) {
	token, err := fireclaim.NewToken()
	if err != nil {
		return fireclaim.Claim{}, err
	}
	res, err := claimV0.Run(ctx, o.rdb, []string{fireclaim.LegacyKey(job)}, at.UnixMilli(), instance, token).Slice()
	if err != nil {
		return fireclaim.Claim{}, err
	}
	if len(res) != 4 {
		return fireclaim.Claim{}, fmt.Errorf("old claim script replied %v", res)
	}
	won, _ := res[0].(int64)
	prev, _ := res[1].(string)
	by, _ := res[2].(string)
	prevToken, _ := res[3].(string)
	c := fireclaim.Claim{Won: won == 1 || prevToken == token, By: by}
	if prev != "" {
		ms, err := strconv.ParseInt(prev, 10, 64)
		if err != nil {
			return fireclaim.Claim{}, err
		}
		c.Fire = time.UnixMilli(ms)
	}
	return c, nil
}

// Running is that release's Redis.Running.
func (o OldClaims) Running(ctx context.Context, job string, at time.Time, instance string) error {
	return o.rdb.HSet(ctx, fireclaim.LegacyKey(job), "run_fire", at.UnixMilli(), "run_by", instance).Err()
}

// Runner is that release's Redis.Runner.
func (o OldClaims) Runner(ctx context.Context, job string) (time.Time, string, error) {
	v, err := o.rdb.HMGet(ctx, fireclaim.LegacyKey(job), "run_fire", "run_by").Result()
	if err != nil {
		return time.Time{}, "", err
	}
	ms, _ := v[0].(string)
	by, _ := v[1].(string)
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || by == "" {
		return time.Time{}, "", nil
	}
	return time.UnixMilli(n), by, nil
}
