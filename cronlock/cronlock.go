package cronlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockmw/lockmw/cronlock/internal/fire"
	"github.com/lockmw/lockmw/internal/adapt"
	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/lockmw"
)

// ErrMaxHold is the context cause of a run that was still going after
// WithMaxHold's cap: its lock has been released.
var ErrMaxHold = errors.New("cronlock: job ran past its MaxHold; its lock was released")

// errPanicked ends the context of a job that panicked.
var errPanicked = errors.New("cronlock: job panicked")

// A ContextJob is a cron.Job that can take a context. A Scheduler calls
// RunContext with the lease context, which is cancelled when the lock is
// lost (cause lockmw.ErrLost) or MaxHold passes (cause ErrMaxHold); the
// job should stop then. Its error is logged and recorded on the run's span.
type ContextJob interface {
	cron.Job
	RunContext(ctx context.Context) error
}

// Func adapts a function to a ContextJob, as cron.FuncJob does for func():
//
//	s.AddJob("report", spec, cronlock.Func(report))
//
// Run, used when nothing wraps it, calls f with context.Background()
// and drops its error.
type Func func(ctx context.Context) error

// Run calls f with context.Background(), dropping its error.
func (f Func) Run() { _ = f(context.Background()) }

// RunContext calls f(ctx).
func (f Func) RunContext(ctx context.Context) error { return f(ctx) }

// Singleton is New for program setup: it panics with New's error on
// invalid arguments.
//
// Deprecated: a hold-based wrapper loses fires, or runs them twice, when
// the instances' timers differ by more than its hold (see the package
// overview). Add the job through a Scheduler (NewScheduler and
// Scheduler.AddJob), which runs each fire once whatever the skew.
func Singleton(locker *lockmw.Locker, name string, opts ...Option) cron.JobWrapper {
	w, err := New(locker, name, opts...)
	if err != nil {
		panic(err)
	}
	return w
}

// New returns a cron.JobWrapper under which each fire of the job runs on one
// instance only, among every instance whose Locker shares the store and key
// prefix, as long as the instances' timers differ by less than MinHold:
// the hold-based protocol described in the package overview. Prefer a
// Scheduler, which claims each fire by its scheduled time and needs no
// hold. The wrapper wraps one job (cron.NewChain(...).Then(job)); wrapping
// a second panics with ErrDuplicateJob.
//
// At each fire the wrapper makes one attempt to take the lock name. If
// another instance holds it, the fire is skipped (logged with Info, counted
// with reason busy). If the store cannot be asked, the fire is skipped, never
// run unguarded (logged with Error, reason unavailable); the next fire tries
// again. Otherwise the job runs, with the lease context if it is a
// ContextJob; the watchdog keeps the lock for as long as it runs. When the
// job returns, the lock stays held until MinHold has passed since the start,
// by a release scheduled in the background, so the cron goroutine is not
// held longer than the job. A job that panics releases the lock at once and
// the panic goes on unchanged, to cron.Recover or the runtime.
//
// name is the lock key and the low-cardinality telemetry name (cron.job).
// Errors match lockmw.ErrInvalidKey (empty or overlong name) or
// lockmw.ErrInvalidOption.
//
// Deprecated: a hold-based wrapper loses fires, or runs them twice, when
// the instances' timers differ by more than MinHold (see the package
// overview). Add the job through a Scheduler (NewScheduler and
// Scheduler.AddJob or Scheduler.Schedule), which claims each fire by its
// scheduled time and runs it once whatever the skew.
func New(locker *lockmw.Locker, name string, opts ...Option) (cron.JobWrapper, error) {
	s, err := newSingleton(locker, name, false, opts...)
	if err != nil {
		return nil, err
	}
	return s.wrap, nil
}

