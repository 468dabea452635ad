package cronlock

import (
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Defaults for Singleton's hold times; a Scheduler holds no lock after a
// run.
const (
	// DefaultMinHold is MinHold when neither WithMinHold nor WithSchedule is
	// given: instances whose timers differ by less than a second run a fire
	// once. It suits schedules whose fires are at least two seconds apart;
	// give WithSchedule for faster ones.
	//
	// Deprecated: only Singleton and New, deprecated, hold a lock after a
	// run; a Scheduler needs no hold.
	DefaultMinHold = time.Second
	// MaxDerivedMinHold caps the MinHold derived from WithSchedule (half the
	// time to the next fire), so that a daily job does not keep its lock
	// for half a day.
	//
	// Deprecated: only Singleton and New, deprecated, hold a lock after a
	// run; a Scheduler needs no hold.
	MaxDerivedMinHold = time.Minute
)

// config is the Singleton configuration built from Options. The With...
// functions only record what they are given, with whether they were given
// (the ...Set fields); newJobConfig checks the result.
type config struct {
	minHold     time.Duration // 0: derived or DefaultMinHold
	minSet      bool
	maxHold     time.Duration // 0: no cap
	maxSet      bool
	schedule    cron.Schedule
	scheduleSet bool
	instance    string
	instanceSet bool
	holders     redis.UniversalClient
	holdersSet  bool
	logger      cron.Logger
	loggerSet   bool
	tp          trace.TracerProvider
	mp          metric.MeterProvider

	// Scheduler only.
	queue       bool
	parser      cron.ScheduleParser
	parserSet   bool
	clockOffset time.Duration // tests: this host's clock minus the true time
}

// Option configures Singleton, New and a Scheduler's jobs. Option
// functions only record their values: the constructors check them, and
// skip nil Options.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithMinHold (Singleton only) sets how long, at least, the lock stays held after a run
// starts, even if the job returns sooner (ShedLock's lockAtLeastFor): an
// instance whose timer fires up to d later finds the lock busy and skips the
// fire instead of running it again. d must be shorter than the time between
// fires, or every other fire is skipped. WithMinHold(0) holds the lock only
// while the job runs. It overrides the MinHold derived from WithSchedule.
// New refuses a negative d, or a d over WithMaxHold's; a Scheduler refuses
// the option.
//
// Deprecated: for Singleton and New, deprecated; a Scheduler needs no hold.
func WithMinHold(d time.Duration) Option {
	return optionFunc(func(c *config) { c.minHold, c.minSet = d, true })
}

// WithMaxHold caps a run: when the job is still running d after it started,
// its context is cancelled with cause ErrMaxHold and the lock is released,
// so that a stuck job cannot block the fires of every instance. A job that
// ignores its context keeps running, unguarded. The default is no cap: the
// watchdog keeps the lock of a long job for as long as it runs. The
// constructors refuse a d that is not positive.
func WithMaxHold(d time.Duration) Option {
	return optionFunc(func(c *config) { c.maxHold, c.maxSet = d, true })
}

// WithSchedule (Singleton only) gives the job's schedule, from which MinHold is derived at
// each fire: half the time from the run's start to the next fire, at most
// MaxDerivedMinHold. Pass the same schedule the job is added with, e.g.
// from cron.ParseStandard(spec) or cron.Every(d). New refuses a nil s; a
// Scheduler refuses the option.
//
// Deprecated: for Singleton and New, deprecated; a Scheduler is given the
// schedule with the job (Scheduler.AddJob, Scheduler.Schedule).
func WithSchedule(s cron.Schedule) Option {
	return optionFunc(func(c *config) { c.schedule, c.scheduleSet = s, true })
}

// WithQueue makes a Scheduler's fire that finds the run of an earlier fire
// still going wait for it, until the fire after it is due, instead of
// being skipped on every instance (the default, like
// cron.SkipIfStillRunning across instances). Waiting fires run in order
// of arrival. Singleton ignores it.
func WithQueue() Option {
	return optionFunc(func(c *config) { c.queue = true })
}

// WithParser sets the parser of Scheduler.AddJob's specs (default
// cron.ParseStandard), e.g. cron.NewParser with cron.Second for a seconds
// field. Pass the parser the Cron was built with. The constructors refuse
// a nil p.
func WithParser(p cron.ScheduleParser) Option {
	return optionFunc(func(c *config) { c.parser, c.parserSet = p, true })
}

// WithInstance sets the name this instance is logged under (attribute
// "instance" in logs, cron.instance on spans). The default is
// "HOSTNAME:PID". The constructors refuse an empty id.
func WithInstance(id string) Option {
	return optionFunc(func(c *config) { c.instance, c.instanceSet = id, true })
}

// WithHolderRecord (Singleton only) makes every run record the instance
// name in Redis, in the key "cronlock:{NAME}:holder" under the Locker's
// prefix (by default "lockmw:cronlock:{NAME}:holder"; releases before the
// prefix scoping wrote "cronlock:{NAME}:holder", which they read), through
// client, so that the skip logs of other instances name the instance that
// holds the lock (the one that took it last). The key has no expiry: one
// small key per job name. Without this option skip logs carry no holder.
// The constructors refuse a nil client.
//
// Deprecated: for Singleton and New, deprecated; a Scheduler's skip logs
// name the running fire and instance from its claim record.
func WithHolderRecord(client redis.UniversalClient) Option {
	return optionFunc(func(c *config) { c.holders, c.holdersSet = client, true })
}

// WithLogger sets the logger for runs and skips (default
// cron.DefaultLogger, which prints errors only; use
// cron.VerbosePrintfLogger to see busy skips too). Busy skips and runs are
// logged with Info, failures (Redis unavailable, a job error, a lost lock)
// with Error. The constructors refuse a nil l.
func WithLogger(l cron.Logger) Option {
	return optionFunc(func(c *config) { c.logger, c.loggerSet = l, true })
}

// WithTracerProvider sets the OpenTelemetry tracer provider (default: the
// global one).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tp = tp })
}

// WithMeterProvider sets the OpenTelemetry meter provider (default: the
// global one).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}
