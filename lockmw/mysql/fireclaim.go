package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lockmw/lockmw/internal/fireclaim"
)

// The fire claims of cronlock's Scheduler (package internal/fireclaim),
// for a Scheduler given no Redis client: one row per (prefix, job) in the
// table T_claims, holding the highest fire claimed (unix ms), who claimed
// it and the claim's token, and the run last started. A claim reads the
// row and raises it with one conditional UPDATE that matches the fire and
// token it read (or inserts the first row, INSERT IGNORE): of several
// claims of one fire, only the first to commit matches; the others find
// the row changed, read it again and are refused. The token changes with
// every claim, so a row that went back to an old fire cannot be mistaken
// for the one read. A claim the client replayed after its reply was lost
// finds its own token in the row: it won.

// FireClaims returns the claims of a Locker with prefix.
func (s *sqlStore) FireClaims(prefix string, ttl time.Duration) fireclaim.Claims {
	return &claims{s: s, prefix: prefix, ttl: ttl}
}

type claims struct {
	s      *sqlStore
	prefix string
	ttl    time.Duration // bounds each call
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
			res, err := c.s.db.ExecContext(ctx, "INSERT IGNORE INTO "+c.s.n.claims+" (prefix, job, fire, claimed_by, token) VALUES ("+
				hexLit(c.prefix)+", "+hexLit(job)+", "+strconv.FormatInt(ms, 10)+", "+hexLit(instance)+", "+hexLit(token)+")")
			if err != nil {
				return fireclaim.Claim{}, claimErr(job, at, classify(err))
			}
			if n, _ := res.RowsAffected(); n == 1 {
				return fireclaim.Claim{Won: true}, nil
			}
			continue
		case err != nil:
			return fireclaim.Claim{}, claimErr(job, at, classify(err))
		}
		prev := fireclaim.Claim{By: by}
		if cur != "" {
			prev.Fire = time.UnixMilli(fire)
		}
		if cur != "" && fire >= ms {
			prev.Won = cur == token
			return prev, nil
		}
		res, err := c.s.db.ExecContext(ctx, "UPDATE "+c.s.n.claims+" SET fire = "+strconv.FormatInt(ms, 10)+
			", claimed_by = "+hexLit(instance)+", token = "+hexLit(token)+c.where(job)+
			" AND fire = "+strconv.FormatInt(fire, 10)+" AND token = "+hexLit(cur))
		if err != nil {
			return fireclaim.Claim{}, claimErr(job, at, classify(err))
		}
		if n, _ := res.RowsAffected(); n == 1 {
			prev.Won = true
			return prev, nil
		}
	}
	return fireclaim.Claim{}, claimErr(job, at, errors.New("the record kept changing under the claim"))
}

func claimErr(job string, at time.Time, err error) error {
	return fmt.Errorf("claim fire %s of %q: %w", at.Format(time.RFC3339Nano), job, err)
}

func (c *claims) Running(ctx context.Context, job string, at time.Time, instance string) error {
	ctx, cancel := context.WithTimeout(ctx, c.ttl)
	defer cancel()
	_, err := c.s.db.ExecContext(ctx, "INSERT INTO "+c.s.n.claims+" (prefix, job, fire, claimed_by, token, run_fire, run_by) VALUES ("+
		hexLit(c.prefix)+", "+hexLit(job)+", 0, X'', X'', "+strconv.FormatInt(at.UnixMilli(), 10)+", "+hexLit(instance)+
		") ON DUPLICATE KEY UPDATE run_fire = VALUES(run_fire), run_by = VALUES(run_by)")
	return classify(err)
}

func (c *claims) Runner(ctx context.Context, job string) (time.Time, string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.ttl)
	defer cancel()
	var fire int64
	var by string
	err := c.s.db.QueryRowContext(ctx, "SELECT run_fire, run_by FROM "+c.s.n.claims+c.where(job)).Scan(&fire, &by)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return time.Time{}, "", nil
	case err != nil:
		return time.Time{}, "", classify(err)
	case by == "":
		return time.Time{}, "", nil
	}
	return time.UnixMilli(fire), by, nil
}
