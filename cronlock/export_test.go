package cronlock

import "time"

// WithClockOffset makes a Scheduler's jobs behave as on a host whose clock
// is off by d from the true time: its fires come d early (d > 0) and are
// named by that clock.
func WithClockOffset(d time.Duration) Option {
	return optionFunc(func(c *config) { c.clockOffset = d })
}
