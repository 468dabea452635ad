package cronlock_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/lockmw/lockmw/cronlock"
	"github.com/lockmw/lockmw/internal/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// secondsParser parses six-field specs, seconds first.
var secondsParser = cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// host is how one simulated instance is off: its timer late by late, its
// clock off by offset.
type host struct {
	name   string
	late   time.Duration
	offset time.Duration
}

// fireTally counts the runs of each fire, by scheduled time.
type fireTally struct {
	started time.Time // when every scheduler had started
	mu      sync.Mutex
	runs    map[time.Time][]string // fire → instances that ran it
}

func (f *fireTally) add(at time.Time, inst string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.runs == nil {
		f.runs = map[time.Time][]string{}
	}
	f.runs[at] = append(f.runs[at], inst)
}

// distinct returns how many fires ran.
func (f *fireTally) distinct() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.runs)
}

// check fails t unless every fire, each interval, from the third whole
// interval after every scheduler had started, to before the last fire run,
// ran exactly once. Earlier fires belong to the start: a host whose clock is
// off by the whole interval can win a fire the others did not schedule, or
// claim its next one while another instance still runs the first. It returns how
// many fires ran 0, 1 and 2+ times.
func (f *fireTally) check(t *testing.T, every time.Duration) (hist [3]int) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	var fires []time.Time
	for at := range f.runs {
		fires = append(fires, at)
	}
	sort.Slice(fires, func(i, j int) bool { return fires[i].Before(fires[j]) })
	if len(fires) < 3 {
		t.Fatalf("only %d fires ran", len(fires))
	}
	var bad []string
	for at := f.started.Truncate(every).Add(3 * every); at.Before(fires[len(fires)-1]); at = at.Add(every) {
		n := len(f.runs[at])
		hist[min(n, 2)]++
		if n != 1 {
			bad = append(bad, fmt.Sprintf("%s: %d runs %v", at.Format("15:04:05.000"), n, f.runs[at]))
		}
	}
	if len(bad) > 0 {
		for _, at := range fires {
			t.Logf("%s %v", at.Format("15:04:05.000"), f.runs[at])
		}
		t.Errorf("fires not run exactly once:\n%s", strings.Join(bad, "\n"))
	}
	return hist
}

