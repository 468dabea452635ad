package cronlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockmw/lockmw/cronlock/internal/fire"
	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/lockmw"
)

// ErrDuplicateJob reports two jobs given one name: they would take each
// other's fires. Give each job its own name.
var ErrDuplicateJob = errors.New("cronlock: two jobs with one name")

// FireTime returns the scheduled time of the fire a job runs for, from the
// context a Scheduler's job gets; false outside such a run.
func FireTime(ctx context.Context) (time.Time, bool) {
	return fire.TimeOf(ctx)
}

// A Scheduler adds jobs to a robfig/cron v3 Cron so that each fire of a
// job runs on exactly one instance, among every instance whose Scheduler
// shares the store of its claims (see NewScheduler): the first instance to claim the fire runs it, and
// later claims of the same or an older fire are refused. A fire is named
// by its scheduled time, which every instance computes from the same
// schedule, so no hold time has to outlast the instances' skew.
type Scheduler struct {
	cron   *cron.Cron
	locker *lockmw.Locker
	claims fireclaim.Claims
	opts   []Option

	mu    sync.Mutex
	names map[string]bool
}

// NewScheduler returns a Scheduler that adds jobs to c, runs them under
// leases of locker and claims their fires in the store every instance
// shares. With rdb nil, fires are claimed in the Locker's own store: its
// Redis (single or Cluster), etcd, ZooKeeper, PostgreSQL or MariaDB, in one
// record per job beside its locks. On Redlock, which has no one Redis of its own,
// give rdb: a client of one Redis every instance shares (one of the
// Redlock masters will do); NewScheduler with nil rdb on Redlock returns
// an error matching lockmw.ErrInvalidOption. A non-nil rdb must be the
// same Redis on every instance; on a single Redis or Cluster Locker, the
// Locker's own client claims in the same record as rdb nil does.
//
// opts apply to every job; those given to Schedule or AddJob add to them.
// Errors match lockmw.ErrInvalidOption, and name the options at fault,
// such as WithMinHold and WithSchedule, which apply to Singleton only.
func NewScheduler(c *cron.Cron, locker *lockmw.Locker, rdb redis.UniversalClient, opts ...Option) (*Scheduler, error) {
	switch {
	case c == nil:
		return nil, fmt.Errorf("%w: cronlock.NewScheduler: nil cron.Cron: create one with cron.New", lockmw.ErrInvalidOption)
	case locker == nil:
		return nil, fmt.Errorf("%w: cronlock.NewScheduler: nil Locker: create one with lockmw.New", lockmw.ErrInvalidOption)
	}
	if _, err := newJobConfig(opts, true); err != nil {
		return nil, fmt.Errorf("cronlock.NewScheduler: %w", err)
	}
	home := lockmw.FireClaimsOf(locker, fireclaim.Inside{})
	var claims fireclaim.Claims
	if isNilClient(rdb) {
		if claims = home.Own(); claims == nil {
			return nil, fmt.Errorf("%w: cronlock.NewScheduler: the Locker's store cannot keep fire claims (Redlock has no one Redis of its own): give one Redis client that every instance shares", lockmw.ErrInvalidOption)
		}
	} else {
		claims = fireclaim.NewRedis(rdb, home.Prefix).WithKeep(home.Keep)
	}
	return &Scheduler{cron: c, locker: locker, claims: claims, opts: opts, names: map[string]bool{}}, nil
}

// isNilClient reports whether rdb is nil, also as a nil pointer of go-redis'
// client types.
func isNilClient(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case nil:
		return true
	case *redis.Client:
		return c == nil
	case *redis.ClusterClient:
		return c == nil
	case *redis.Ring:
		return c == nil
	}
	return false
}

// AddJob parses spec with the parser of WithParser (default
// cron.ParseStandard: five fields or a descriptor such as @hourly) and
// adds job under name, as Schedule does.
func (s *Scheduler) AddJob(name, spec string, job cron.Job, opts ...Option) (cron.EntryID, error) {
	cfg, err := newJobConfig(append(append([]Option(nil), s.opts...), opts...), true)
	if err != nil {
		return 0, fmt.Errorf("cronlock %q: %w", name, err)
	}
	parse := cron.ParseStandard
	if cfg.parser != nil {
		parse = cfg.parser.Parse
	}
	sched, err := parse(spec)
	if err != nil {
		return 0, fmt.Errorf("%w: cronlock %q: schedule %q: %w", lockmw.ErrInvalidOption, name, spec, err)
	}
	return s.Schedule(name, sched, job, opts...)
}

