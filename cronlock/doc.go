// Package cronlock makes each scheduled fire of a robfig/cron v3 job run
// once across every instance of a service, not once per host.
//
// Wrap a job with Singleton (or New, which returns an error instead of
// panicking) and schedule it on every instance:
//
//	sched := cron.Every(time.Minute)
//	c.Schedule(sched, cronlock.Singleton(locker, "nightly-report",
//		cronlock.WithSchedule(sched))(cronlock.Func(report)))
//
// # One run per fire
//
// At each fire every instance makes one attempt at the lock named after the
// job; the winner runs the job, the others skip the fire. Instances do not
// agree on a fire by its time (their clocks differ): the lock key is the job
// name alone, and the winner keeps the lock for at least MinHold after its
// run starts, even when the job returns sooner, so an instance whose timer
// fires up to MinHold later finds the lock busy and skips (ShedLock's
// lockAtLeastFor). After the job returns, the lock is released in the
// background once MinHold has passed: the cron goroutine is not held longer
// than the job. Closing the Locker during that time releases the lock
// early, so a host shut down just after a run can let a late host run the
// same fire again.
//
// MinHold is, in order of precedence: WithMinHold; half the time from the
// run's start to the next fire of WithSchedule's schedule, at most
// MaxDerivedMinHold; DefaultMinHold. A JobWrapper cannot see the schedule it
// runs under, hence WithSchedule. MinHold must stay below the time between
// fires minus the timer skew, or fires are skipped as busy.
//
// A job longer than MinHold keeps the lock for as long as it runs: the
// Locker's watchdog renews the lease, and later fires on every instance are
// skipped as busy (cluster-wide cron.SkipIfStillRunning). WithMaxHold caps
// a stuck job: its context is cancelled with cause ErrMaxHold and its lock
// released.
//
// # Contexts, failures, panics
//
// A ContextJob, such as Func, gets the lease context: it is cancelled when
// the lock is lost (cause lockmw.ErrLost: Redis unreachable past the lease's
// validity, or the key expired or taken), so the job can stop before another
// instance starts the next run. A plain cron.Job cannot be told; the loss is
// logged.
//
// When Redis cannot be asked at fire time, the fire is skipped, never run
// unguarded, and logged with Error; the next fire tries again. A job that
// panics releases its lock at once and the panic goes on unchanged, so
// cron.Recover placed outside Singleton still logs it.
//
// # Logs and telemetry
//
// Runs and skips are logged through a cron.Logger (WithLogger) with the
// keys job, instance (WithInstance, default HOSTNAME:PID) and, for busy
// skips, holder (the instance that took the lock last, with
// WithHolderRecord) and holder_ttl. Busy skips are Info, unavailable skips
// and failed, lost or panicked runs are Error.
//
// Tracer and meter scope: ScopeName. Every fire is one span cronlock.run
// (attributes cron.job, cron.instance, cron.outcome, cron.skip_reason,
// lock.fence), parent of lockmw's acquire span and of the job's own spans
// through the lease context; a skipped fire has cron.outcome "skipped", and
// a busy skip is not a span error. Metrics:
// cronlock.runs (by cron.job and cron.outcome: ok, error, panic, lost,
// max_hold), cronlock.skips (by cron.job and cron.skip_reason: busy,
// unavailable) and cronlock.run.duration (seconds, by cron.job and
// cron.outcome).
package cronlock
