package cronlock_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/lockmw/lockmw/cronlock"
	"github.com/lockmw/lockmw/lockmw"
)

// Every instance of a service schedules the same job; each fire runs on one
// of them. The job gets the lease context and stops if the lock is lost.
func ExampleSingleton() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	locker, err := lockmw.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	sched, err := cron.ParseStandard("*/5 * * * *")
	if err != nil {
		log.Fatal(err)
	}
	logger := cron.VerbosePrintfLogger(log.New(os.Stderr, "cron: ", log.LstdFlags))
	c := cron.New(cron.WithLogger(logger))
	c.Schedule(sched, cron.NewChain(
		cron.Recover(logger), // outside Singleton: panics release the lock, then are logged
		cronlock.Singleton(locker, "invoice-sweep",
			cronlock.WithSchedule(sched), // MinHold: half the time to the next fire
			cronlock.WithLogger(logger),
			cronlock.WithHolderRecord(rdb)), // skip logs name the holder
	).Then(cronlock.Func(func(ctx context.Context) error {
		return sweepInvoices(ctx) // ctx ends if the lock is lost
	})))
	c.Start()
	defer c.Stop()
}

// In cron.WithChain the wrapper applies to every job of the scheduler, all
// under one lock name; MinHold and MaxHold are then given explicitly.
func ExampleSingleton_withChain() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	locker, err := lockmw.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	c := cron.New(cron.WithChain(
		cronlock.Singleton(locker, "billing-cron",
			cronlock.WithMinHold(10*time.Second),
			cronlock.WithMaxHold(30*time.Minute)),
	))
	if _, err := c.AddFunc("@hourly", func() { log.Print("hourly billing run") }); err != nil {
		log.Fatal(err)
	}
	c.Start()
	defer c.Stop()
}

// New reports bad arguments as errors instead of panicking.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	locker, err := lockmw.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	singleton, err := cronlock.New(locker, "reindex", cronlock.WithSchedule(cron.Every(time.Hour)))
	if err != nil {
		log.Fatal(err) // matches lockmw.ErrInvalidKey or lockmw.ErrInvalidOption
	}
	c := cron.New()
	c.Schedule(cron.Every(time.Hour), singleton(cron.FuncJob(func() { log.Print("reindexing") })))
	c.Start()
	defer c.Stop()
}

func sweepInvoices(ctx context.Context) error { return ctx.Err() }