// runHosts starts one Scheduler per host on srv, each with its own client,
// Locker and cron.Cron, scheduling job "report" every second, and stops
// them when fires distinct fires have run. The job takes 10 ms.
func runHosts(t *testing.T, srv *redistest.Server, hosts []host, fires int, logs *recordLogger, opts ...cronlock.Option) *fireTally {
	t.Helper()
	tally := &fireTally{}
	var scheds []*cron.Cron
	for _, h := range hosts {
		client := srv.Client(t)
		locker := newLockerOn(t, client)
		c := cron.New(cron.WithSeconds(), cron.WithChain(delayed(h.late)))
		s, err := cronlock.NewScheduler(c, locker, client, append([]cronlock.Option{
			cronlock.WithInstance(h.name), cronlock.WithLogger(logs), cronlock.WithParser(secondsParser),
			cronlock.WithClockOffset(h.offset)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		name := h.name
		if _, err := s.AddJob("report", "* * * * * *", cronlock.Func(func(ctx context.Context) error {
			at, ok := cronlock.FireTime(ctx)
			if !ok {
				t.Error("the job's context has no fire time")
			}
			tally.add(at, name)
			time.Sleep(10 * time.Millisecond) // the job's work
			return nil
		})); err != nil {
			t.Fatal(err)
		}
		scheds = append(scheds, c)
	}
	for _, c := range scheds {
		c.Start()
	}
	tally.started = time.Now()
	eventually(t, time.Duration(fires+10)*time.Second, fmt.Sprintf("%d fires", fires), func() bool { return tally.distinct() >= fires })
	stopAll(scheds)
	return tally
}

// Three instances, one of them late or with its clock off, run each fire
// of a one-second schedule exactly once: the first claim of a fire wins,
// later claims of it are refused, whatever the skew below the interval.
// No hold time is involved.
func TestSchedulerOneRunPerFire(t *testing.T) {
	for _, tc := range []struct {
		name string
		odd  host // the third instance
	}{
		{"in step", host{name: "host-c"}},
		{"one timer 300ms late", host{name: "host-c", late: 300 * time.Millisecond}},
		{"one timer 700ms late", host{name: "host-c", late: 700 * time.Millisecond}},
		{"one clock 1s ahead", host{name: "host-c", offset: time.Second}},
		{"one clock 1s behind", host{name: "host-c", offset: -time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			logs := &recordLogger{}
			tally := runHosts(t, srv, []host{{name: "host-a"}, {name: "host-b"}, tc.odd}, 10, logs)
			hist := tally.check(t, time.Second)
			if t.Failed() {
				for _, e := range logs.find(false, "") {
					t.Logf("%s %v", e.msg, e.kv)
				}
			}
			t.Logf("fires run 0 times: %d, once: %d, 2+ times: %d; claim refusals logged: %d",
				hist[0], hist[1], hist[2], logs.count(false, "claimed by another"))
			if errs := logs.find(true, ""); len(errs) != 0 {
				t.Errorf("error logs, want none: %v", errs)
			}
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
			srv := redistest.Start(t)
			logs := &recordLogger{}
			tally := &fireTally{}
			var running, overlaps atomic.Int64
			var long atomic.Pointer[time.Time] // the fire whose run is long
			var scheds []*cron.Cron
			for _, name := range []string{"host-a", "host-b"} {
				client := srv.Client(t)
				c := cron.New(cron.WithSeconds())
				opts := []cronlock.Option{cronlock.WithInstance(name), cronlock.WithLogger(logs), cronlock.WithParser(secondsParser)}
				if tc.queue {
					opts = append(opts, cronlock.WithQueue())
				}
				s, err := cronlock.NewScheduler(c, newLockerOn(t, client), client, opts...)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.AddJob("slow", "* * * * * *", cronlock.Func(func(ctx context.Context) error {
					if running.Add(1) > 1 {
						overlaps.Add(1)
					}
					defer running.Add(-1)
					at, _ := cronlock.FireTime(ctx)
					tally.add(at, name)
					// The third fire run takes 1.5 s, spanning the next fire.
					if tally.distinct() == 3 && long.CompareAndSwap(nil, &at) {
						time.Sleep(1500 * time.Millisecond)
					}
					return nil
				})); err != nil {
					t.Fatal(err)
				}
				scheds = append(scheds, c)
				c.Start()
			}
			eventually(t, 20*time.Second, "the long run and two fires after it", func() bool {
				l := long.Load()
				if l == nil {
					return false
				}
				tally.mu.Lock()
				defer tally.mu.Unlock()
				return len(tally.runs[l.Add(3*time.Second)]) > 0
			})
			stopAll(scheds)

			if n := overlaps.Load(); n != 0 {
				t.Errorf("%d runs overlapped another", n)
			}
			l := *long.Load()
			next := l.Add(time.Second)
			tally.mu.Lock()
			for at, who := range tally.runs {
				if len(who) != 1 {
					t.Errorf("fire %v ran %d times: %v", at, len(who), who)
				}
			}
			nextRuns := len(tally.runs[next])
			tally.mu.Unlock()
			busy := logs.find(false, "still going")
			if tc.queue {
				if nextRuns != 1 {
					t.Errorf("with WithQueue the fire after the long run ran %d times, want 1 (after it)", nextRuns)
				}
				return
			}
			if nextRuns != 0 {
				t.Errorf("the fire after the long run ran %d times, want it skipped", nextRuns)
			}
			found := false
			for _, e := range busy {
				if e.kv["fire"] == next && e.kv["running_fire"] == l && e.kv["running_on"] != nil {
					found = true
				}
			}
			if !found {
				t.Errorf("no busy skip of fire %v names the running fire %v and its instance: %v", next, l, busy)
			}
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
	v := recoverRun(cron.FuncJob(func() { _, _ = c.AddFunc("@daily", func() {}) }))
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
	logs := &recordLogger{}
	c := cron.New(cron.WithSeconds())
	s, err := cronlock.NewScheduler(c, newLockerOn(t, client), client, cronlock.WithLogger(logs), cronlock.WithParser(secondsParser))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	if _, err := s.AddJob("gappy", "* * * * * *", cron.FuncJob(func() { runs.Add(1) })); err != nil {
		t.Fatal(err)
	}
	c.Start()
	eventually(t, 10*time.Second, "a run", func() bool { return runs.Load() > 0 })
	stopAll([]*cron.Cron{c})
	gaps := logs.find(true, "run by no instance")
	if len(gaps) == 0 {
		t.Fatalf("no Error log of the fires run by no instance: %v", logs.find(true, ""))
	}
	if n, _ := gaps[0].kv["count"].(int); n < 4 || gaps[0].kv["previous_by"] != "host-gone" {
		t.Errorf("gap log %v: want at least 4 fires after the claim of host-gone", gaps[0].kv)
	}
}

// After a 3 s Redis stall, the fires after it run again, each once: a
// claim or acquisition cut short by the stall leaves nothing behind that
// blocks the job for a lease TTL.
func TestSchedulerAfterRedisStall(t *testing.T) {
	srv := redistest.Start(t)
	logs := &recordLogger{}
	tally := &fireTally{}
	var scheds []*cron.Cron
	for _, name := range []string{"host-a", "host-b"} {
		client := srv.Client(t, func(o *redis.Options) {
			o.ReadTimeout = 500 * time.Millisecond
			o.WriteTimeout = 500 * time.Millisecond
		})
		c := cron.New(cron.WithSeconds())
		s, err := cronlock.NewScheduler(c, newLockerOn(t, client), client,
			cronlock.WithInstance(name), cronlock.WithLogger(logs), cronlock.WithParser(secondsParser))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.AddJob("stalled", "* * * * * *", cronlock.Func(func(ctx context.Context) error {
			at, _ := cronlock.FireTime(ctx)
			tally.add(at, name)
			return nil
		})); err != nil {
			t.Fatal(err)
		}
		scheds = append(scheds, c)
		c.Start()
	}
	eventually(t, 10*time.Second, "two fires", func() bool { return tally.distinct() >= 2 })
	srv.Pause(t)
	time.Sleep(3 * time.Second) // the stall itself, not a wait for an outcome
	srv.Resume(t)
	resumed := time.Now()
	before := tally.distinct()
	eventually(t, 15*time.Second, "four fires after the stall", func() bool { return tally.distinct() >= before+4 })
	stopAll(scheds)

	tally.mu.Lock()
	defer tally.mu.Unlock()
	last := time.Time{}
	for at := range tally.runs {
		if at.After(last) {
			last = at
		}
	}
	// From the first whole second after the resume, every fire runs once.
	for at := resumed.Truncate(time.Second).Add(2 * time.Second); at.Before(last); at = at.Add(time.Second) {
		if n := len(tally.runs[at]); n != 1 {
			t.Errorf("fire %s after the stall ran %d times, want 1 (runs: %v)", at.Format("15:04:05"), n, tally.runs)
		}
	}
	if n := logs.count(true, "could not be claimed"); n == 0 {
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
