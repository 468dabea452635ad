// Command cron shows cronlock: three schedulers in one process stand for
// three hosts running the same binary. Every second each of them fires the
// same job; host-b's timer is 300 ms late and host-c's 700 ms late. Each
// fire runs on one host only: the first to claim it in Redis; the others
// print that they skip it and who claimed it. At the end a per-fire tally
// shows how many times each fire ran.
//
// With -gocron the hosts are github.com/go-co-op/gocron/v2 schedulers with
// cronlock/gocronlock instead of robfig/cron v3 with cronlock.Scheduler.
//
// With REDIS_ADDR set it uses that Redis; otherwise it starts an embedded
// in-process Redis, so it runs on a machine with no Redis installed:
//
//	go run ./examples/cron
//	go run ./examples/cron -duration 10s -gocron
//	REDIS_ADDR=localhost:6379 go run ./examples/cron
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/lockmw/lockmw/cronlock"
	"github.com/lockmw/lockmw/cronlock/gocronlock"
	"github.com/lockmw/lockmw/examples/internal/demo"
	"github.com/lockmw/lockmw/lockmw"
)

func main() {
	duration := flag.Duration("duration", 6*time.Second, "how long the schedulers run")
	useGocron := flag.Bool("gocron", false, "use gocron v2 and gocronlock instead of robfig/cron and cronlock")
	flag.Parse()
	addr, stop := demo.RedisAddr()
	defer stop()

	t := &tally{runs: map[time.Time][]string{}}
	hosts := []struct {
		name string
		late time.Duration
	}{{"host-a", 0}, {"host-b", 300 * time.Millisecond}, {"host-c", 700 * time.Millisecond}}
	var stops []func()
	for _, h := range hosts {
		client := demo.RedisClient(addr) // the client settings a lock needs
		locker, err := lockmw.New(client, lockmw.WithTTL(2*time.Second))
		if err != nil {
			log.Fatal(err)
		}
		defer func() { _ = locker.Close(); _ = client.Close() }()
		if *useGocron {
			stops = append(stops, startGocron(h.name, h.late, locker, client, t))
		} else {
			stops = append(stops, startCron(h.name, h.late, locker, client, t))
		}
	}
	lib := "robfig/cron + cronlock.Scheduler"
	if *useGocron {
		lib = "gocron v2 + gocronlock"
	}
	fmt.Printf("%s: three hosts fire the job \"report\" every second for %v; host-b's timer is 300ms late, host-c's 700ms\n", lib, *duration)
	time.Sleep(*duration)
	var wg sync.WaitGroup
	for _, s := range stops {
		wg.Go(s)
	}
	wg.Wait()
	t.print()
}

