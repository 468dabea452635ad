package cronlock

import (
	"time"

	"github.com/robfig/cron/v3"

	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/lockmw"
)

// WithClockOffset makes a Scheduler's jobs behave as on a host whose clock
// is off by d from the true time: its fires come d early (d > 0) and are
// named by that clock.
func WithClockOffset(d time.Duration) Option {
	return optionFunc(func(c *config) { c.clockOffset = d })
}

// NewSchedulerWithClaims is NewScheduler (on a Redis Locker, rdb nil)
// claiming fires in claims: the tests of a rolling upgrade give the claims
// of another release.
func NewSchedulerWithClaims(c *cron.Cron, locker *lockmw.Locker, claims fireclaim.Claims, opts ...Option) (*Scheduler, error) {
	s, err := NewScheduler(c, locker, nil, opts...)
	if err != nil {
		return nil, err
	}
	s.claims = claims
	return s, nil
}
