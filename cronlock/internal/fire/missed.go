package fire

import (
	"time"

	"github.com/lockmw/lockmw/internal/fireclaim"
)

// maxMissed bounds the fires Missed lists.
const maxMissed = 1000

// Missed returns the fires between the previous claim of a won Claim and
// at, which no instance claimed: every instance missed or refused them.
// next is the job's schedule.
func Missed(c fireclaim.Claim, at time.Time, next func(time.Time) time.Time) []time.Time {
	if c.Fire.IsZero() {
		return nil
	}
	var missed []time.Time
	for t := next(c.Fire); !t.IsZero() && t.Before(at) && len(missed) < maxMissed; t = next(t) {
		missed = append(missed, t)
	}
	return missed
}