// report is the job: it records which host ran which fire.
func report(t *tally, host string) func(ctx context.Context, fire time.Time) error {
	return func(ctx context.Context, fire time.Time) error {
		t.add(fire, host)
		fmt.Printf("%s  %s runs  fire %s\n", now(), host, fire.Format("15:04:05"))
		select { // 10ms of work that stops if the lock is lost
		case <-time.After(10 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// startCron starts one robfig/cron host and returns how to stop it.
func startCron(name string, late time.Duration, locker *lockmw.Locker, client *redis.Client, t *tally) func() {
	c := cron.New(cron.WithSeconds(), cron.WithChain(lateTimer(late)))
	s, err := cronlock.NewScheduler(c, locker, client, cronlock.WithInstance(name), cronlock.WithLogger(cronLogger(name)),
		cronlock.WithParser(cron.NewParser(cron.Second|cron.Minute|cron.Hour|cron.Dom|cron.Month|cron.Dow)))
	if err != nil {
		log.Fatal(err)
	}
	run := report(t, name)
	if _, err := s.AddJob("report", "* * * * * *", cronlock.Func(func(ctx context.Context) error {
		fire, _ := cronlock.FireTime(ctx)
		return run(ctx, fire)
	})); err != nil {
		log.Fatal(err)
	}
	c.Start()
	return func() { <-c.Stop().Done() }
}

// startGocron starts one gocron host and returns how to stop it.
func startGocron(name string, late time.Duration, locker *lockmw.Locker, client *redis.Client, t *tally) func() {
	clock := lateClock{Clock: clockwork.NewRealClock(), late: late}
	jobs, err := gocronlock.New(locker, client, gocronlock.WithInstance(name), gocronlock.WithClock(clock),
		gocronlock.WithLogger(slog.New(skipHandler{host: name})))
	if err != nil {
		log.Fatal(err)
	}
	s, err := gocron.NewScheduler(gocron.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	run := report(t, name)
	if _, err := jobs.NewJob(s, "report", "* * * * * *", true, func(ctx context.Context) error {
		fire, _ := gocronlock.FireTime(ctx)
		return run(ctx, fire)
	}); err != nil {
		log.Fatal(err)
	}
	s.Start()
	return func() { _ = s.Shutdown() }
}

// tally counts the runs of each fire.
type tally struct {
	mu   sync.Mutex
	runs map[time.Time][]string
}

func (t *tally) add(fire time.Time, host string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.runs[fire] = append(t.runs[fire], host)
}

// print shows each fire, from the first run to the last, with its runs.
func (t *tally) print() {
	t.mu.Lock()
	defer t.mu.Unlock()
	var fires []time.Time
	for f := range t.runs {
		fires = append(fires, f)
	}
	slices.SortFunc(fires, func(a, b time.Time) int { return a.Compare(b) })
	if len(fires) == 0 {
		fmt.Println("no fire ran")
		return
	}
	var hist [3]int
	fmt.Println("\nfire      runs  ran on")
	for f := fires[0]; !f.After(fires[len(fires)-1]); f = f.Add(time.Second) {
		who := t.runs[f]
		hist[min(len(who), 2)]++
		fmt.Printf("%s  %d     %s\n", f.Format("15:04:05"), len(who), strings.Join(who, ", "))
	}
	fmt.Printf("fires run 0 times: %d, once: %d, twice or more: %d\n", hist[0], hist[1], hist[2])
}

// cronLogger prints skips and failures of one robfig host.
type cronLogger string

func (h cronLogger) Info(msg string, kv ...any) {
	if strings.Contains(msg, "skip") {
		fmt.Printf("%s  %s skips fire %s: %s\n", now(), string(h), fireOf(kv, "fire"), describe(msg, kv))
	}
}

func (h cronLogger) Error(err error, msg string, kv ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s: %s: %v\n", now(), string(h), msg, err)
}

// skipHandler is a slog.Handler printing skips and failures of one gocron
// host.
type skipHandler struct{ host string }

func (h skipHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h skipHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h skipHandler) WithGroup(string) slog.Handler            { return h }
func (h skipHandler) Handle(_ context.Context, r slog.Record) error {
	var kv []any
	r.Attrs(func(a slog.Attr) bool { kv = append(kv, a.Key, a.Value.Any()); return true })
	switch {
	case r.Level >= slog.LevelError:
		fmt.Fprintf(os.Stderr, "%s  %s: %s %v\n", now(), h.host, r.Message, kv)
	case strings.Contains(r.Message, "skip"):
		fmt.Printf("%s  %s skips fire %s: %s\n", now(), h.host, fireOf(kv, "fire"), describe(r.Message, kv))
	}
	return nil
}

// describe says why a fire was skipped, from a skip log's fields.
func describe(msg string, kv []any) string {
	switch {
	case strings.Contains(msg, "claimed"):
		return fmt.Sprintf("claimed by %v (fire %s)", field(kv, "claimed_by"), fireOf(kv, "claimed_fire"))
	case strings.Contains(msg, "still going"):
		return fmt.Sprintf("%v still runs fire %s", field(kv, "running_on"), fireOf(kv, "running_fire"))
	}
	return msg
}

func field(kv []any, key string) any {
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == key {
			return kv[i+1]
		}
	}
	return nil
}

func fireOf(kv []any, key string) string {
	if t, ok := field(kv, key).(time.Time); ok {
		return t.Format("15:04:05")
	}
	return "?"
}

func now() string { return time.Now().Format("15:04:05.000") }

// lateTimer starts each robfig fire d late, like a host whose timer lags.
func lateTimer(d time.Duration) cron.JobWrapper {
	return func(j cron.Job) cron.Job {
		return cron.FuncJob(func() { time.Sleep(d); j.Run() })
	}
}

// lateClock is a gocron clock whose timers fire late.
type lateClock struct {
	clockwork.Clock
	late time.Duration
}

func (c lateClock) AfterFunc(d time.Duration, f func()) clockwork.Timer {
	return c.Clock.AfterFunc(d+c.late, f)
}
