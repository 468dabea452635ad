package gocronlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/cronlock/gocronlock"
	"github.com/lockmw/lockmw/lockmw"
)

// redisAddr is the Redis the examples use. TestMain points it at a
// redis-server of its own.
var redisAddr = "localhost:6379"

// Every instance adds the same job through its gocronlock.Locker; each
// fire runs on the first instance to claim it. (The job here runs every
// second, so that the example sees a fire soon; a real one would use a
// crontab such as "*/5 * * * *".)
func ExampleLocker_NewJob() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, // settings: see lockmw
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond,
		MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true, PipelinePoolSize: -1})
	defer rdb.Close()
	locker, err := lockmw.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	jobs, err := gocronlock.New(locker, rdb)
	if err != nil {
		log.Fatal(err)
	}

	s, err := gocron.NewScheduler()
	if err != nil {
		log.Fatal(err)
	}
	swept := make(chan struct{}, 1)
	if _, err := jobs.NewJob(s, "invoice-sweep", "* * * * * *", true, func(ctx context.Context) error {
		fire, _ := gocronlock.FireTime(ctx) // the same on every instance
		log.Printf("sweeping invoices for the fire of %v", fire)
		select {
		case swept <- struct{}{}: // tell the example about the first run
		default:
		}
		return ctx.Err() // ctx ends if the lock is lost
	}); err != nil {
		log.Fatal(err)
	}
	s.Start()
	defer func() { _ = s.Shutdown() }() // waits for a running job

	<-swept // the first run
	fmt.Println("invoices swept")
	// Output: invoices swept
}
