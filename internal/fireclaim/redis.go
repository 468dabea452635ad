package fireclaim

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed claim.lua
var claimSource string

var claimScript = redis.NewScript(claimSource)

// Key returns the Redis key of the claim record of job: one hash per job,
// whatever the Locker's prefix, so that every instance on one Redis shares
// it however it was given the client.
func Key(job string) string { return "cronlock:{" + job + "}:fired" }

// Redis keeps claim records in one Redis (or Cluster: a record's fields
// share the job's hash tag).
type Redis struct {
	rdb redis.UniversalClient
}

var _ Claims = (*Redis)(nil)

// NewRedis returns the Claims kept in the Redis of rdb.
func NewRedis(rdb redis.UniversalClient) *Redis { return &Redis{rdb: rdb} }

// Claim runs claim.lua on the job's record: the script compares the
// recorded fire with at and raises it in one step, as Redis runs a script
// without interleaving other commands.
func (s *Redis) Claim(ctx context.Context, job string, at time.Time, instance string) (Claim, error) {
	token, err := NewToken()
	if err != nil {
		return Claim{}, err
	}
	res, err := claimScript.Run(ctx, s.rdb, []string{Key(job)}, at.UnixMilli(), instance, token).Slice()
	if err != nil {
		return Claim{}, fmt.Errorf("claim fire %s of %q: %w", at.Format(time.RFC3339Nano), job, err)
	}
	if len(res) != 4 {
		return Claim{}, fmt.Errorf("claim fire of %q: %w: %v", job, errBadReply, res)
	}
	won, _ := res[0].(int64)
	prev, _ := res[1].(string)
	by, _ := res[2].(string)
	prevToken, _ := res[3].(string)
	c := Claim{Won: won == 1, By: by}
	if prev != "" {
		ms, err := strconv.ParseInt(prev, 10, 64)
		if err != nil {
			return Claim{}, fmt.Errorf("claim fire of %q: %w: %q", job, errBadReply, prev)
		}
		c.Fire = time.UnixMilli(ms)
	}
	if !c.Won && prevToken == token {
		// Our own claim, applied once and replayed by the client.
		c.Won = true
	}
	return c, nil
}

var errBadReply = errors.New("unexpected reply from the claim script")

// Running records the run in the job's record (fields run_fire, run_by).
func (s *Redis) Running(ctx context.Context, job string, at time.Time, instance string) error {
	return s.rdb.HSet(ctx, Key(job), "run_fire", at.UnixMilli(), "run_by", instance).Err()
}

// Runner reads the run Running recorded.
func (s *Redis) Runner(ctx context.Context, job string) (time.Time, string, error) {
	v, err := s.rdb.HMGet(ctx, Key(job), "run_fire", "run_by").Result()
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