// Schedule adds job to the Cron under sched, named name: the lock key, the
// claim record's name and the telemetry name (cron.job). Each fire runs on
// the first instance to claim it; a fire that finds the run of an earlier
// fire still going is skipped everywhere, or waits with WithQueue. The job
// gets the lease context if it is a ContextJob, with its fire's scheduled
// time (FireTime).
//
// sched must name the same times on every instance: a cron expression,
// or cron.Every(d), which is aligned here to multiples of d (instead of
// the instance's start). Errors match lockmw.ErrInvalidKey,
// lockmw.ErrInvalidOption or ErrDuplicateJob.
func (s *Scheduler) Schedule(name string, sched cron.Schedule, job cron.Job, opts ...Option) (cron.EntryID, error) {
	if sched == nil || job == nil {
		return 0, fmt.Errorf("%w: cronlock %q: nil schedule or job", lockmw.ErrInvalidOption, name)
	}
	if every, ok := sched.(cron.ConstantDelaySchedule); ok {
		sched = aligned{every: every.Delay}
	}
	sg, err := newSingleton(s.locker, name, true, append(append([]Option(nil), s.opts...), opts...)...)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.names[name] {
		return 0, fmt.Errorf("%w: %q is scheduled already", ErrDuplicateJob, name)
	}
	sg.claims, sg.times, sg.sched = s.claims, &fire.Times{}, sched
	id := s.cron.Schedule(recording{inner: sched, times: sg.times, offset: sg.cfg.clockOffset}, cron.FuncJob(func() { sg.fireClaimed(job) }))
	s.names[name] = true
	return id, nil
}

// recording is the schedule the Cron gets: the job's schedule, whose fire
// times it records, shifted by the host clock's offset (tests only).
type recording struct {
	inner  cron.Schedule
	times  *fire.Times
	offset time.Duration
}

func (r recording) Next(t time.Time) time.Time {
	next := r.inner.Next(t.Add(r.offset))
	r.times.Record(next)
	if next.IsZero() {
		return next
	}
	return next.Add(-r.offset)
}

// aligned fires at every multiple of every since the zero time, the same
// times on every instance.
type aligned struct{ every time.Duration }

func (a aligned) Next(t time.Time) time.Time { return t.Truncate(a.every).Add(a.every) }

// fireClaimed handles one fire of a Scheduler's job: claim it, take the
// lease, run.
func (s *singleton) fireClaimed(j cron.Job) {
	log := s.cfg.logger
	now := time.Now().Add(s.cfg.clockOffset)
	at, ok := s.times.At(now, 0)
	ctx, span := s.tel.start(s.cfg.instance)
	if !ok {
		err := fmt.Errorf("cronlock: no fire of %q is due at %v", s.name, now)
		log.Error(err, "cronlock: skip: the fire could not be named", "job", s.name, "instance", s.cfg.instance)
		s.tel.skipped(ctx, span, reasonUnavailable, err)
		return
	}
	ctx = fire.WithTime(ctx, at)
	kv := []any{"job", s.name, "instance", s.cfg.instance, "fire", at}
	claim, err := s.claims.Claim(ctx, s.name, at, s.cfg.instance)
	if err != nil {
		// Should the store have applied the claim anyway, a later claim
		// reports it (reportOrphans).
		reason := skipReason(ctx, err)
		log.Error(err, skipMessage(reason, "the fire could not be claimed"), kv...)
		s.tel.skipped(ctx, span, reason, err)
		return
	}
	s.reportOrphans(ctx, claim)
	if !claim.Won {
		log.Info("cronlock: skip: fire claimed by another instance", append(kv, "claimed_fire", claim.Fire, "claimed_by", claim.By)...)
		s.tel.skipped(ctx, span, reasonClaimed, nil)
		return
	}
	s.reportGap(ctx, claim, at)

	start := time.Now()
	acquire := []lockmw.AcquireOption{lockmw.WithName(s.name)}
	var lease *lockmw.Lease
	if s.cfg.queue {
		// Wait for the run of an earlier fire until the next fire is due.
		wait := time.Second
		if next := s.sched.Next(at); !next.IsZero() {
			wait = max(next.Sub(now), time.Millisecond)
		}
		lease, err = s.locker.Acquire(ctx, s.name, append(acquire, lockmw.WithWait(wait), lockmw.Fair())...)
	} else {
		lease, err = s.locker.TryAcquire(ctx, s.name, acquire...)
	}
	if err != nil {
		s.skipRunning(ctx, span, kv, err)
		return
	}
	if err := s.claims.Running(ctx, s.name, at, s.cfg.instance); err != nil {
		log.Error(err, "cronlock: could not record the run; busy skips will not name it", kv...)
	}
	log.Info("cronlock: run", append(kv, "fence", lease.Fence())...)
	s.run(ctx, span, lease, start, 0, j)
}

