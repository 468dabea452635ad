package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// The fire claims of cronlock's Scheduler (package internal/fireclaim),
// for a Scheduler given no Redis client: one row per Locker prefix and job
// in the claims table (Schema: Table+"_claims"), holding the highest fire
// claimed (unix ms), its instance and token, and the run last started.
// Rows persist, one per job.

var _ store.FireClaimer = (*pgStore)(nil)

// FireClaims returns the claims of a Locker with prefix.
func (s *pgStore) FireClaims(prefix string, ttl time.Duration) fireclaim.Claims {
	n := s.n
	return &claims{s: s, prefix: prefix, ttl: ttl,
		// One statement: the upsert raises the mark only above a lower
		// fire (the conflict's WHERE runs on the row as it is when the
		// statement locks it), and the CTE's read, from the statement's
		// snapshot, says what it was.
		claim: `WITH prev AS (
	SELECT fire, claim_by, token FROM ` + n.claims + ` WHERE prefix = $1 AND job = $2
), up AS (
	INSERT INTO ` + n.claims + ` AS c (prefix, job, fire, claim_by, token) VALUES ($1, $2, $3, $4, $5)
	ON CONFLICT (prefix, job) DO UPDATE SET fire = excluded.fire, claim_by = excluded.claim_by, token = excluded.token
	WHERE c.fire < excluded.fire
	RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM up), (SELECT fire FROM prev), (SELECT claim_by FROM prev)`,
		current: `SELECT fire, claim_by, token FROM ` + n.claims + ` WHERE prefix = $1 AND job = $2`,
		running: `INSERT INTO ` + n.claims + ` AS c (prefix, job, run_fire, run_by) VALUES ($1, $2, $3, $4)
ON CONFLICT (prefix, job) DO UPDATE SET run_fire = excluded.run_fire, run_by = excluded.run_by`,
		runner: `SELECT run_fire, run_by FROM ` + n.claims + ` WHERE prefix = $1 AND job = $2`,
	}
}

// claims keeps claim rows.
type claims struct {
	s      *pgStore
	prefix string
	ttl    time.Duration // bounds each call

	claim, current, running, runner string
}

// Claim raises the job's mark to at if it holds an earlier fire (or none),
// in one statement. A refused claim reports the row as it is (read again
// when the statement's snapshot was older than the row that refused it).
func (c *claims) Claim(ctx context.Context, job string, at time.Time, instance string) (fireclaim.Claim, error) {
	ctx, cancel := context.WithTimeout(ctx, c.ttl)
	defer cancel()
	token, err := fireclaim.NewToken()
	if err != nil {
		return fireclaim.Claim{}, err
	}
	ms := at.UnixMilli()
	var won bool
	var prevFire *int64
	var prevBy *string
	if err := c.s.pool.QueryRow(ctx, c.claim, c.prefix, job, ms, instance, token).Scan(&won, &prevFire, &prevBy); err != nil {
		return fireclaim.Claim{}, claimErr(job, at, classify(err))
	}
	out := fireclaim.Claim{Won: won}
	if prevFire != nil && *prevFire > 0 {
		out.Fire, out.By = time.UnixMilli(*prevFire), *prevBy
	}
	if won || (prevFire != nil && *prevFire >= ms) {
		return out, nil
	}
	// Refused by a claim committed after the statement's snapshot: say
	// which.
	var fire int64
	var by, tok string
	err = c.s.pool.QueryRow(ctx, c.current, c.prefix, job).Scan(&fire, &by, &tok)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fireclaim.Claim{}, claimErr(job, at, classify(err))
	}
	if fire > 0 {
		out.Fire, out.By = time.UnixMilli(fire), by
	}
	return out, nil
}

func claimErr(job string, at time.Time, err error) error {
	return fmt.Errorf("claim fire %s of %q: %w", at.Format(time.RFC3339Nano), job, err)
}

// Running records the run.
func (c *claims) Running(ctx context.Context, job string, at time.Time, instance string) error {
	ctx, cancel := context.WithTimeout(ctx, c.ttl)
	defer cancel()
	_, err := c.s.pool.Exec(ctx, c.running, c.prefix, job, at.UnixMilli(), instance)
	return classify(err)
}

// Runner reads the run record.
func (c *claims) Runner(ctx context.Context, job string) (time.Time, string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.ttl)
	defer cancel()
	var fire int64
	var by string
	err := c.s.pool.QueryRow(ctx, c.runner, c.prefix, job).Scan(&fire, &by)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return time.Time{}, "", nil
	case err != nil:
		return time.Time{}, "", classify(err)
	case by == "":
		return time.Time{}, "", nil
	}
	return time.UnixMilli(fire), by, nil
}
