package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/cronlock/internal/fire"
	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/lockmw"
)

// Errors Lock returns when a fire does not run here; gocron then skips the
// fire and calls the job's AfterLockError listener.
var (
	// ErrClaimed: another instance claimed this fire or a later one.
	ErrClaimed = errors.New("gocronlock: fire claimed by another instance")
	// ErrRunning: the run of an earlier fire is still going.
	ErrRunning = errors.New("gocronlock: the run of an earlier fire is still going")
	// ErrUnknownJob: the job was not added with Locker.NewJob, so its fires
	// cannot be named.
	ErrUnknownJob = errors.New("gocronlock: job not added with Locker.NewJob")
	// ErrDuplicateJob: two jobs were given one name.
	ErrDuplicateJob = errors.New("gocronlock: two jobs with one name")
)

// A Locker is a gocron.Locker that runs each fire of its jobs on the first
// instance to claim it. Create one per instance with New, add jobs with
// NewJob.
type Locker struct {
	locker *lockmw.Locker
	claims fireclaim.Claims
	cfg    config

	mu   sync.Mutex
	jobs map[string]*job
}

var _ gocron.Locker = (*Locker)(nil)

// New returns a Locker that runs jobs under leases of locker and claims
// their fires in rdb, a client of the Redis every instance shares, in
// records under locker's prefix (and, during the upgrade from releases
// that ignored the prefix, in their record too: see cronlock's Upgrading).
// Errors match lockmw.ErrInvalidOption.
func New(locker *lockmw.Locker, rdb redis.UniversalClient, opts ...Option) (*Locker, error) {
	if locker == nil || rdb == nil {
		return nil, fmt.Errorf("%w: gocronlock.New: nil Locker or Redis client", lockmw.ErrInvalidOption)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, fmt.Errorf("gocronlock.New: %w", err)
	}
	if cfg.instance == "" {
		cfg.instance = fire.DefaultInstance()
	}
	home := lockmw.FireClaimsOf(locker, fireclaim.Inside{})
	return &Locker{locker: locker, claims: fireclaim.NewRedis(rdb, home.Prefix).WithKeep(home.Keep), cfg: cfg, jobs: map[string]*job{}}, nil
}

// FireTime returns the scheduled time of the fire a job function runs
// for, from the context it gets; false outside such a run.
func FireTime(ctx context.Context) (time.Time, bool) { return fire.TimeOf(ctx) }

// NewJob adds to s a job named name that calls fn at each fire of crontab
// (gocron.CronJob's syntax, with a leading seconds field if withSeconds),
// on one instance per fire. fn gets the lease context: it is cancelled
// when the lock is lost (cause lockmw.ErrLost) and carries the fire time.
// opts are further gocron job options; NewJob sets the job's name, cron
// implementation and distributed locker. Errors match
// lockmw.ErrInvalidKey, ErrDuplicateJob, or gocron's errors.
func (l *Locker) NewJob(s gocron.Scheduler, name, crontab string, withSeconds bool, fn func(ctx context.Context) error, opts ...gocron.JobOption) (gocron.Job, error) {
	if name == "" || len(name) > lockmw.MaxKeyLen {
		return nil, fmt.Errorf("%w: gocronlock: job name %q: give a name of 1 to %d bytes", lockmw.ErrInvalidKey, name, lockmw.MaxKeyLen)
	}
	if s == nil || fn == nil {
		return nil, fmt.Errorf("%w: gocronlock %q: nil scheduler or function", lockmw.ErrInvalidOption, name)
	}
	j := &job{name: name, times: &fire.Times{}}
	j.cron = &recording{inner: gocron.NewDefaultCron(withSeconds), times: j.times}
	l.mu.Lock()
	if l.jobs[name] != nil {
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: %q is added already", ErrDuplicateJob, name)
	}
	l.jobs[name] = j
	l.mu.Unlock()
	task := func() error { return j.call(fn) }
	gj, err := s.NewJob(gocron.CronJob(crontab, withSeconds), gocron.NewTask(task),
		append(append([]gocron.JobOption(nil), opts...),
			gocron.WithName(name), gocron.WithCronImplementation(j.cron), gocron.WithDistributedJobLocker(l))...)
	if err != nil {
		l.mu.Lock()
		delete(l.jobs, name)
		l.mu.Unlock()
		return nil, err
	}
	return gj, nil
}

// job is one job added by NewJob.
type job struct {
	name  string
	times *fire.Times
	cron  *recording

	mu  sync.Mutex
	run *run // the run under way on this instance
}

// run is one fire running here.
type run struct {
	job    *job
	lease  *lockmw.Lease
	ctx    context.Context
	cancel context.CancelFunc
	l      *Locker
}

// call runs fn for the run Lock started.
func (j *job) call(fn func(ctx context.Context) error) error {
	j.mu.Lock()
	r := j.run
	j.mu.Unlock()
	if r == nil {
		return fmt.Errorf("gocronlock %q: no lease: the job ran without its Locker (WithDisabledDistributedJobLocker?); it was not run", j.name)
	}
	return fn(r.ctx)
}

