package cronlock_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/lockmw/lockmw/cronlock"
	"github.com/lockmw/lockmw/internal/lockmwtest"
)

// Every instance of a service adds the same job through a Scheduler; each
// fire runs on the first instance to claim it. The job gets the lease
// context, with the scheduled time of its fire.
func ExampleScheduler() {
	// lockmw.New on a client of the Redis every instance shares (the
	// example Redis: localhost:6379, short timeouts; see lockmw).
	locker, rdb, stop := lockmwtest.DemoLocker()
	defer stop()

	logger := cron.VerbosePrintfLogger(log.New(os.Stderr, "cron: ", log.LstdFlags))
	c := cron.New(cron.WithLogger(logger), cron.WithChain(cron.Recover(logger)))
	s, err := cronlock.NewScheduler(c, locker, rdb, cronlock.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := s.AddJob("invoice-sweep", "*/5 * * * *", cronlock.Func(func(ctx context.Context) error {
		fire, _ := cronlock.FireTime(ctx) // the same on every instance
		return sweepInvoices(ctx, fire)   // ctx ends if the lock is lost
	})); err != nil {
		log.Fatal(err) // a bad spec, or a second job named invoice-sweep
	}
	c.Start()
	defer c.Stop()
}

// A job that may outlast its interval: with WithQueue a fire that finds the
// previous run still going waits for it instead of being skipped; WithMaxHold
// caps a stuck run.
func ExampleWithQueue() {
	// lockmw.New on a client of the Redis every instance shares (the
	// example Redis: localhost:6379, short timeouts; see lockmw).
	locker, rdb, stop := lockmwtest.DemoLocker()
	defer stop()

	c := cron.New()
	s, err := cronlock.NewScheduler(c, locker, rdb)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := s.Schedule("reindex", cron.Every(time.Minute), cronlock.Func(reindex),
		cronlock.WithQueue(), cronlock.WithMaxHold(10*time.Minute)); err != nil {
		log.Fatal(err)
	}
	c.Start()
	defer c.Stop()
}

// Singleton is the hold-based wrapper, for one job: the lock is kept for
// MinHold after the run starts, so that a late timer finds it busy.
func ExampleSingleton() {
	// lockmw.New on a client of the Redis every instance shares (the
	// example Redis: localhost:6379, short timeouts; see lockmw).
	locker, _, stop := lockmwtest.DemoLocker()
	defer stop()

	sched, err := cron.ParseStandard("*/5 * * * *")
	if err != nil {
		log.Fatal(err)
	}
	c := cron.New()
	c.Schedule(sched, cronlock.Singleton(locker, "invoice-sweep",
		cronlock.WithSchedule(sched), // MinHold: half the time to the next fire
		cronlock.WithMaxHold(30*time.Minute),
	)(cronlock.Func(func(ctx context.Context) error { return sweepInvoices(ctx, time.Now()) })))
	c.Start()
	defer c.Stop()
}

// New reports bad arguments as errors instead of panicking.
func ExampleNew() {
	// lockmw.New on a client of the Redis every instance shares (the
	// example Redis: localhost:6379, short timeouts; see lockmw).
	locker, _, stop := lockmwtest.DemoLocker()
	defer stop()

	singleton, err := cronlock.New(locker, "reindex", cronlock.WithSchedule(cron.Every(time.Hour)))
	if err != nil {
		log.Fatal(err) // matches lockmw.ErrInvalidKey or lockmw.ErrInvalidOption
	}
	c := cron.New()
	c.Schedule(cron.Every(time.Hour), singleton(cron.FuncJob(func() { log.Print("reindexing") })))
	c.Start()
	defer c.Stop()
}

func sweepInvoices(ctx context.Context, _ time.Time) error { return ctx.Err() }

func reindex(ctx context.Context) error { return ctx.Err() }
