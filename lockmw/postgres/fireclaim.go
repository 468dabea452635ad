package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// The fire claims of cronlock's Scheduler (package internal/fireclaim),
// for a Scheduler given no Redis client: one row per Locker prefix and job
// in the claims table (Schema: Table+"_claims"), holding the highest fire
// claimed (unix ms), its instance and token, the run last started, and
// keep_until, the time (on the database's clock) until which the row is
// kept. A prefix or job name that text cannot hold (NUL, bytes that are
// not UTF-8) has its row under the hex name of the pair (claimRow).
//
// Expiry, as for claim records in Redis (internal/fireclaim, Redis,
// "Expiry"). Every write of a row, a won claim or a run recorded, sets
// keep_until to no earlier than clock_timestamp() + keep, never earlier
// than it was; a won claim also to no earlier than clock_timestamp() +
// twice the time between the fire it claims and the fire claimed before,
// so that a row outlives two of its job's intervals. keep is the Locker's
// retention (lockmw.WithRetention, DefaultRetention without it), at least
// fireclaim.MinKeep. A refused claim writes nothing. The sweeper of every
// Locker on the table (sweepOnce) deletes rows whose keep_until passed, so
// a job idle that long leaves nothing behind.
//
// Why no fire can then run twice: a claim of fire F wins only if the row
// holds no fire at or after F (or there is no row). The claim that won F
// raised the row to F at some time t on the database's clock and set
// keep_until to t + keep or later; the mark never falls, keep_until never
// moves back, and the sweep deletes the row only when clock_timestamp() is
// past keep_until, on the same clock. So a second claim of F (or of an
// earlier fire) wins only if it runs keep or more after the first winner;
// the claims of one fire by a job's instances come when their schedulers
// fire it, apart by the hosts' clock offsets and how late a scheduler
// fires (a stalled process), far below MinKeep. A claim that late, a
// database clock that jumps forward by more than the keep (a step, or a
// failover to a server whose clock is that far ahead), or a row deleted by
// hand, is the only way a fire runs twice. What a deleted row loses
// besides: the fire claimed before the next claim (no gap is counted
// across an idle spell longer than the keep) and the last run (Runner).

var _ store.FireClaimer = (*pgStore)(nil)

// sweepClaims deletes claim rows kept long enough, at most 1000 at once.
// The outer condition is checked again on the row as it is when the
// DELETE locks it: a claim that raised keep_until meanwhile keeps its row.
func sweepClaims(n names) string {
	return `DELETE FROM ` + n.claims + ` WHERE ctid = ANY (ARRAY (
	SELECT ctid FROM ` + n.claims + ` WHERE keep_until < clock_timestamp() LIMIT 1000))
	AND keep_until < clock_timestamp()`
}

// FireClaims returns the claims of a Locker with prefix; their rows stay
// keep after a write.
func (s *pgStore) FireClaims(prefix string, ttl, keep time.Duration) fireclaim.Claims {
	n := s.n
	// $n::bigint milliseconds from now, by the database's clock.
	after := func(n string) string { return `clock_timestamp() + ` + n + `::bigint * interval '1 millisecond'` }
	return &claims{s: s, prefix: prefix, ttl: ttl, keep: keep,
		// One statement: the upsert raises the mark only above a lower
		// fire (the conflict's WHERE runs on the row as it is when the
		// statement locks it), and the CTE's read, from the statement's
		// snapshot, says what it was. keep_until: see Expiry above.
		claim: `WITH prev AS (
	SELECT fire, claim_by, token FROM ` + n.claims + ` WHERE prefix = $1 AND job = $2
), up AS (
	INSERT INTO ` + n.claims + ` AS c (prefix, job, fire, claim_by, token, keep_until) VALUES ($1, $2, $3, $4, $5, ` + after("$6") + `)
	ON CONFLICT (prefix, job) DO UPDATE SET fire = excluded.fire, claim_by = excluded.claim_by, token = excluded.token,
		keep_until = greatest(c.keep_until, excluded.keep_until,
			CASE WHEN c.fire > 0 THEN ` + after("2 * (excluded.fire - c.fire)") + ` END)
	WHERE c.fire < excluded.fire
	RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM up), (SELECT fire FROM prev), (SELECT claim_by FROM prev)`,
		current: `SELECT fire, claim_by, token FROM ` + n.claims + ` WHERE prefix = $1 AND job = $2`,
		running: `INSERT INTO ` + n.claims + ` AS c (prefix, job, run_fire, run_by, keep_until) VALUES ($1, $2, $3, $4, ` + after("$5") + `)
ON CONFLICT (prefix, job) DO UPDATE SET run_fire = excluded.run_fire, run_by = excluded.run_by,
	keep_until = greatest(c.keep_until, excluded.keep_until)`,
		runner: `SELECT run_fire, run_by FROM ` + n.claims + ` WHERE prefix = $1 AND job = $2`,
	}
}

// claims keeps claim rows.
type claims struct {
	s      *pgStore
	prefix string
	ttl    time.Duration // bounds each call
	keep   time.Duration // how long a row stays after a write (see Expiry)

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
	prefix, row := claimRow(c.prefix, job)
	var won bool
	var prevFire *int64
	var prevBy *string
	if err := c.s.pool.QueryRow(ctx, c.claim, prefix, row, ms, instance, token, c.keep.Milliseconds()).Scan(&won, &prevFire, &prevBy); err != nil {
		return fireclaim.Claim{}, fireclaim.ClaimError(job, at, classify(err))
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
	err = c.s.pool.QueryRow(ctx, c.current, prefix, row).Scan(&fire, &by, &tok)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fireclaim.Claim{}, fireclaim.ClaimError(job, at, classify(err))
	}
	if fire > 0 {
		out.Fire, out.By = time.UnixMilli(fire), by
	}
	return out, nil
}

// Running records the run, keeping the row as a claim does.
func (c *claims) Running(ctx context.Context, job string, at time.Time, instance string) error {
	ctx, cancel := context.WithTimeout(ctx, c.ttl)
	defer cancel()
	prefix, row := claimRow(c.prefix, job)
	_, err := c.s.pool.Exec(ctx, c.running, prefix, row, at.UnixMilli(), instance, c.keep.Milliseconds())
	return classify(err)
}

// Runner reads the run record.
func (c *claims) Runner(ctx context.Context, job string) (time.Time, string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.ttl)
	defer cancel()
	var fire int64
	var by string
	prefix, row := claimRow(c.prefix, job)
	err := c.s.pool.QueryRow(ctx, c.runner, prefix, row).Scan(&fire, &by)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, "", classify(err)
	}
	at, by := fireclaim.RunOf(fire, by) // no row: by is ""
	return at, by, nil
}
