package mysql

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"time"

	"github.com/lockmw/lockmw/internal/fireclaim"
)

// The fire claims of cronlock's Scheduler (package internal/fireclaim),
// for a Scheduler given no Redis client: one row per (prefix, job) in the
// table T_claims, holding the highest fire claimed (unix ms), who claimed
// it and the claim's token, the run last started, and keep_until, the time
// (UTC, on the database's clock) until which the row is kept. A claim
// reads the row and raises it with one conditional UPDATE that matches the
// fire and token it read (or inserts the first row, INSERT IGNORE): of
// several claims of one fire, only the first to commit matches; the others
// find the row changed, read it again and are refused. The token changes
// with every claim, so a row that went back to an old fire cannot be
// mistaken for the one read. A claim the client replayed after its reply
// was lost finds its own token in the row: it won.
//
// Expiry, as for claim records in Redis (internal/fireclaim, Redis,
// "Expiry"). Every write of a row, a won claim or a run recorded, sets
// keep_until to no earlier than UTC_TIMESTAMP(6) + keep, never earlier
// than it was; a won claim also to no earlier than UTC_TIMESTAMP(6) +
// twice the time between the fire it claims and the fire claimed before,
// so that a row outlives two of its job's intervals. keep is the Locker's
// retention (lockmw.WithRetention, DefaultRetention without it), at least
// fireclaim.MinKeep. A refused claim writes nothing. The cleanup of every
// Locker on the table (cleanLoop) deletes rows whose keep_until passed, so
// a job idle that long leaves nothing behind.
//
// Why no fire can then run twice: a claim of fire F wins only if the row
// holds no fire at or after F (or there is no row). The claim that won F
// raised the row to F at some time t on the database's clock and set
// keep_until to t + keep or later; the mark never falls, keep_until never
// moves back, and the cleanup deletes the row only when UTC_TIMESTAMP(6)
// is past keep_until, on the same clock (InnoDB's DELETE reads the row's
// latest version, so a claim that raised keep_until meanwhile keeps it).
// So a second claim of F (or of an earlier fire) wins only if it runs keep
// or more after the first winner; the claims of one fire by a job's
// instances come when their schedulers fire it, apart by the hosts' clock
// offsets and how late a scheduler fires (a stalled process), far below
// MinKeep. A claim that late, a database clock that jumps forward by more
// than the keep (a step, or a failover to a server whose clock is that far
// ahead), or a row deleted by hand, is the only way a fire runs twice.
// What a deleted row loses besides: the fire claimed before the next claim
// (no gap is counted across an idle spell longer than the keep) and the
// last run (Runner).

// FireClaims returns the claims of a Locker with prefix; their rows stay
// keep after a write.
func (s *sqlStore) FireClaims(prefix string, ttl, keep time.Duration) fireclaim.Claims {
	return &claims{s: s, prefix: prefix, ttl: ttl, keep: keep}
}

// cleanupClaims deletes claim rows kept long enough, in up to ten batches;
// it reports how many it deleted.
func (s *sqlStore) cleanupClaims() int64 {
	return s.deleteBatches("DELETE FROM " + s.n.claims + " WHERE keep_until < UTC_TIMESTAMP(6) LIMIT " + strconv.Itoa(cleanupBatch))
}

type claims struct {
	s      *sqlStore
	prefix string
	ttl    time.Duration // bounds each call
	keep   time.Duration // how long a row stays after a write (see Expiry)
}

// keepUntil is the SQL of a row's keep_until after a write that keeps it
// for d: never earlier than it was.
func keepUntil(d time.Duration) string {
	return "GREATEST(keep_until, UTC_TIMESTAMP(6) + INTERVAL " + micros(d) + " MICROSECOND)"
}

// maxClaimTries bounds the statements of one claim; each retry means
// another claim landed between the read and the write.
const maxClaimTries = 16

func (c *claims) where(job string) string {
	return " WHERE prefix = " + hexLit(c.prefix) + " AND job = " + hexLit(job)
}

