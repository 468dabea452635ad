package cronsuite

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/lockmw/lockmw/cronlock"
	"github.com/lockmw/lockmw/internal/fireclaim"
)

// RunClaims checks the claim semantics on c, with records of job: a fire
// is won by its first claim; later claims of it or of an older fire are
// refused and name the claim that refused them; a later fire is won and
// names the previous claim. Running and Runner keep the last run. job
// must have no record yet.
func RunClaims(t *testing.T, c fireclaim.Claims, job string) {
	t.Helper()
	ctx := context.Background()
	if at, by, err := c.Runner(ctx, job); err != nil || by != "" || !at.IsZero() {
		t.Errorf("Runner before any run = %v, %q, %v; want none", at, by, err)
	}
	t0 := time.UnixMilli(1_700_000_000_000)
	steps := []struct {
		at       time.Time
		instance string
		won      bool
		prev     time.Time
		prevBy   string
	}{
		{t0, "a", true, time.Time{}, ""},
		{t0, "b", false, t0, "a"},                   // the same fire
		{t0.Add(-time.Second), "c", false, t0, "a"}, // an older fire
		{t0.Add(time.Second), "c", true, t0, "a"},   // the next fire
		{t0.Add(time.Second), "a", false, t0.Add(time.Second), "c"},
		{t0.Add(3 * time.Second), "b", true, t0.Add(time.Second), "c"}, // skips one
	}
	for i, s := range steps {
		got, err := c.Claim(ctx, job, s.at, s.instance)
		if err != nil {
			t.Fatal(err)
		}
		if got.Won != s.won || !got.Fire.Equal(s.prev) || got.By != s.prevBy {
			t.Errorf("step %d: %s claims %v: got %+v, want won=%v by %q at %v", i, s.instance, s.at, got, s.won, s.prevBy, s.prev)
		}
		if s.won {
			if err := c.Running(ctx, job, s.at, s.instance); err != nil {
				t.Fatal(err)
			}
		}
	}
	at, by, err := c.Runner(ctx, job)
	if err != nil || by != "b" || !at.Equal(t0.Add(3*time.Second)) {
		t.Errorf("Runner = %v, %q, %v; want the run of b at %v", at, by, err, t0.Add(3*time.Second))
	}

	// Many instances claim one fire at once: one wins.
	const n = 8
	var won atomic.Int64
	done := make(chan error, n)
	for i := range n {
		go func() {
			got, err := c.Claim(ctx, job, t0.Add(10*time.Second), fmt.Sprintf("racer-%d", i))
			if got.Won {
				won.Add(1)
			}
			done <- err
		}()
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if w := won.Load(); w != 1 {
		t.Errorf("%d of %d concurrent claims of one fire won, want 1", w, n)
	}
}

// The claims a Locker keeps in its own store, as a Scheduler given no
// Redis client uses them.
func testClaims(t *testing.T, env Env) {
	c := fireclaim.Of(env.NewLocker(t))
	if c == nil {
		t.Fatal("the Locker's store offers no fire claims")
	}
	RunClaims(t, c, "claims")
	// Another Locker on the store sees the same record.
	got, err := fireclaim.Of(env.NewLocker(t)).Claim(context.Background(), "claims", time.UnixMilli(1_700_000_000_000), "late")
	if err != nil {
		t.Fatal(err)
	}
	if got.Won || got.By == "" {
		t.Errorf("another Locker's claim of an old fire: %+v, want it refused by the recorded claim", got)
	}
}

// host is one simulated instance, whose timer fires late by late.
type host struct {
	name string
	late time.Duration
}

// runHosts starts one Scheduler per host, each with its own Locker (and
// client) and cron.Cron and no Redis client, scheduling job every second,
// and stops them when fires distinct fires have run. The job takes 10 ms.
func runHosts(t *testing.T, env Env, job string, hosts []host, fires int, logs *recordLogger) *fireTally {
	t.Helper()
	tally := &fireTally{}
	var scheds []*cron.Cron
	for _, h := range hosts {
		c := cron.New(cron.WithSeconds(), cron.WithChain(delayed(h.late)))
		s, err := cronlock.NewScheduler(c, env.NewLocker(t), nil,
			cronlock.WithInstance(h.name), cronlock.WithLogger(logs), cronlock.WithParser(secondsParser))
		if err != nil {
			t.Fatal(err)
		}
		name := h.name
		if _, err := s.AddJob(job, "* * * * * *", cronlock.Func(func(ctx context.Context) error {
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

// Three instances, one of them late, run each fire
// of a one-second schedule exactly once, claiming fires in the Locker's
// store.
func testSchedulerOneRunPerFire(t *testing.T, env Env) {
	for i, tc := range []struct {
		name string
		odd  host // the third instance
	}{
		{"in step", host{name: "host-c"}},
		{"one timer 700ms late", host{name: "host-c", late: 700 * time.Millisecond}},
		{"one timer 300ms late", host{name: "host-c", late: 300 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			logs := &recordLogger{}
			tally := runHosts(t, env, fmt.Sprintf("report-%d", i), []host{{name: "host-a"}, {name: "host-b"}, tc.odd}, 10, logs)
			tally.check(t, time.Second)
			if t.Failed() {
				for _, e := range logs.find(false, "") {
					t.Logf("%s %v", e.msg, e.kv)
				}
			}
			if errs := logs.find(true, ""); len(errs) != 0 {
				t.Errorf("error logs, want none: %v", errs)
			}
		})
	}
}

// A fire that finds the run of the previous fire still going is skipped on
// every instance, with a log naming the running fire and its instance (the
// run record in the Locker's store).
func testSchedulerRunStillGoing(t *testing.T, env Env) {
	logs := &recordLogger{}
	tally := &fireTally{}
	var long atomic.Pointer[time.Time] // the fire whose run is long
	var scheds []*cron.Cron
	for _, name := range []string{"host-a", "host-b"} {
		c := cron.New(cron.WithSeconds())
		s, err := cronlock.NewScheduler(c, env.NewLocker(t), nil,
			cronlock.WithInstance(name), cronlock.WithLogger(logs), cronlock.WithParser(secondsParser))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.AddJob("slow", "* * * * * *", cronlock.Func(func(ctx context.Context) error {
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
	if nextRuns != 0 {
		t.Errorf("the fire after the long run ran %d times, want it skipped", nextRuns)
	}
	found := false
	for _, e := range logs.find(false, "still going") {
		if e.kv["fire"] == next && e.kv["running_fire"] == l && e.kv["running_on"] != nil {
			found = true
		}
	}
	if !found {
		t.Errorf("no busy skip of fire %v names the running fire %v and its instance: %v", next, l, logs.find(false, "still going"))
	}
}