// Lock claims the fire of the job named key that is due now, then takes
// the job's lease for the run. It returns ErrClaimed when another instance
// claimed the fire, ErrRunning when an earlier fire's run is still going,
// ErrUnknownJob for a job not added with NewJob, or the Redis error.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	l.mu.Lock()
	j := l.jobs[key]
	l.mu.Unlock()
	log := l.cfg.logger
	if j == nil {
		err := fmt.Errorf("%w: %q", ErrUnknownJob, key)
		log.Error("gocronlock: skip: the job's fires cannot be named; add it with Locker.NewJob", "job", key, "instance", l.cfg.instance, "error", err)
		return nil, err
	}
	now := l.cfg.clock.Now()
	at, ok := j.times.At(now, slack)
	if !ok {
		err := fmt.Errorf("gocronlock %q: no fire is due at %v", key, now)
		log.Error("gocronlock: skip: the fire could not be named", "job", key, "instance", l.cfg.instance, "error", err)
		return nil, err
	}
	kv := []any{"job", key, "instance", l.cfg.instance, "fire", at}
	claim, err := l.claims.Claim(ctx, key, at, l.cfg.instance)
	if err != nil {
		log.Error("gocronlock: skip: the fire could not be claimed, the job did not run", append(kv, "error", err)...)
		return nil, err
	}
	for _, o := range claim.Orphans {
		// This instance's claim whose reply was lost won: no one ran it.
		missed := append(fire.Missed(fireclaim.Claim{Fire: o.Prev}, o.Fire, j.cron.inner.Next), o.Fire)
		log.Error("gocronlock: fires run by no instance: this instance's claim won but its reply was lost",
			append(kv, "first", missed[0], "last", o.Fire, "count", len(missed), "previous_fire", o.Prev, "claimed_fire", o.Fire)...)
	}
	for _, u := range claim.Unsettled {
		log.Error("gocronlock: a claim whose reply was lost may have won: its fire may have run on no instance", append(kv, "claimed_fire", u)...)
	}
	if !claim.Won {
		log.Info("gocronlock: skip: fire claimed by another instance", append(kv, "claimed_fire", claim.Fire, "claimed_by", claim.By)...)
		return nil, fmt.Errorf("%w: fire %v of %q: %v claimed by %s", ErrClaimed, at, key, claim.Fire, claim.By)
	}
	if missed := fire.Missed(claim, at, j.cron.inner.Next); len(missed) > 0 {
		log.Error("gocronlock: fires run by no instance: every instance missed or refused them",
			append(kv, "first", missed[0], "last", missed[len(missed)-1], "count", len(missed), "previous_fire", claim.Fire, "previous_by", claim.By)...)
	}

	acquire := []lockmw.AcquireOption{lockmw.WithName(key)}
	var lease *lockmw.Lease
	if l.cfg.queue {
		wait := time.Second
		if next := j.cron.inner.Next(at); !next.IsZero() {
			wait = max(next.Sub(now), time.Millisecond)
		}
		lease, err = l.locker.Acquire(ctx, key, append(acquire, lockmw.WithWait(wait), lockmw.Fair())...)
	} else {
		lease, err = l.locker.TryAcquire(ctx, key, acquire...)
	}
	if err != nil {
		if errors.Is(err, lockmw.ErrNotAcquired) {
			if rf, by, rerr := l.claims.Runner(ctx, key); rerr == nil && by != "" {
				kv = append(kv, "running_fire", rf, "running_on", by)
			}
			log.Info("gocronlock: skip: the run of an earlier fire is still going", kv...)
			return nil, fmt.Errorf("%w: %w", ErrRunning, err)
		}
		log.Error("gocronlock: skip: the lock could not be taken, the job did not run", append(kv, "error", err)...)
		return nil, err
	}
	if err := l.claims.Running(ctx, key, at, l.cfg.instance); err != nil {
		log.Error("gocronlock: could not record the run; busy skips will not name it", append(kv, "error", err)...)
	}
	runCtx, cancel := context.WithCancel(fire.WithTime(lease.Context(), at))
	r := &run{job: j, lease: lease, ctx: runCtx, cancel: cancel, l: l}
	j.mu.Lock()
	j.run = r
	j.mu.Unlock()
	log.Info("gocronlock: run", append(kv, "fence", lease.Fence())...)
	return r, nil
}

// slack is how far before a recorded fire time the clock may read when
// gocron's timer fires it: the timer runs on the monotonic clock, the
// fire is named by the wall clock.
const slack = 20 * time.Millisecond

// Unlock ends the run and releases its lease. It returns lockmw.ErrLost if
// the lock had been lost during the run.
func (r *run) Unlock(ctx context.Context) error {
	r.job.mu.Lock()
	if r.job.run == r {
		r.job.run = nil
	}
	r.job.mu.Unlock()
	lost := r.ctx.Err() != nil
	r.cancel()
	err := r.lease.Release(context.WithoutCancel(ctx))
	if err != nil && !errors.Is(err, lockmw.ErrClosed) {
		r.l.cfg.logger.Error("gocronlock: release", "job", r.job.name, "instance", r.l.cfg.instance, "lost_during_run", lost, "error", err)
	}
	return err
}

// recording is the gocron.Cron of a job: gocron's default, recording the
// fire times it hands to the scheduler.
type recording struct {
	inner gocron.Cron
	times *fire.Times
}

func (r *recording) IsValid(crontab string, location *time.Location, now time.Time) error {
	return r.inner.IsValid(crontab, location, now)
}

func (r *recording) Next(lastRun time.Time) time.Time {
	next := r.inner.Next(lastRun)
	r.times.Record(next)
	return next
}
