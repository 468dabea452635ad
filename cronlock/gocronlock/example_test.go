package gocronlock_test

import (
	"context"
	"log"

	"github.com/go-co-op/gocron/v2"

	"github.com/lockmw/lockmw/cronlock/gocronlock"
	"github.com/lockmw/lockmw/internal/lockmwtest"
)

// Every instance adds the same job through its gocronlock.Locker; each
// fire runs on the first instance to claim it.
func ExampleLocker_NewJob() {
	// lockmw.New on a client of the Redis every instance shares (the
	// example Redis: localhost:6379, short timeouts; see lockmw).
	locker, rdb, stop := lockmwtest.DemoLocker()
	defer stop()
	jobs, err := gocronlock.New(locker, rdb)
	if err != nil {
		log.Fatal(err)
	}

	s, err := gocron.NewScheduler()
	if err != nil {
		log.Fatal(err)
	}
	if _, err := jobs.NewJob(s, "invoice-sweep", "*/5 * * * *", false, func(ctx context.Context) error {
		fire, _ := gocronlock.FireTime(ctx) // the same on every instance
		log.Printf("sweeping invoices for the fire of %v", fire)
		return ctx.Err() // ctx ends if the lock is lost
	}); err != nil {
		log.Fatal(err)
	}
	s.Start()
	defer func() { _ = s.Shutdown() }()
}