func (c *claims) Claim(ctx context.Context, job string, at time.Time, instance string) (fireclaim.Claim, error) {
	ctx, cancel := context.WithTimeout(ctx, c.ttl)
	defer cancel()
	token, err := fireclaim.NewToken()
	if err != nil {
		return fireclaim.Claim{}, err
	}
	ms := at.UnixMilli()
	for range maxClaimTries {
		var fire int64
		var by, cur string
		err := c.s.db.QueryRowContext(ctx, "SELECT fire, claimed_by, token FROM "+c.s.n.claims+c.where(job)).Scan(&fire, &by, &cur)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			res, err := c.s.db.ExecContext(ctx, "INSERT IGNORE INTO "+c.s.n.claims+" (prefix, job, fire, claimed_by, token, keep_until) VALUES ("+
				hexLit(c.prefix)+", "+hexLit(job)+", "+strconv.FormatInt(ms, 10)+", "+hexLit(instance)+", "+hexLit(token)+
				", UTC_TIMESTAMP(6) + INTERVAL "+micros(c.keep)+" MICROSECOND)")
			if err != nil {
				return fireclaim.Claim{}, fireclaim.ClaimError(job, at, classify(err))
			}
			if n, _ := res.RowsAffected(); n == 1 {
				return fireclaim.Claim{Won: true}, nil
			}
			continue
		case err != nil:
			return fireclaim.Claim{}, fireclaim.ClaimError(job, at, classify(err))
		}
		prev := fireclaim.Claim{By: by}
		if cur != "" {
			prev.Fire = time.UnixMilli(fire)
		}
		if cur != "" && fire >= ms {
			prev.Won = cur == token
			return prev, nil
		}
		keep := c.keep
		if cur != "" {
			// Twice the time since the fire claimed before (see Expiry).
			keep = max(keep, 2*time.Duration(ms-fire)*time.Millisecond)
		}
		res, err := c.s.db.ExecContext(ctx, "UPDATE "+c.s.n.claims+" SET fire = "+strconv.FormatInt(ms, 10)+
			", claimed_by = "+hexLit(instance)+", token = "+hexLit(token)+", keep_until = "+keepUntil(keep)+c.where(job)+
			" AND fire = "+strconv.FormatInt(fire, 10)+" AND token = "+hexLit(cur))
		if err != nil {
			return fireclaim.Claim{}, fireclaim.ClaimError(job, at, classify(err))
		}
		if n, _ := res.RowsAffected(); n == 1 {
			prev.Won = true
			return prev, nil
		}
	}
	return fireclaim.Claim{}, fireclaim.ClaimError(job, at, errors.New("the record kept changing under the claim"))
}

// Running records the run, keeping the row as a claim does.
func (c *claims) Running(ctx context.Context, job string, at time.Time, instance string) error {
	ctx, cancel := context.WithTimeout(ctx, c.ttl)
	defer cancel()
	_, err := c.s.db.ExecContext(ctx, "INSERT INTO "+c.s.n.claims+" (prefix, job, fire, claimed_by, token, run_fire, run_by, keep_until) VALUES ("+
		hexLit(c.prefix)+", "+hexLit(job)+", 0, X'', X'', "+strconv.FormatInt(at.UnixMilli(), 10)+", "+hexLit(instance)+
		", UTC_TIMESTAMP(6) + INTERVAL "+micros(c.keep)+" MICROSECOND) ON DUPLICATE KEY UPDATE run_fire = VALUES(run_fire), run_by = VALUES(run_by), "+
		"keep_until = "+keepUntil(c.keep))
	return classify(err)
}

func (c *claims) Runner(ctx context.Context, job string) (time.Time, string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.ttl)
	defer cancel()
	var fire int64
	var by string
	err := c.s.db.QueryRowContext(ctx, "SELECT run_fire, run_by FROM "+c.s.n.claims+c.where(job)).Scan(&fire, &by)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, "", classify(err)
	}
	at, by := fireclaim.RunOf(fire, by) // no row: by is ""
	return at, by, nil
}
