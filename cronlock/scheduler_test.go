//lint:file-ignore SA1019 the deprecated Singleton and New keep working: their tests use them on purpose.

package cronlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/lockmw/lockmw/cronlock"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/cronsuite"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// onRedis is the cronsuite.NewScheduler of srv: each instance has its
// own client and Locker, claims fires in srv through its client, and has
// its host's clock offset.
func onRedis(srv *redistest.Server) cronsuite.NewScheduler {
	return func(t testing.TB, c *cron.Cron, h cronsuite.Host, opts ...cronlock.Option) (*cronlock.Scheduler, error) {
		client := srv.Client(t)
		return cronlock.NewScheduler(c, newLockerOn(t, client), client, append(opts, cronlock.WithClockOffset(h.Offset))...)
	}
}

// Three instances, one of them late or with its clock off, run each fire
// of a one-second schedule exactly once: the first claim of a fire wins,
// later claims of it are refused, whatever the skew below the interval.
// No hold time is involved.
func TestSchedulerOneRunPerFire(t *testing.T) {
	for _, tc := range []struct {
		name string
		odd  cronsuite.Host // the third instance
	}{
		{"in step", cronsuite.Host{Name: "host-c"}},
		{"one timer 300ms late", cronsuite.Host{Name: "host-c", Late: 300 * time.Millisecond}},
		{"one timer 700ms late", cronsuite.Host{Name: "host-c", Late: 700 * time.Millisecond}},
		{"one clock 1s ahead", cronsuite.Host{Name: "host-c", Offset: time.Second}},
		{"one clock 1s behind", cronsuite.Host{Name: "host-c", Offset: -time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cronsuite.CheckOneRunPerFire(t, onRedis(redistest.Start(t)), "report", []cronsuite.Host{{Name: "host-a"}, {Name: "host-b"}, tc.odd})
		})
	}
}

// A fire that finds the run of the previous fire still going is skipped on
// every instance, with a log naming the running fire and its instance; with
// WithQueue it waits and runs after it. Each fire runs at most once, and
// no two runs overlap.
func TestSchedulerRunStillGoing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		queue bool
	}{{"skip (default)", false}, {"WithQueue", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cronsuite.CheckRunStillGoing(t, onRedis(redistest.Start(t)), "slow", tc.queue)
		})
	}
}

// A job name is one job: a second job under a name is refused by a
// Scheduler, and a Singleton wrapping a second job panics, both with
// ErrDuplicateJob, instead of letting the jobs take each other's fires.
func TestOneNamePerJob(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	locker := newLockerOn(t, client)
	s, err := cronlock.NewScheduler(cron.New(), locker, client)
	if err != nil {
		t.Fatal(err)
	}
	job := cron.FuncJob(func() {})
	if _, err := s.AddJob("sweep", "@hourly", job); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddJob("sweep", "@daily", job); !errors.Is(err, cronlock.ErrDuplicateJob) {
		t.Errorf("a second job named sweep: %v, want ErrDuplicateJob", err)
	}
	if _, err := s.AddJob("other", "@daily", job); err != nil {
		t.Errorf("a second job under its own name: %v", err)
	}

	c := cron.New(cron.WithChain(cronlock.Singleton(locker, "all-jobs")))
	if _, err := c.AddFunc("@hourly", func() {}); err != nil {
		t.Fatal(err)
	}
	v := cronsuite.RecoverRun(cron.FuncJob(func() { _, _ = c.AddFunc("@daily", func() {}) }))
	if err, ok := v.(error); !ok || !errors.Is(err, cronlock.ErrDuplicateJob) {
		t.Errorf("a second job under one Singleton in cron.WithChain: panic %v, want ErrDuplicateJob", v)
	}
}

// Fires that no instance claimed are logged at Error, with their count,
// by the instance that claims the next fire.
func TestSchedulerGapIsError(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	// The last claim was five seconds ago, as if every instance had been
	// down or refused the fires since.
	last := time.Now().Truncate(time.Second).Add(-5 * time.Second)
	if err := client.HSet(context.Background(), "cronlock:{gappy}:fired", "fire", last.UnixMilli(), "by", "host-gone").Err(); err != nil {
		t.Fatal(err)
	}
	logs := &cronsuite.RecordLogger{}
	c := cron.New(cron.WithSeconds())
	s, err := cronlock.NewScheduler(c, newLockerOn(t, client), client, cronlock.WithLogger(logs), cronlock.WithParser(cronsuite.SecondsParser))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	if _, err := s.AddJob("gappy", "* * * * * *", cron.FuncJob(func() { runs.Add(1) })); err != nil {
		t.Fatal(err)
	}
	c.Start()
	eventually(t, 10*time.Second, "a run", func() bool { return runs.Load() > 0 })
	cronsuite.StopAll([]*cron.Cron{c})
	gaps := logs.Find(true, "run by no instance")
	if len(gaps) == 0 {
		t.Fatalf("no Error log of the fires run by no instance: %v", logs.Find(true, ""))
	}
	if n, _ := gaps[0].KV["count"].(int); n < 4 || gaps[0].KV["previous_by"] != "host-gone" {
		t.Errorf("gap log %v: want at least 4 fires after the claim of host-gone", gaps[0].KV)
	}
}

