package fire

import (
	"context"
	"slices"
	"sync"
	"time"
)

// keep is how many fire times a Times remembers: the fires handed to the
// scheduler last, of which the one running is the latest not after now.
const keep = 8

// Times records the fire times a schedule handed to its scheduler, so that
// a run can name its fire: the latest recorded time not after the host's
// clock. A scheduler asks for the next fire when it starts and after each
// fire, so the fire that runs has been recorded before it runs.
type Times struct {
	mu    sync.Mutex
	times []time.Time // ascending, at most keep
}

// Record remembers t, a fire time of the schedule.
func (r *Times) Record(t time.Time) {
	if t.IsZero() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	i, found := slices.BinarySearchFunc(r.times, t, func(a, b time.Time) int { return a.Compare(b) })
	if found {
		return
	}
	r.times = slices.Insert(r.times, i, t)
	if len(r.times) > keep {
		r.times = r.times[len(r.times)-keep:]
	}
}

// At returns the fire running at now by the host's clock: the latest
// recorded time not after now+slack. It is false when none is.
func (r *Times) At(now time.Time, slack time.Duration) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	limit := now.Add(slack)
	for i := len(r.times) - 1; i >= 0; i-- {
		if !r.times[i].After(limit) {
			return r.times[i], true
		}
	}
	return time.Time{}, false
}

// timeKey is the context key of a run's fire time.
type timeKey struct{}

// WithTime returns ctx carrying at, the scheduled time of the fire a job
// runs for.
func WithTime(ctx context.Context, at time.Time) context.Context {
	return context.WithValue(ctx, timeKey{}, at)
}

// TimeOf returns the fire time WithTime put in ctx.
func TimeOf(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(timeKey{}).(time.Time)
	return t, ok
}
