package cronlock

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockmw/lockmw/lockmw"
)

// Defaults for Singleton's hold times; a Scheduler holds no lock after a
// run.
const (
	// DefaultMinHold is MinHold when neither WithMinHold nor WithSchedule is
	// given: instances whose timers differ by less than a second run a fire
	// once. It suits schedules whose fires are at least two seconds apart;
	// give WithSchedule for faster ones.
	DefaultMinHold = time.Second
	// MaxDerivedMinHold caps the MinHold derived from WithSchedule (half the
	// time to the next fire), so that a daily job does not keep its lock
	// for half a day.
	MaxDerivedMinHold = time.Minute
)

// config is the Singleton configuration built from Options.
type config struct {
	minHold  time.Duration // 0: derived or DefaultMinHold
	minSet   bool
	maxHold  time.Duration // 0: no cap
	schedule cron.Schedule
	instance string
	holders  redis.UniversalClient
	logger   cron.Logger
	tp       trace.TracerProvider
	mp       metric.MeterProvider
	errs     []error

	// Scheduler only.
	queue       bool
	parser      cron.ScheduleParser
	clockOffset time.Duration // tests: this host's clock minus the true time
}

// Option configures Singleton and New.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithMinHold (Singleton only) sets how long, at least, the lock stays held after a run
// starts, even if the job returns sooner (ShedLock's lockAtLeastFor): an
// instance whose timer fires up to d later finds the lock busy and skips the
// fire instead of running it again. d must be shorter than the time between
// fires, or every other fire is skipped. WithMinHold(0) holds the lock only
// while the job runs. It overrides the MinHold derived from WithSchedule.
func WithMinHold(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < 0 {
			c.errs = append(c.errs, fmt.Errorf("%w: WithMinHold(%v): the hold must not be negative", lockmw.ErrInvalidOption, d))
			return
		}
		c.minHold, c.minSet = d, true
	})
}

// WithMaxHold caps a run: when the job is still running d after it started,
// its context is cancelled with cause ErrMaxHold and the lock is released,
// so that a stuck job cannot block the fires of every instance. A job that
// ignores its context keeps running, unguarded. The default is no cap: the
// watchdog keeps the lock of a long job for as long as it runs.
func WithMaxHold(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("%w: WithMaxHold(%v): the cap must be positive; omit the option for no cap", lockmw.ErrInvalidOption, d))
			return
		}
		c.maxHold = d
	})
}

// WithSchedule (Singleton only) gives the job's schedule, from which MinHold is derived at
// each fire: half the time from the run's start to the next fire, at most
// MaxDerivedMinHold. Pass the same schedule the job is added with, e.g.
// from cron.ParseStandard(spec) or cron.Every(d).
func WithSchedule(s cron.Schedule) Option {
	return optionFunc(func(c *config) {
		if s == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WithSchedule(nil): give the job's schedule, e.g. from cron.ParseStandard", lockmw.ErrInvalidOption))
			return
		}
		c.schedule = s
	})
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
// field. Pass the parser the Cron was built with.
func WithParser(p cron.ScheduleParser) Option {
	return optionFunc(func(c *config) {
		if p == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WithParser(nil): give a cron.ScheduleParser, e.g. cron.NewParser(...)", lockmw.ErrInvalidOption))
			return
		}
		c.parser = p
	})
}

// WithInstance sets the name this instance is logged under (attribute
// "instance" in logs, cron.instance on spans). The default is
// "HOSTNAME:PID".
func WithInstance(id string) Option {
	return optionFunc(func(c *config) {
		if id == "" {
			c.errs = append(c.errs, fmt.Errorf("%w: WithInstance(\"\"): the instance name must not be empty", lockmw.ErrInvalidOption))
			return
		}
		c.instance = id
	})
}

// WithHolderRecord makes every run record the instance name in Redis, in
// the key "cronlock:{NAME}:holder" through client, so that the skip logs of
// other instances name the instance that holds the lock (the one that took
// it last). The key has no expiry: one small key per job name. Without this
// option skip logs carry no holder.
func WithHolderRecord(client redis.UniversalClient) Option {
	return optionFunc(func(c *config) {
		if client == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WithHolderRecord(nil): give the Redis client the Locker uses", lockmw.ErrInvalidOption))
			return
		}
		c.holders = client
	})
}

// WithLogger sets the logger for runs and skips (default
// cron.DefaultLogger, which prints errors only; use
// cron.VerbosePrintfLogger to see busy skips too). Busy skips and runs are
// logged with Info, failures (Redis unavailable, a job error, a lost lock)
// with Error.
func WithLogger(l cron.Logger) Option {
	return optionFunc(func(c *config) {
		if l == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WithLogger(nil): use cron.DiscardLogger to log nothing", lockmw.ErrInvalidOption))
			return
		}
		c.logger = l
	})
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
