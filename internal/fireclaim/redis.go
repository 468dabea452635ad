package fireclaim

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed keep.lua
	keepSource string
	//go:embed running.lua
	runningSource string
	//go:embed legacy.lua
	legacySource string
	//go:embed claim.lua
	claimSource string
	//go:embed claim_old.lua
	claimOldSource string

	claimScript    = redis.NewScript(keepSource + legacySource + claimSource)
	claimOldScript = redis.NewScript(keepSource + legacySource + claimOldSource)
	runningScript  = redis.NewScript(keepSource + runningSource)
)

// keepWins is how many wins a record remembers (its won field), so that
// an instance whose claim's reply was lost finds out later whether the
// claim won: it does when the claim is among them, or when the claim is
// not older than the oldest of them.
const keepWins = 16

// keepPending bounds the claims with lost replies an instance remembers
// per job.
const keepPending = 16

// Key returns the Redis key of the claim record of job for a Locker with
// prefix: prefix+"cronlock:{JOB}:claim". It shares the hash tag of the
// lock keys' namespace only through the job name: on a Cluster it is in
// the slot of {JOB} unless prefix holds a hash tag of its own. No lock key
// (prefix+"{KEY}"...) has this form.
func Key(prefix, job string) string { return prefix + "cronlock:{" + job + "}:claim" }

// LegacyKey returns the key of the claim record releases before the
// prefix scoping kept for job, whatever the Locker's prefix:
// "cronlock:{JOB}:fired". This release claims in it too (see Redis).
func LegacyKey(job string) string { return "cronlock:{" + job + "}:fired" }

// Redis keeps claim records in one Redis (or Cluster: a record's fields
// share the job's hash tag), under the prefix of the Locker whose
// Scheduler claims: applications sharing one Redis with different
// prefixes claim their fires apart.
//
// Rolling upgrade. Releases before the prefix scoping claimed in
// LegacyKey(job) whatever the prefix. A Redis from NewRedis claims in
// both records: a claim wins when neither the Locker's record nor a claim
// of an older release in the old record holds the fire or a later one,
// and then raises both. Both checks and both raises are one script when
// the two keys share a hash tag (the default prefix, any prefix without
// braces); otherwise the old record's part runs first (claim_old.lua), and
// the Locker's record is claimed only if it passed. Either way:
//
//   - an older release's instance and this one's never both run a fire:
//     the one that claims second finds the fire in the old record (this
//     release raises it before or with its own record, an older release
//     only raises it);
//   - two instances of this release never both run a fire: the Locker's
//     record is a high-water mark raised in one atomic step, as before;
//   - no fire is refused by everyone that would have run before: a claim
//     of this release is refused by the old record only for a fire an
//     older release claimed. In the two-step order, a claim that passed
//     the old record's part and is refused in the Locker's record refuses
//     older releases a fire that the winner runs; one that fails between
//     the parts refuses them a fire no one may run, as a won claim whose
//     lease fails would, and the next claim counts it among the fires
//     claimed by no one (its prev is the higher of the Locker's record and
//     the older releases' claims, neither of which holds it);
//   - an application running this release is not refused by another
//     application's claims of this release: they are marked in the old
//     record's token and not counted. Claims of an older release still
//     refuse every application sharing the Redis, as they did.
//
// A release after this one claims in the Locker's record only (NewNext):
// it runs beside this release safely, as both claim in that record, but
// not beside an older one. Upgrade every instance to this release first.
//
// Expiry. Every claim, won or refused, and every run recorded makes the
// records it reads expire no sooner than the keep (WithKeep: the Locker's
// retention, at least MinKeep; DefaultKeep when not given) after it; a
// winning claim also keeps the Locker's record for at least twice the time
// since the fire claimed before it, so that a job's record outlives two
// of its intervals. A job idle for longer leaves nothing behind, and older
// releases' records without an expiry get one at the next claim. Why no
// fire can then run twice: a claim of fire F wins only if the record holds
// no fire at or after F. The claim that won F raised the record to F at
// some time t, the mark never falls, and every claim after it keeps the
// record until at least t + keep, so a second claim of F wins only if it
// comes keep or more after the first winner's; claims of one fire by the
// instances of a job come when their schedulers fire it, which differ by
// the hosts' clock offsets and by how late a scheduler fires (a stalled
// process), far below MinKeep. A claim that late, or a record lost
// otherwise (evicted, deleted, a restart without persistence: give the
// Redis noeviction, as for locks), is the only way a fire runs twice.
// What an expired record loses besides: the fire claimed before the next
// claim (no gap is counted across an idle spell longer than the keep),
// the last run (Runner), and the wins of claims whose replies were lost
// (they are then not reported as orphans).
type Redis struct {
	rdb    redis.UniversalClient
	prefix string
	legacy bool          // also claim in LegacyKey (this release)
	keep   time.Duration // the records' expiry after a claim (see Expiry)

	mu      sync.Mutex
	pending map[string][]pendingClaim // job → claims whose replies were lost
}

