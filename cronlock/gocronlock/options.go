package gocronlock

import (
	"log/slog"

	"github.com/jonboulle/clockwork"

	"github.com/lockmw/lockmw/internal/adapt"
)

// config is the Locker configuration built from Options. The With...
// functions only record what they are given, with whether they were given
// (the ...Set fields); New checks the result.
type config struct {
	instance    string
	instanceSet bool
	logger      *slog.Logger
	loggerSet   bool
	queue       bool
	clock       clockwork.Clock
	clockSet    bool
}

// Option configures New. Option functions only record their values: New
// checks them, and skips nil Options.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithInstance sets the name this instance is logged and recorded under in
// claims (default "HOSTNAME:PID").
func WithInstance(id string) Option {
	return optionFunc(func(c *config) { c.instance, c.instanceSet = id, true })
}

// WithLogger sets the logger (default slog.Default()). Runs and fires
// claimed by another instance are logged at Info, a fire skipped because
// the run of an earlier one is still going at Info, fires that no
// instance ran and Redis failures at Error.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger, c.loggerSet = l, true })
}

// WithQueue makes a fire that finds the run of an earlier fire still going
// wait for it, until the fire after it is due, instead of being skipped on
// every instance (the default).
func WithQueue() Option {
	return optionFunc(func(c *config) { c.queue = true })
}

// WithClock sets the clock fires are named by (default the real clock).
// Give the one passed to gocron.WithClock, if any.
func WithClock(clock clockwork.Clock) Option {
	return optionFunc(func(c *config) { c.clock, c.clockSet = clock, true })
}

// newConfig applies opts over the defaults, skipping nil ones, and checks
// the result: the mistakes found are returned, each matching
// lockmw.ErrInvalidOption and naming its option.
func newConfig(opts []Option) (config, error) {
	c := config{logger: slog.Default(), clock: clockwork.NewRealClock()}
	adapt.Apply(opts, func(o Option) { o.apply(&c) })
	var misuse adapt.Misuse
	if c.instanceSet && c.instance == "" {
		misuse.Addf(`gocronlock.WithInstance("")`, "the instance name must not be empty")
	}
	if c.loggerSet && c.logger == nil {
		misuse.Addf("gocronlock.WithLogger(nil)", "use slog.New(slog.DiscardHandler) to log nothing")
	}
	if c.clockSet && c.clock == nil {
		misuse.Addf("gocronlock.WithClock(nil)", "give the scheduler's clock")
	}
	return c, misuse.Err()
}
