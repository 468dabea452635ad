// Package gocronlock runs each fire of a github.com/go-co-op/gocron/v2 job
// on exactly one instance of a service, with the protocol of cronlock's
// Scheduler: a fire is named by its scheduled time, the first instance to
// claim it in Redis runs it, later claims of the same or an older fire are
// refused. The claim records are cronlock's, under the Locker's prefix.
//
// gocron's distributed Locker only gets the job's name, and a plain lock
// released on Unlock lets an instance whose timer is late run the fire
// again. Locker.NewJob therefore adds the job itself: it installs a
// gocron.Cron implementation that records the fire times gocron schedules,
// so that Lock can name the fire it is called for (the latest recorded
// time not after the scheduler's clock), and sets itself as the job's
// distributed locker. Lock claims the fire, then takes a lockmw lease for
// the run (watchdog, lost-lock context, fence); Unlock releases it. The job
// function gets the lease context, with the fire time (FireTime).
//
// Only cron jobs (gocron.CronJob semantics) are supported: a DurationJob's
// fire times depend on when each instance started.
//
// The tolerated skew is the same as cronlock's: no fire runs twice,
// whatever the skew; no fire is run by no instance as long as the
// instances' clock offsets plus timer lateness differ by less than the
// schedule's interval. A fire that no instance claimed is logged at Error
// by the instance that claims a later one.
//
// It logs through a *slog.Logger (WithLogger) and adds no spans or metrics
// of its own; lockmw's acquire span and lock metrics still apply. Give New
// the scheduler's clock (WithClock) when gocron is given one.
package gocronlock
