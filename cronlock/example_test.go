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
		MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true, PipelinePoolSize: -1})
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

// A job that was wrapped in Singleton (deprecated) is added through a
// Scheduler instead: the job, its name and its options stay, the hold
// options go. AddJob reports bad arguments as errors.
func ExampleScheduler_AddJob() {
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
	digest := cronlock.Func(func(ctx context.Context) error {
		fmt.Println("mailing the digest")
		return ctx.Err()
	})
	// Before:
	//	sched, _ := cron.ParseStandard("*/5 * * * *")
	//	c.Schedule(sched, cronlock.Singleton(locker, "mail-digest",
	//		cronlock.WithSchedule(sched), cronlock.WithMaxHold(30*time.Minute))(digest))
	if _, err := s.AddJob("mail-digest", "*/5 * * * *", digest, cronlock.WithMaxHold(30*time.Minute)); err != nil {
		log.Fatal(err) // matches lockmw.ErrInvalidKey, lockmw.ErrInvalidOption or cronlock.ErrDuplicateJob
	}
	if _, err := s.AddJob("", "@hourly", digest); err != nil {
		fmt.Println("bad name:", errors.Is(err, lockmw.ErrInvalidKey))
	}
	if _, err := s.AddJob("reindex", "every tuesday", digest); err != nil {
		fmt.Println("bad spec:", errors.Is(err, lockmw.ErrInvalidOption))
	}
	c.Start()
	defer c.Stop()
	// Output:
	// bad name: true
	// bad spec: true
}

func sweepInvoices(ctx context.Context, _ time.Time) error { return ctx.Err() }

func reindex(ctx context.Context) error { return ctx.Err() }
