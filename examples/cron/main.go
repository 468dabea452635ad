// Command cron shows cronlock: three cron schedulers in one process stand
// for three hosts running the same binary. Every second each of them fires
// the same job; one host's timer fires 300ms late. Each fire runs on one
// host only; the others print that they skip it and who holds the lock.
//
// With REDIS_ADDR set it uses that Redis; otherwise it starts an embedded
// in-process Redis, so it runs on a machine with no Redis installed:
//
//	go run ./examples/cron
//	go run ./examples/cron -duration 10s
//	REDIS_ADDR=localhost:6379 go run ./examples/cron
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/lockmw/lockmw/cronlock"
	"github.com/lockmw/lockmw/lockmw"
)

func main() {
	duration := flag.Duration("duration", 5*time.Second, "how long the schedulers run")
	flag.Parse()
	addr, stop := redisAddr()
	defer stop()

	sched, err := cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow).Parse("* * * * * *")
	if err != nil {
		log.Fatal(err)
	}
	var runs atomic.Int64
	report := cronlock.Func(func(ctx context.Context) error {
		runs.Add(1)
		select { // 10ms of work that stops if the lock is lost
		case <-time.After(10 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})

	var hosts []*host
	for i, name := range []string{"host-a", "host-b", "host-c"} {
		h := newHost(name, addr)
		defer h.close()
		var chain []cron.JobWrapper
		if i == 2 {
			chain = append(chain, lateTimer(300*time.Millisecond))
		}
		chain = append(chain, cronlock.Singleton(h.locker, "report",
			cronlock.WithSchedule(sched), // MinHold: half the time to the next fire, about 500ms
			cronlock.WithInstance(name),
			cronlock.WithLogger(h),
			cronlock.WithHolderRecord(h.client)))
		h.cron.Schedule(sched, cron.NewChain(chain...).Then(report))
		hosts = append(hosts, h)
	}
	fmt.Printf("three hosts fire the job \"report\" every second for %v; host-c's timer is 300ms late\n", *duration)
	start := time.Now()
	for _, h := range hosts {
		h.cron.Start()
	}
	time.Sleep(*duration)
	for _, h := range hosts {
		<-h.cron.Stop().Done()
	}
	fmt.Printf("in %.1fs the job ran %d times (once per fire), not three times per fire\n",
		time.Since(start).Seconds(), runs.Load())
}

// host is one service instance: its own Redis client, Locker and scheduler.
// It is also the cron.Logger of its Singleton, printing runs and skips.
type host struct {
	name   string
	client *redis.Client
	locker *lockmw.Locker
	cron   *cron.Cron
}

func newHost(name, addr string) *host {
	client := redis.NewClient(&redis.Options{Addr: addr})
	locker, err := lockmw.New(client, lockmw.WithTTL(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	return &host{name: name, client: client, locker: locker, cron: cron.New(cron.WithSeconds())}
}

func (h *host) close() {
	_ = h.locker.Close()
	_ = h.client.Close()
}

// Info prints runs and busy skips.
func (h *host) Info(msg string, kv ...any) {
	fields := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		fields[fmt.Sprint(kv[i])] = kv[i+1]
	}
	now := time.Now().Format("15:04:05.000")
	switch {
	case strings.Contains(msg, "skip"):
		holder, ok := fields["holder"]
		if !ok {
			holder = "another host"
		}
		fmt.Printf("%s  %s skips %s: busy, %v holds the lock\n", now, h.name, fields["job"], holder)
	case strings.Contains(msg, "run"):
		fmt.Printf("%s  %s runs  %s (fence %v, lock kept for at least %v)\n", now, h.name, fields["job"], fields["fence"],
			fields["min_hold"].(time.Duration).Round(time.Millisecond))
	}
}

// Error prints failures: Redis unavailable, a failed or lost run.
func (h *host) Error(err error, msg string, kv ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s: %s: %v\n", time.Now().Format("15:04:05.000"), h.name, msg, err)
}

// lateTimer starts each fire d late, like a host whose timer lags.
func lateTimer(d time.Duration) cron.JobWrapper {
	return func(j cron.Job) cron.Job {
		return cron.FuncJob(func() { time.Sleep(d); j.Run() })
	}
}

// redisAddr returns REDIS_ADDR, or starts an embedded in-process Redis whose
// TTLs run on the real clock.
func redisAddr() (string, func()) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		fmt.Println("using Redis at", addr)
		return addr, func() {}
	}
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	m.ClockTTL(true)
	fmt.Println("REDIS_ADDR not set: using an embedded in-process Redis")
	return m.Addr(), m.Close
}