// reportGap logs at Error the fires between the previous claim and at that
// no instance claimed: every instance refused or missed them.
func (s *singleton) reportGap(ctx context.Context, claim fireclaim.Claim, at time.Time) {
	missed := fire.Missed(claim, at, s.sched.Next)
	if len(missed) == 0 {
		return
	}
	err := fmt.Errorf("cronlock: %d fire(s) of %q, from %v, ran on no instance", len(missed), s.name, missed[0])
	s.cfg.logger.Error(err, "cronlock: fires run by no instance: every instance missed or refused them",
		"job", s.name, "instance", s.cfg.instance, "first", missed[0], "last", missed[len(missed)-1], "count", len(missed),
		"previous_fire", claim.Fire, "previous_by", claim.By, "fire", at)
	s.tel.gap(ctx, len(missed))
}

// reportOrphans logs at Error, and counts as fires run by no instance, the
// claims of this instance whose replies were lost but which won: their
// fires ran nowhere, nor did those between them and the claim before,
// which no one claimed (the store applied the claim, so no other
// instance's claim reports them). It also logs the lost claims the store
// can no longer tell about.
func (s *singleton) reportOrphans(ctx context.Context, claim fireclaim.Claim) {
	for _, o := range claim.Orphans {
		missed := append(fire.Missed(fireclaim.Claim{Fire: o.Prev}, o.Fire, s.sched.Next), o.Fire)
		err := fmt.Errorf("cronlock: %d fire(s) of %q, to %v, ran on no instance: this instance's claim of %v won, but its reply was lost", len(missed), s.name, o.Fire, o.Fire)
		s.cfg.logger.Error(err, "cronlock: fires run by no instance: this instance's claim won but its reply was lost",
			"job", s.name, "instance", s.cfg.instance, "first", missed[0], "last", o.Fire, "count", len(missed),
			"previous_fire", o.Prev, "claimed_fire", o.Fire)
		s.tel.gap(ctx, len(missed))
	}
	for _, at := range claim.Unsettled {
		err := fmt.Errorf("cronlock: fire %v of %q may have run on no instance: the reply of this instance's claim was lost, and the claim record no longer tells whether it won", at, s.name)
		s.cfg.logger.Error(err, "cronlock: a claim whose reply was lost may have won", "job", s.name, "instance", s.cfg.instance, "claimed_fire", at)
	}
}

// skipRunning reports a claimed fire whose lease could not be taken: the
// run of an earlier fire still holds it (Info), or the store failed (Error).
func (s *singleton) skipRunning(ctx context.Context, span trace.Span, kv []any, err error) {
	if skipReason(ctx, err) == reasonBusy {
		if at, by, rerr := s.claims.Runner(ctx, s.name); rerr == nil && by != "" {
			kv = append(kv, "running_fire", at, "running_on", by)
		}
		s.cfg.logger.Info("cronlock: skip: the run of an earlier fire is still going", kv...)
		s.tel.skipped(ctx, span, reasonBusy, err)
		return
	}
	// The fire is claimed: no other instance runs it, nor counts it.
	s.cfg.logger.Error(err, "cronlock: skip: the lock could not be taken, the job did not run; the fire runs on no instance", append(kv, "count", 1)...)
	s.tel.skipped(ctx, span, reasonUnavailable, err)
	s.tel.gap(ctx, 1)
}