// newJobConfig applies opts, skipping nil ones, and checks the result: the
// mistakes found are returned, each matching lockmw.ErrInvalidOption and
// naming its option. A Scheduler's jobs (scheduled) take no hold options.
func newJobConfig(opts []Option, scheduled bool) (config, error) {
	c := config{logger: cron.DefaultLogger}
	adapt.Apply(opts, func(o Option) { o.apply(&c) })
	var misuse adapt.Misuse
	if c.minSet && c.minHold < 0 {
		misuse.Addf(fmt.Sprintf("cronlock.WithMinHold(%v)", c.minHold), "the hold must not be negative")
	}
	if c.maxSet && c.maxHold <= 0 {
		misuse.Addf(fmt.Sprintf("cronlock.WithMaxHold(%v)", c.maxHold), "the cap must be positive; omit the option for no cap")
	}
	if c.minSet && c.maxHold > 0 && c.minHold > c.maxHold {
		misuse.Addf(fmt.Sprintf("cronlock.WithMinHold(%v)", c.minHold), "exceeds cronlock.WithMaxHold(%v): the lock cannot be held both at least and at most that long", c.maxHold)
	}
	if c.scheduleSet && c.schedule == nil {
		misuse.Addf("cronlock.WithSchedule(nil)", "give the job's schedule, e.g. from cron.ParseStandard")
	}
	if scheduled && c.minSet {
		misuse.Addf(fmt.Sprintf("cronlock.WithMinHold(%v)", c.minHold), "applies to Singleton only: a Scheduler claims fires and holds no lock after a run")
	}
	if scheduled && c.scheduleSet {
		misuse.Addf("cronlock.WithSchedule", "applies to Singleton only: a Scheduler claims fires and holds no lock after a run")
	}
	if c.parserSet && c.parser == nil {
		misuse.Addf("cronlock.WithParser(nil)", "give a cron.ScheduleParser, e.g. cron.NewParser(...)")
	}
	if c.instanceSet && c.instance == "" {
		misuse.Addf(`cronlock.WithInstance("")`, "the instance name must not be empty")
	}
	if c.holdersSet && isNilClient(c.holders) {
		misuse.Addf("cronlock.WithHolderRecord(nil)", "give the Redis client the Locker uses")
	}
	if c.loggerSet && c.logger == nil {
		misuse.Addf("cronlock.WithLogger(nil)", "use cron.DiscardLogger to log nothing")
	}
	return c, misuse.Err()
}

// newSingleton checks New's arguments (Schedule's, if scheduled) and
// returns the state of one job.
func newSingleton(locker *lockmw.Locker, name string, scheduled bool, opts ...Option) (*singleton, error) {
	if locker == nil {
		return nil, fmt.Errorf("%w: cronlock: nil Locker: create one with lockmw.New", lockmw.ErrInvalidOption)
	}
	if name == "" || len(name) > lockmw.MaxKeyLen {
		return nil, fmt.Errorf("%w: cronlock: job name %q: give a name of 1 to %d bytes", lockmw.ErrInvalidKey, name, lockmw.MaxKeyLen)
	}
	cfg, err := newJobConfig(opts, scheduled)
	if err != nil {
		return nil, fmt.Errorf("cronlock %q: %w", name, err)
	}
	if cfg.instance == "" {
		cfg.instance = fire.DefaultInstance()
	}
	return &singleton{locker: locker, name: name, cfg: cfg, tel: newTelemetry(name, cfg.tp, cfg.mp), holderKey: lockmw.FireClaimsOf(locker, fireclaim.Inside{}).Prefix + "cronlock:{" + name + "}:holder"}, nil
}

// singleton is the state behind one New wrapper.
type singleton struct {
	locker    *lockmw.Locker
	name      string
	cfg       config
	tel       *telemetry
	holderKey string
	wrapped   atomic.Int64 // jobs wrapped: one at most

	// Set for the jobs of a Scheduler, which claim fires.
	claims fireclaim.Claims
	times  *fire.Times
	sched  cron.Schedule // the job's schedule by this host's clock
}

