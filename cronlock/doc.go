// Package cronlock makes each scheduled fire of a robfig/cron v3 job run
// exactly once across every instance of a service, not once per host.
//
// Add jobs through a Scheduler on every instance:
//
//	c := cron.New()
//	s, err := cronlock.NewScheduler(c, locker, nil)
//	...
//	s.AddJob("invoice-sweep", "*/5 * * * *", cronlock.Func(sweep))
//	c.Start()
//
// locker is a *lockmw.Locker on any store (Redis, Redis Cluster, etcd,
// ZooKeeper, PostgreSQL, MariaDB); the fires are claimed in its store. Redlock needs a Redis client in
// place of nil (see NewScheduler).
//
// # One run per fire: claim the fire, not a hold
//
// A fire is named by its scheduled time. Scheduler wraps the job's
// schedule, so each instance knows the time of the fire it is running
// (the latest time its schedule handed to cron that is not after its
// clock; a robfig JobWrapper alone cannot see it), and the job finds it
// with FireTime. At each fire the instance claims the fire in the job's
// claim record, a high-water mark of claimed fire times: if the fire is
// later than the recorded mark, the mark becomes this fire and the
// instance runs it; otherwise the claim is refused and the fire skipped
// here. Comparing and raising the mark is one atomic step in the store,
// and the record is small, one per job (no key per fire). In Redis,
// PostgreSQL and MariaDB it expires once the job has been idle for the
// Locker's retention
// (lockmw.WithRetention, a day by default; at least an hour, and at least
// twice the job's last interval), refreshed at every claim: a fire could
// then run twice only if an instance claimed it that long after the one
// that ran it (internal/fireclaim, Redis, Expiry, has the argument). It is
// scoped by the Locker's prefix (lockmw.WithPrefix), so applications that
// share a store with different prefixes claim their fires apart, even for
// jobs of the same name. In Redis it is the hash
// "PREFIX" + "cronlock:{NAME}:claim" (by default
// "lockmw:cronlock:{NAME}:claim"), raised by one Lua script, also when
// NewScheduler is given a client; in etcd (a Locker from lockmw/etcd) a
// key under the Locker's prefix, outside every lock's directory, raised by
// a transaction that puts the new mark only if the record is unchanged
// since it was read. The winner
// then takes a lockmw lease on the job name for the run: watchdog,
// lost-lock context, fence, WithMaxHold, all as before, and released as
// soon as the job returns.
//
// Skew. No fire ever runs twice, whatever the skew: every instance names
// a fire by the same scheduled time and the mark only rises. No fire is
// skipped by every instance as long as, for any two instances, the
// difference of (clock offset minus timer lateness) stays below the
// schedule's interval: the instance that handles fires first claims each
// fire before anyone can claim the next. A host whose clock is ahead by a
// second on a one-second schedule claims every fire first (a second early
// by the true clock); one behind by a second is refused every time. Past
// that bound, or when every instance was down, a fire can be claimed by no
// one: the instance that claims a later fire logs it at Error ("fires run
// by no instance", with their count) and counts it in cronlock.gaps.
//
// A job still running at its next fire: by default that fire is skipped
// on every instance (its claimant finds the lease held, and logs the fire
// and instance still running, at Info); WithQueue makes it wait for the
// run, until the fire after it is due, and run then. A run's time
// includes the skew of the instance running it: keep the job shorter than
// the interval minus the skew, or use WithQueue.
//
// Every instance must compute the same fire times: use cron expressions,
// or cron.Every(d), which Scheduler aligns to multiples of d. The claim
// record lives in the Locker's own store when NewScheduler is given no
// Redis client (nil): its Redis (single or Cluster), etcd, ZooKeeper,
// PostgreSQL or MariaDB. On
// Redlock, give NewScheduler a client of one Redis every instance shares
// (one of its masters). A claim whose reply was lost and replayed by the
// client is recognized by its token.
//
// A claim whose reply is lost (the store stalled past the client's
// timeout) is logged as not run, though the store may still apply it.
// The instance remembers it, and its next claim of the job, once the store
// answers, reads the record's last wins: if the lost claim won, its fire
// ran on no instance, and the instance logs it at Error and counts it in
// cronlock.gaps, with the fires before it that no one claimed. A claimed
// fire whose lease cannot be taken (the store failed) is counted there
// too, by its claimant. So cronlock.gaps counts every fire that ran on no
// instance, once, except fires skipped because the run of an earlier
// fire was still going (reason busy), and claims an instance stopped
// before settling. In Redis the record keeps the last 16 wins; a lost
// claim older than those is logged at Error as unsettled, not counted.
//
// # Upgrading from a release that claimed in "cronlock:{NAME}:fired"
//
// Earlier releases kept the Redis record in "cronlock:{NAME}:fired",
// whatever the Locker's prefix, so two applications sharing a Redis with a
// job of the same name took each other's fires. This release claims in
// both records: a claim wins only when neither the prefixed record nor a
// claim of an earlier release in the old record holds the fire or a later
// one, and then raises both, in one script when both keys share a hash tag
// (any prefix without braces), otherwise the old record first. So during a
// rolling upgrade an instance of the earlier release and one of this
// release never both run a fire (whichever claims second finds the fire in
// the old record), and no fire is refused that one of them would have run
// (but for a claim that fails between the two steps, which is then counted
// in cronlock.gaps like any fire no one claimed).
// The claims this release writes in the old record are marked, so they do
// not refuse another application running this release; claims of an
// earlier release still refuse every application sharing the Redis, as
// they did. To upgrade: deploy this release on every instance, in any
// order, with no other step. A later release will drop the old record; it
// runs safely beside this release but not beside an earlier one, so
// upgrade every instance to this release before that one. The old record
// may be deleted once no instance of an earlier release is left. etcd
// records were always scoped by the prefix and are unchanged.
//
// # Singleton and New: deprecated
//
// Singleton (and New) are the older cron.JobWrappers. They make one
// attempt at the lock named after the job and keep it for at least
// MinHold after the run starts (ShedLock's lockAtLeastFor), so that an
// instance whose timer fires up to MinHold later finds it busy. A hold is
// a guess about skew: measured with three robfig/cron instances on a
// one-second schedule, one host 0, 300 or 700 ms late, they lost 25-38%
// of the fires (a late host's hold covers the next fire), and with
// WithSchedule and one host 700 ms late they ran every fire twice. A
// wrapper sees neither the fire's scheduled time nor the schedule, so it
// cannot name the fire to claim it. They are deprecated: add the job
// through a Scheduler instead, which gives one run per fire whatever the
// skew. The change is one line per job:
//
//	c.AddJob(spec, cronlock.Singleton(locker, name, opts...)(job)) // before
//	s.AddJob(name, spec, job, opts...)                             // after
//
// with s from NewScheduler, dropping WithMinHold, WithSchedule and
// WithHolderRecord (a Scheduler's skip logs name the running instance by
// themselves).
//
// # Contexts, failures, panics
//
// A ContextJob, such as Func, gets the lease context: it is cancelled when
// the lock is lost (cause lockmw.ErrLost: the store unreachable past the lease's
// validity, or the key expired or taken), so the job can stop before another
// instance starts the next run. A plain cron.Job cannot be told; the loss is
// logged.
//
// When the Locker's store cannot be asked at fire time, the fire is
// skipped, never run unguarded, and logged with Error; the next fire tries again. A job that
// panics releases its lock at once and the panic goes on unchanged, so
// cron.Recover placed outside still logs it.
//
// # Logs and telemetry
//
// Runs and skips are logged through a cron.Logger (WithLogger) with the
// keys job, instance (WithInstance, default HOSTNAME:PID) and fire. A fire
// claimed by another instance is logged at Info with claimed_fire and
// claimed_by; a fire skipped because a run is still going with
// running_fire and running_on. Fires run by no instance, store failures
// and failed, lost or panicked runs are logged at Error.
//
// Tracer and meter scope: ScopeName. Every fire is one span cronlock.run
// (attributes cron.job, cron.instance, cron.outcome, cron.skip_reason,
// lock.fence), parent of lockmw's acquire span and of the job's own spans
// through the lease context; a skipped fire has cron.outcome "skipped", and
// a busy or claimed skip is not a span error. Metrics:
// cronlock.runs (by cron.job and cron.outcome: ok, error, panic, lost,
// max_hold), cronlock.skips (by cron.job and cron.skip_reason: claimed,
// busy, unavailable, setup: the store is not set up for lockmw,
// lockmw.ErrStoreSetup, logged with Error at every fire it skips),
// cronlock.gaps (fires run by no instance) and
// cronlock.run.duration (seconds, by cron.job and cron.outcome).
//
// For github.com/go-co-op/gocron/v2 use the subpackage gocronlock, which
// applies the same protocol through gocron's distributed Locker.
package cronlock
