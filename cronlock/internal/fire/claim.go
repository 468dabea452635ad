package fire

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed claim.lua
var claimSource string

var claimScript = redis.NewScript(claimSource)

// Key returns the Redis key of the claim record of job.
func Key(job string) string { return "cronlock:{" + job + "}:fired" }

// A Claim is the answer to one claim of a fire.
type Claim struct {
	// Won is true when this claim is the first of its fire: the caller
	// runs it. Otherwise the same or a later fire was claimed already.
	Won bool
	// Fire and By are the highest fire claimed before this claim and the
	// instance that claimed it; zero and "" when none was. When Won is
	// false they are the claim that refused this one.
	Fire time.Time
	By   string
}

// Store claims fires in one Redis.
type Store struct {
	rdb redis.UniversalClient
}

// NewStore returns a Store on rdb.
func NewStore(rdb redis.UniversalClient) *Store { return &Store{rdb: rdb} }

// Claim claims fire at of job for instance, in one atomic step: it wins
// when no claim of at or a later fire of job was made before. A reply lost
// and the command replayed by the client is recognized by its token, so
// the replay of a winning claim still wins.
func (s *Store) Claim(ctx context.Context, job string, at time.Time, instance string) (Claim, error) {
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return Claim{}, err
	}
	token := hex.EncodeToString(raw[:])
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

// Running records that instance runs fire at of job, for the logs of
// fires skipped while it runs.
func (s *Store) Running(ctx context.Context, job string, at time.Time, instance string) error {
	return s.rdb.HSet(ctx, Key(job), "run_fire", at.UnixMilli(), "run_by", instance).Err()
}

// Runner returns the fire and instance of the run recorded last by
// Running; "" when none was.
func (s *Store) Runner(ctx context.Context, job string) (time.Time, string, error) {
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

// maxMissed bounds the fires Missed lists.
const maxMissed = 1000

// Missed returns the fires between the previous claim of a won Claim and
// at, which no instance claimed: every instance missed or refused them.
// next is the job's schedule.
func Missed(c Claim, at time.Time, next func(time.Time) time.Time) []time.Time {
	if c.Fire.IsZero() {
		return nil
	}
	var missed []time.Time
	for t := next(c.Fire); !t.IsZero() && t.Before(at) && len(missed) < maxMissed; t = next(t) {
		missed = append(missed, t)
	}
	return missed
}