func (s *singleton) wrap(j cron.Job) cron.Job {
	if s.wrapped.Add(1) > 1 {
		// Two jobs under one lock name would take each other's fires.
		panic(fmt.Errorf("%w: cronlock.Singleton %q wraps a second job: one wrapper per job (not in cron.WithChain), each with its own name, or use Scheduler", ErrDuplicateJob, s.name))
	}
	return cron.FuncJob(func() { s.fire(j) })
}

// fire handles one scheduled fire of j.
func (s *singleton) fire(j cron.Job) {
	log := s.cfg.logger
	ctx, span := s.tel.start(s.cfg.instance)
	start := time.Now()
	lease, err := s.locker.TryAcquire(ctx, s.name, lockmw.WithName(s.name))
	if err != nil {
		s.skip(ctx, span, err)
		return
	}
	s.recordHolder(ctx)
	minHold := s.minHold(start)
	log.Info("cronlock: run", "job", s.name, "instance", s.cfg.instance, "fence", lease.Fence(), "min_hold", minHold)
	s.run(ctx, span, lease, start, minHold, j)
}

// run runs j under lease, with the lease context if j takes one; the lock
// is released when j returns, or minHold after start if later.
func (s *singleton) run(ctx context.Context, span trace.Span, lease *lockmw.Lease, start time.Time, minHold time.Duration, j cron.Job) {
	log := s.cfg.logger
	var lostDuringRun atomic.Bool
	release := sync.OnceFunc(func() {
		err := lease.Release(context.Background())
		// A loss during the run has been logged already; after Close the
		// lock was released by Close.
		if err != nil && !errors.Is(err, lockmw.ErrClosed) && !(errors.Is(err, lockmw.ErrLost) && lostDuringRun.Load()) {
			log.Error(err, "cronlock: release", "job", s.name, "instance", s.cfg.instance)
		}
	})
	base := lease.Context()
	if at, ok := FireTime(ctx); ok {
		base = fire.WithTime(base, at)
	}
	jobCtx, cancelJob := context.WithCancelCause(base)
	var capTimer *time.Timer
	if s.cfg.maxHold > 0 {
		capTimer = time.AfterFunc(s.cfg.maxHold, func() {
			cancelJob(ErrMaxHold)
			release()
		})
	}

	returned := false
	defer func() {
		if returned {
			return
		}
		// The job panicked (or called runtime.Goexit): free the lock now
		// and let the panic go on untouched.
		if capTimer != nil {
			capTimer.Stop()
		}
		cancelJob(errPanicked)
		release()
		log.Error(errPanicked, "cronlock: job panicked; lock released", "job", s.name, "instance", s.cfg.instance)
		s.tel.ran(ctx, span, lease.Fence(), outcomePanic, time.Since(start), errPanicked)
	}()
	jobErr := runJob(jobCtx, j)
	returned = true
	took := time.Since(start)
	if capTimer != nil {
		capTimer.Stop()
	}

	// The lease context ends when the watchdog's timer fires, which can be
	// late: a job that outlasted its lease's deadline is recorded lost even
	// before that (Valid ends the lease and so cancels jobCtx).
	valid := lease.Valid()
	outcome := outcomeOK
	switch cause := context.Cause(jobCtx); {
	case errors.Is(cause, ErrMaxHold):
		outcome = outcomeMaxHold
		log.Error(cause, "cronlock: job ran past MaxHold; its context was cancelled and the lock released", "job", s.name, "instance", s.cfg.instance, "max_hold", s.cfg.maxHold)
	case jobCtx.Err() != nil || !valid:
		// The lease context ended while the job ran: lost, or the
		// Locker was closed.
		outcome = outcomeLost
		lostDuringRun.Store(true)
		log.Error(cause, "cronlock: lock lost while the job ran; its context was cancelled", "job", s.name, "instance", s.cfg.instance)
	case jobErr != nil:
		outcome = outcomeError
		log.Error(jobErr, "cronlock: job failed", "job", s.name, "instance", s.cfg.instance)
	}
	if jobErr == nil && outcome != outcomeOK {
		jobErr = context.Cause(jobCtx)
	}
	cancelJob(context.Canceled)
	s.tel.ran(ctx, span, lease.Fence(), outcome, took, jobErr)

	if left := minHold - took; left > 0 && outcome != outcomeLost && outcome != outcomeMaxHold {
		time.AfterFunc(left, release)
		return
	}
	release()
}

