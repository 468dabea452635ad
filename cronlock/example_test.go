package cronlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/lockmw/lockmw/cronlock"
	"github.com/lockmw/lockmw/lockmw"
)

// redisAddr is the Redis the examples use. TestMain points it at a
// redis-server of its own.
var redisAddr = "localhost:6379"

// Every instance of a service adds the same job through a Scheduler; each
// fire runs on the first instance to claim it. The job gets the lease
// context, with the scheduled time of its fire. (The job here runs every
// second, so that the example sees a fire soon; a real one would use a spec
// such as "*/5 * * * *".)
func ExampleScheduler() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, // settings: see lockmw
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond,
		MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	defer client.Close()
	locker, err := lockmw.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	logger := cron.VerbosePrintfLogger(log.New(os.Stderr, "cron: ", log.LstdFlags))
	c := cron.New(cron.WithLogger(logger), cron.WithChain(cron.Recover(logger)))
	s, err := cronlock.NewScheduler(c, locker, nil, cronlock.WithLogger(logger)) // nil: claim fires in the Locker's own store
	if err != nil {
		log.Fatal(err)
	}
	swept := make(chan time.Time, 1)
	if _, err := s.AddJob("invoice-sweep", "@every 1s", cronlock.Func(func(ctx context.Context) error {
		fire, _ := cronlock.FireTime(ctx) // the same on every instance
		select {
		case swept <- fire: // tell the example about the first run
		default:
		}
		return sweepInvoices(ctx, fire) // ctx ends if the lock is lost
	})); err != nil {
		log.Fatal(err) // a bad spec, or a second job named invoice-sweep
	}
	c.Start()
	defer func() { <-c.Stop().Done() }() // stop, and wait for a running job

	<-swept // the first run
	fmt.Println("invoices swept")
	// Output: invoices swept
}

// A job that may outlast its interval: with WithQueue a fire that finds the
// previous run still going waits for it instead of being skipped; WithMaxHold
// caps a stuck run. (Compiled, not run.)
func ExampleWithQueue() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr}) // and the settings of ExampleScheduler
	defer client.Close()
	locker, err := lockmw.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	c := cron.New()
	s, err := cronlock.NewScheduler(c, locker, nil)
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
	client := redis.NewClient(&redis.Options{Addr: redisAddr}) // and the settings of ExampleScheduler
	defer client.Close()
	locker, err := lockmw.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	sched, err := cron.ParseStandard("*/5 * * * *")
	if err != nil {
		log.Fatal(err)
	}
	job := cronlock.Singleton(locker, "mail-digest",
		cronlock.WithSchedule(sched), // MinHold: half the time to the next fire
		cronlock.WithMaxHold(30*time.Minute),
	)(cronlock.Func(func(ctx context.Context) error {
		fmt.Println("mailing the digest")
		return ctx.Err()
	}))
	c := cron.New()
	c.Schedule(sched, job)
	c.Start()
	defer c.Stop()

	// What cron does at each fire, here at once: the first run holds the
	// lock for MinHold, so a second instance's (or a late timer's) run of
	// the same fire is skipped.
	job.Run()
	job.Run()
	// Output: mailing the digest
}

// New reports bad arguments as errors instead of panicking.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr}) // and the settings of ExampleScheduler
	defer client.Close()
	locker, err := lockmw.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	if _, err := cronlock.New(locker, "", cronlock.WithSchedule(cron.Every(time.Hour))); err != nil {
		fmt.Println("bad name:", errors.Is(err, lockmw.ErrInvalidKey))
	}
	singleton, err := cronlock.New(locker, "reindex", cronlock.WithSchedule(cron.Every(time.Hour)))
	if err != nil {
		log.Fatal(err) // matches lockmw.ErrInvalidKey or lockmw.ErrInvalidOption
	}
	c := cron.New()
	c.Schedule(cron.Every(time.Hour), singleton(cron.FuncJob(func() { fmt.Println("reindexing") })))
	c.Start()
	defer c.Stop()
	// Output: bad name: true
}

func sweepInvoices(ctx context.Context, _ time.Time) error { return ctx.Err() }

func reindex(ctx context.Context) error { return ctx.Err() }
