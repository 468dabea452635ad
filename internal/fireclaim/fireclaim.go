// Package fireclaim is where cronlock's Scheduler claims the fires of its
// jobs: a high-water mark of claimed fire times, one record per job, kept
// in the store every instance shares. A claim of a fire wins when no claim
// of that or a later fire exists; comparing and raising the mark is one
// atomic step in the store.
//
// Every record is scoped by the prefix of the Locker whose Scheduler
// claims, so that applications sharing a store with different prefixes
// claim their fires apart.
//
// A Redis record expires once its job has been idle for the Locker's
// retention (at least MinKeep, and twice the job's last interval); why no
// fire can then run twice is argued in Redis' documentation, Expiry.
//
// Redis keeps the record through a client (NewRedis, with the Locker's
// prefix). What a Locker offers (package lockmw's FireClaimsOf returns it
// as a Home) is its prefix, its retention and the claims in its own store:
// on a single Redis or a Cluster, the Redis claims on the Locker's client;
// on a store behind lockmw/internal/store that keeps claims (etcd,
// ZooKeeper, PostgreSQL, MariaDB), the store's; on Redlock none, as no one
// Redis is the Locker's. This package does not import lockmw, so that
// lockmw can import it.
package fireclaim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

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
	// Orphans are earlier claims of the job by this Claims whose replies
	// were lost (the claim returned an error, and its fire was not run)
	// but which the store applied and which won: no instance ran them. A
	// store that cannot tell leaves it empty.
	Orphans []Orphan
	// Unsettled are the fires of earlier claims whose replies were lost
	// and of which the store no longer tells whether they won.
	Unsettled []time.Time
}

// An Orphan is a claim that won although its claimant, whose reply was
// lost, did not run its fire: Fire ran on no instance, nor did the fires
// after Prev (the fire claimed before it) and before Fire, which no one
// claimed.
type Orphan struct {
	Fire, Prev time.Time
}

// Claims keeps the claim records of jobs. Implementations are safe for
// concurrent use, and every instance that shares a record must reach the
// same store.
type Claims interface {
	// Claim claims fire at of job for instance, in one atomic step: it
	// wins when no claim of at or a later fire of job was made before. A
	// request the client replayed after its reply was lost is recognized
	// by its token, so the replay of a winning claim still wins. A claim
	// that returns an error may still have been applied: a later claim of
	// the job reports it in Orphans if it won. Fire times count whole
	// milliseconds.
	Claim(ctx context.Context, job string, at time.Time, instance string) (Claim, error)
	// Running records that instance runs fire at of job, for the logs of
	// fires skipped while it runs.
	Running(ctx context.Context, job string, at time.Time, instance string) error
	// Runner returns the fire and instance Running recorded last for job;
	// "" when none was.
	Runner(ctx context.Context, job string) (time.Time, string, error)
}

// Inside is the argument of lockmw.FireClaimsOf. Only code inside this
// repository can name this type (its package is internal), so only the
// repository's cron adapters can call FireClaimsOf, although it is
// exported.
type Inside struct{}

// Home is where the fire claims of a Locker's Scheduler are kept, as
// package lockmw tells it.
type Home struct {
	// Own returns the claims in the Locker's own store; nil when its
	// store cannot keep them (Redlock: no one Redis is the Locker's).
	Own func() Claims
	// Prefix is the Locker's key prefix, which scopes its claim records.
	Prefix string
	// Keep is how long the Locker keeps an idle lock's keys (its
	// WithRetention, or the default), which is how long its Scheduler's
	// claim records stay after a claim (at least MinKeep; see Redis,
	// Expiry).
	Keep time.Duration
}

const (
	// MinKeep is the shortest time a claim record stays after a claim: far
	// longer than instances of one job ever are apart in claiming one fire
	// (see Redis, Expiry).
	MinKeep = time.Hour
	// DefaultKeep is how long a claim record stays after a claim when
	// WithKeep is not given: lockmw's default retention.
	DefaultKeep = 24 * time.Hour
)

// NewToken returns a random token naming one claim, for replay
// recognition.
func NewToken() (string, error) {
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(raw[:]), nil
}

// ClaimError is err from a claim of fire at of job, saying which: the
// error every store's Claim returns.
func ClaimError(job string, at time.Time, err error) error {
	return fmt.Errorf("claim fire %s of %q: %w", at.Format(time.RFC3339Nano), job, err)
}

// RunOf is the run a store read from its run record, as Runner returns
// it: the fire (unix ms) and instance, or the zero time and "" when by is
// empty (no run recorded).
func RunOf(fire int64, by string) (time.Time, string) {
	if by == "" {
		return time.Time{}, ""
	}
	return time.UnixMilli(fire), by
}