// After a 3 s Redis stall, the fires after it run again, each once: a
// claim or acquisition cut short by the stall leaves nothing behind that
// blocks the job for a lease TTL.
func TestSchedulerAfterRedisStall(t *testing.T) {
	srv := redistest.Start(t)
	logs := &cronsuite.RecordLogger{}
	tally := &cronsuite.FireTally{}
	var scheds []*cron.Cron
	for _, name := range []string{"host-a", "host-b"} {
		client := srv.Client(t, func(o *redis.Options) {
			o.ReadTimeout = 500 * time.Millisecond
			o.WriteTimeout = 500 * time.Millisecond
		})
		c := cron.New(cron.WithSeconds())
		s, err := cronlock.NewScheduler(c, newLockerOn(t, client), client,
			cronlock.WithInstance(name), cronlock.WithLogger(logs), cronlock.WithParser(cronsuite.SecondsParser))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.AddJob("stalled", "* * * * * *", cronlock.Func(func(ctx context.Context) error {
			at, _ := cronlock.FireTime(ctx)
			tally.Add(at, name)
			return nil
		})); err != nil {
			t.Fatal(err)
		}
		scheds = append(scheds, c)
		c.Start()
	}
	eventually(t, 10*time.Second, "two fires", func() bool { return tally.Distinct() >= 2 })
	srv.Pause(t)
	time.Sleep(3 * time.Second) // the stall itself, not a wait for an outcome
	srv.Resume(t)
	resumed := time.Now()
	before := tally.Distinct()
	eventually(t, 15*time.Second, "four fires after the stall", func() bool { return tally.Distinct() >= before+4 })
	cronsuite.StopAll(scheds)

	runs := tally.All()
	last := time.Time{}
	for at := range runs {
		if at.After(last) {
			last = at
		}
	}
	// From the first whole second after the resume, every fire runs once.
	for at := resumed.Truncate(time.Second).Add(2 * time.Second); at.Before(last); at = at.Add(time.Second) {
		if n := len(runs[at]); n != 1 {
			t.Errorf("fire %s after the stall ran %d times, want 1 (runs: %v)", at.Format("15:04:05"), n, runs)
		}
	}
	if n := logs.Count(true, "could not be claimed"); n == 0 {
		t.Logf("no claim failed during the stall")
	}
}

// Bad arguments to NewScheduler, AddJob and Schedule are errors matched by
// errors.Is; the hold options of Singleton are refused by a Scheduler.
func TestSchedulerRejectsBadInput(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	locker := newLockerOn(t, client)
	job := cron.FuncJob(func() {})
	if _, err := cronlock.NewScheduler(nil, locker, client); !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Errorf("nil Cron: %v", err)
	}
	if _, err := cronlock.NewScheduler(cron.New(), nil, client); !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Errorf("nil Locker: %v", err)
	}
	if _, err := cronlock.NewScheduler(cron.New(), locker, nil); err != nil {
		t.Errorf("nil client on a Redis Locker (claims in its Redis): %v", err)
	}
	var nilClient *redis.Client
	if _, err := cronlock.NewScheduler(cron.New(), locker, nilClient); err != nil {
		t.Errorf("a nil *redis.Client on a Redis Locker (as nil): %v", err)
	}
	// Redlock has no one Redis of its own: a client must be given.
	masters := []redis.UniversalClient{redistest.Start(t).Client(t), redistest.Start(t).Client(t), redistest.Start(t).Client(t)}
	redlock, err := lockmw.NewRedlock(masters)
	if err != nil {
		t.Fatal(err)
	}
	defer redlock.Close()
	if _, err := cronlock.NewScheduler(cron.New(), redlock, nil); !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Errorf("nil client on Redlock: %v, want ErrInvalidOption", err)
	}
	if _, err := cronlock.NewScheduler(cron.New(), redlock, masters[0]); err != nil {
		t.Errorf("Redlock with one of its masters' clients: %v", err)
	}
	if _, err := cronlock.NewScheduler(cron.New(), locker, client, cronlock.WithParser(nil)); !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Errorf("WithParser(nil): %v", err)
	}
	s, err := cronlock.NewScheduler(cron.New(), locker, client)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, job, spec string
		opts            []cronlock.Option
		want            error
	}{
		{"empty name", "", "@hourly", nil, lockmw.ErrInvalidKey},
		{"bad spec", "a", "every tuesday", nil, lockmw.ErrInvalidOption},
		{"WithMinHold", "b", "@hourly", []cronlock.Option{cronlock.WithMinHold(time.Second)}, lockmw.ErrInvalidOption},
		{"WithSchedule", "c", "@hourly", []cronlock.Option{cronlock.WithSchedule(cron.Every(time.Hour))}, lockmw.ErrInvalidOption},
	} {
		if _, err := s.AddJob(tc.job, tc.spec, job, tc.opts...); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := s.Schedule("d", nil, job); !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Errorf("nil schedule: %v", err)
	}
}