// pendingClaim is a claim whose reply was lost: Redis may have applied it.
type pendingClaim struct {
	fire  time.Time
	token string
}

var _ Claims = (*Redis)(nil)

// NewRedis returns the Claims of a Locker with prefix, kept in the Redis
// of rdb, claiming in the old record too during the transition (see
// Redis).
func NewRedis(rdb redis.UniversalClient, prefix string) *Redis {
	return &Redis{rdb: rdb, prefix: prefix, legacy: true, keep: DefaultKeep, pending: map[string][]pendingClaim{}}
}

// WithKeep sets how long the records stay after each claim (see Redis,
// Expiry): d, at least MinKeep; DefaultKeep when d is zero. It returns s.
func (s *Redis) WithKeep(d time.Duration) *Redis {
	if d == 0 {
		d = DefaultKeep
	}
	s.keep = max(d, MinKeep)
	return s
}

// NewNext returns the Claims of the release that drops the old record:
// claims in the Locker's record only. It is for tests of a rolling upgrade
// (that release beside this one), until that release makes it NewRedis.
func NewNext(rdb redis.UniversalClient, prefix string) *Redis {
	r := NewRedis(rdb, prefix)
	r.legacy = false
	return r
}

// Claim runs claim.lua on the job's records: the script compares the
// recorded fires with at and raises them in one step, as Redis runs a
// script without interleaving other commands (see Redis for the two-step
// order on a Cluster). A claim whose reply is lost is remembered, and the
// next claim of the job settles it from the record's won field (Claim's
// Orphans and Unsettled).
func (s *Redis) Claim(ctx context.Context, job string, at time.Time, instance string) (Claim, error) {
	token, err := NewToken()
	if err != nil {
		return Claim{}, err
	}
	ms := at.UnixMilli()
	key, old := Key(s.prefix, job), LegacyKey(job)
	keys := []string{key}
	var oldFire time.Time
	var oldBy string
	switch {
	case s.legacy && hashTag(key) == hashTag(old):
		keys = append(keys, old)
	case s.legacy:
		res, err := claimOldScript.Run(ctx, s.rdb, []string{old}, ms, instance, token, s.keep.Milliseconds()).Slice()
		if err != nil {
			// Only the old record may have changed: this claim won nothing.
			return Claim{}, ClaimError(job, at, err)
		}
		if len(res) != 3 {
			return Claim{}, fmt.Errorf("claim fire of %q: %w: %v", job, errBadReply, res)
		}
		ok, _ := res[0].(int64)
		oldBy, _ = res[2].(string)
		if oldFire, err = parseMs(res[1]); err != nil {
			return Claim{}, fmt.Errorf("claim fire of %q: %w", job, err)
		}
		if ok != 1 {
			return Claim{Fire: oldFire, By: oldBy}, nil
		}
	}
	res, err := claimScript.Run(ctx, s.rdb, keys, ms, instance, token, keepWins, s.keep.Milliseconds()).Slice()
	if err != nil {
		s.remember(job, pendingClaim{fire: at, token: token})
		return Claim{}, ClaimError(job, at, err)
	}
	if len(res) != 5 {
		return Claim{}, fmt.Errorf("claim fire of %q: %w: %v", job, errBadReply, res)
	}
	won, _ := res[0].(int64)
	by, _ := res[2].(string)
	prevToken, _ := res[3].(string)
	history, _ := res[4].(string)
	c := Claim{Won: won == 1, By: by}
	if c.Fire, err = parseMs(res[1]); err != nil {
		return Claim{}, fmt.Errorf("claim fire of %q: %w", job, err)
	}
	if oldFire.After(c.Fire) {
		c.Fire, c.By = oldFire, oldBy
	}
	wins, err := parseWins(history)
	if err != nil {
		return Claim{}, fmt.Errorf("claim fire of %q: %w", job, err)
	}
	if !c.Won && prevToken == token {
		// Our own claim, applied once and replayed by the client: the
		// claim before it is in the wins.
		c.Won = true
		c.Fire, c.By = time.Time{}, ""
		for _, w := range wins {
			if w.token == token {
				c.Fire = w.prev
			}
		}
	}
	c.Orphans, c.Unsettled = s.settle(job, wins)
	return c, nil
}

