package gocronlock

import (
	"fmt"
	"log/slog"

	"github.com/jonboulle/clockwork"

	"github.com/lockmw/lockmw/lockmw"
)

// config is the Locker configuration built from Options.
type config struct {
	instance string
	logger   *slog.Logger
	queue    bool
	clock    clockwork.Clock
	errs     []error
}

// Option configures New.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithInstance sets the name this instance is logged and recorded under in
// claims (default "HOSTNAME:PID").
func WithInstance(id string) Option {
	return optionFunc(func(c *config) {
		if id == "" {
			c.errs = append(c.errs, fmt.Errorf("%w: WithInstance(\"\"): the instance name must not be empty", lockmw.ErrInvalidOption))
			return
		}
		c.instance = id
	})
}

// WithLogger sets the logger (default slog.Default()). Runs and fires
// claimed by another instance are logged at Info, a fire skipped because
// the run of an earlier one is still going at Info, fires that no
// instance ran and Redis failures at Error.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WithLogger(nil): use slog.New(slog.DiscardHandler) to log nothing", lockmw.ErrInvalidOption))
			return
		}
		c.logger = l
	})
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
	return optionFunc(func(c *config) {
		if clock == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WithClock(nil): give the scheduler's clock", lockmw.ErrInvalidOption))
			return
		}
		c.clock = clock
	})
}