// skipReason is the cron.skip_reason of a fire whose acquisition (or
// claim) with ctx failed with err, from its lock.outcome: busy when another
// run holds the lock (or the wait for it ran out), setup when the store is
// not set up for lockmw (lockmw.ErrStoreSetup: its tables missing, say),
// unavailable otherwise (the store could not be asked, or the Locker is
// closed).
func skipReason(ctx context.Context, err error) string {
	switch {
	case adapt.AcquireOutcome(ctx, err) == adapt.OutcomeBusy:
		return reasonBusy
	case errors.Is(err, lockmw.ErrStoreSetup):
		return reasonSetup
	}
	return reasonUnavailable
}

// skipMessage is the Error log of a fire skipped for reason (not busy):
// a store not set up says so, since no retry mends it.
func skipMessage(reason, what string) string {
	if reason == reasonSetup {
		return "cronlock: skip: the lock store is not set up for lockmw (create its tables: see the store's CreateTable), the job did not run"
	}
	return "cronlock: skip: " + what + ", the job did not run"
}

// skip reports a fire whose lock could not be taken: busy (Info) or the store
// unavailable (Error).
func (s *singleton) skip(ctx context.Context, span trace.Span, err error) {
	if skipReason(ctx, err) == reasonBusy {
		kv := []any{"job", s.name, "instance", s.cfg.instance}
		if holder := s.holder(ctx); holder != "" {
			kv = append(kv, "holder", holder)
		}
		// No holder_ttl: the key's TTL is the lease's, renewed by the
		// watchdog, and says nothing of when the run or its hold ends.
		s.cfg.logger.Info("cronlock: skip: another instance holds the lock", kv...)
		s.tel.skipped(ctx, span, reasonBusy, err)
		return
	}
	reason := skipReason(ctx, err)
	s.cfg.logger.Error(err, skipMessage(reason, "the lock could not be taken"), "job", s.name, "instance", s.cfg.instance)
	s.tel.skipped(ctx, span, reason, err)
}

// minHold returns MinHold for a run that started at start.
func (s *singleton) minHold(start time.Time) time.Duration {
	d := DefaultMinHold
	switch {
	case s.cfg.minSet:
		d = s.cfg.minHold
	case s.cfg.schedule != nil:
		if next := s.cfg.schedule.Next(start); !next.IsZero() {
			d = min(next.Sub(start)/2, MaxDerivedMinHold)
		}
	}
	if s.cfg.maxHold > 0 {
		d = min(d, s.cfg.maxHold)
	}
	return max(d, 0)
}

// recordHolder writes this instance's name to the holder key, if
// WithHolderRecord is set. It is only information for skip logs.
func (s *singleton) recordHolder(ctx context.Context) {
	if s.cfg.holders == nil {
		return
	}
	if err := s.cfg.holders.Set(ctx, s.holderKey, s.cfg.instance, 0).Err(); err != nil {
		s.cfg.logger.Error(err, "cronlock: could not record the holder", "job", s.name, "instance", s.cfg.instance)
	}
}

// holder returns the recorded holder, or "" when unknown.
func (s *singleton) holder(ctx context.Context) string {
	if s.cfg.holders == nil {
		return ""
	}
	h, err := s.cfg.holders.Get(ctx, s.holderKey).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return ""
	}
	return h
}

// runJob runs j, with ctx if it takes one.
func runJob(ctx context.Context, j cron.Job) error {
	if cj, ok := j.(ContextJob); ok {
		return cj.RunContext(ctx)
	}
	j.Run()
	return nil
}