// remember keeps p, a claim of job whose reply was lost, for the next
// claim to settle.
func (s *Redis) remember(job string, p pendingClaim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := append(s.pending[job], p)
	if len(ps) > keepPending {
		ps = ps[len(ps)-keepPending:]
	}
	s.pending[job] = ps
}

// settle tells, from wins (the record's won field, newest first), which of
// the job's claims with lost replies won, and forgets them: those among
// wins won; those absent and not older than the oldest win did not (every
// win since that one is listed); the others are unsettled, unless the
// field was never trimmed.
func (s *Redis) settle(job string, wins []win) (orphans []Orphan, unsettled []time.Time) {
	s.mu.Lock()
	ps := s.pending[job]
	delete(s.pending, job)
	s.mu.Unlock()
	for _, p := range ps {
		found := false
		for _, w := range wins {
			if w.token == p.token {
				orphans = append(orphans, Orphan{Fire: p.fire, Prev: w.prev})
				found = true
				break
			}
		}
		if !found && len(wins) == keepWins && p.fire.Before(wins[len(wins)-1].fire) {
			unsettled = append(unsettled, p.fire)
		}
	}
	return orphans, unsettled
}

// win is one entry of a record's won field.
type win struct {
	fire, prev time.Time
	token      string
}

// parseWins parses a won field: "FIRE:PREV:TOKEN" entries, newest first.
func parseWins(field string) ([]win, error) {
	var wins []win
	for _, entry := range strings.Fields(field) {
		parts := strings.SplitN(entry, ":", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("%w: won entry %q", errBadReply, entry)
		}
		fire, err := parseMs(parts[0])
		if err != nil {
			return nil, err
		}
		prev, err := parseMs(parts[1])
		if err != nil {
			return nil, err
		}
		wins = append(wins, win{fire: fire, prev: prev, token: parts[2]})
	}
	return wins, nil
}

// parseMs parses a unix ms reply; "" is the zero time.
func parseMs(v any) (time.Time, error) {
	s, _ := v.(string)
	if s == "" {
		return time.Time{}, nil
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: fire %q", errBadReply, s)
	}
	return time.UnixMilli(ms), nil
}

// hashTag returns the part of key Redis Cluster hashes: the text between
// the first '{' and the first '}' after it, when not empty; else the key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

var errBadReply = errors.New("unexpected reply from the claim script")

// Running records the run in the job's record (fields run_fire, run_by),
// and during the transition in the old record too, which older releases
// read; a record it writes expires as a claim's does.
func (s *Redis) Running(ctx context.Context, job string, at time.Time, instance string) error {
	ms, keep := at.UnixMilli(), s.keep.Milliseconds()
	if !s.legacy {
		return runningScript.Run(ctx, s.rdb, []string{Key(s.prefix, job)}, ms, instance, keep).Err()
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		// In full: a pipeline does not resend a script a node lacks.
		runningScript.Eval(ctx, p, []string{Key(s.prefix, job)}, ms, instance, keep)
		runningScript.Eval(ctx, p, []string{LegacyKey(job)}, ms, instance, keep)
		return nil
	})
	return err
}

// Runner reads the run Running recorded.
func (s *Redis) Runner(ctx context.Context, job string) (time.Time, string, error) {
	v, err := s.rdb.HMGet(ctx, Key(s.prefix, job), "run_fire", "run_by").Result()
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
