package cronsuite

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/lockmw/lockmw/cronlock"
	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/lockmw"
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
	c := lockmw.FireClaimsOf(env.NewLocker(t), fireclaim.Inside{}).Own()
	if c == nil {
		t.Fatal("the Locker's store offers no fire claims")
	}
	RunClaims(t, c, "claims")
	// Another Locker on the store sees the same record.
	got, err := lockmw.FireClaimsOf(env.NewLocker(t), fireclaim.Inside{}).Own().Claim(context.Background(), "claims", time.UnixMilli(1_700_000_000_000), "late")
	if err != nil {
		t.Fatal(err)
	}
	if got.Won || got.By == "" {
		t.Errorf("another Locker's claim of an old fire: %+v, want it refused by the recorded claim", got)
	}
}

// A Host is one simulated instance: its timer fires Late late, and its
// clock is off by Offset (applied by the NewScheduler given to RunHosts,
// if it can).
type Host struct {
	Name   string
	Late   time.Duration
	Offset time.Duration
}

// A NewScheduler returns the Scheduler of one instance, host, adding jobs
// to c, with opts.
type NewScheduler func(t testing.TB, c *cron.Cron, host Host, opts ...cronlock.Option) (*cronlock.Scheduler, error)

// onEnv is the NewScheduler of env: each instance has its own Locker (and
// client) and claims fires in the Locker's store.
func onEnv(env Env) NewScheduler {
	return func(t testing.TB, c *cron.Cron, _ Host, opts ...cronlock.Option) (*cronlock.Scheduler, error) {
		return cronlock.NewScheduler(c, env.NewLocker(t), nil, opts...)
	}
}

// RunHosts starts one Scheduler per host, from newScheduler, each with its
// own cron.Cron, scheduling job every second, and stops them when fires
// distinct fires have run. The job takes 10 ms.
func RunHosts(t *testing.T, newScheduler NewScheduler, job string, hosts []Host, fires int, logs *RecordLogger) *FireTally {
	t.Helper()
	tally := &FireTally{}
	var scheds []*cron.Cron
	for _, h := range hosts {
		c := cron.New(cron.WithSeconds(), cron.WithChain(Delayed(h.Late)))
		s, err := newScheduler(t, c, h,
			cronlock.WithInstance(h.Name), cronlock.WithLogger(logs), cronlock.WithParser(SecondsParser))
		if err != nil {
			t.Fatal(err)
		}
		name := h.Name
		if _, err := s.AddJob(job, "* * * * * *", cronlock.Func(func(ctx context.Context) error {
			at, ok := cronlock.FireTime(ctx)
			if !ok {
				t.Error("the job's context has no fire time")
			}
			tally.Add(at, name)
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
	tally.Started = time.Now()
	eventually(t, time.Duration(fires+10)*time.Second, fmt.Sprintf("%d fires", fires), func() bool { return tally.Distinct() >= fires })
	StopAll(scheds)
	return tally
}

// Three instances, one of them late, run each fire
// of a one-second schedule exactly once, claiming fires in the Locker's
// store.
func testSchedulerOneRunPerFire(t *testing.T, env Env) {
	for i, tc := range []struct {
		name string
		odd  Host // the third instance
	}{
		{"in step", Host{Name: "host-c"}},
		{"one timer 700ms late", Host{Name: "host-c", Late: 700 * time.Millisecond}},
		{"one timer 300ms late", Host{Name: "host-c", Late: 300 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			CheckOneRunPerFire(t, onEnv(env), fmt.Sprintf("report-%d", i), []Host{{Name: "host-a"}, {Name: "host-b"}, tc.odd})
		})
	}
}

// CheckOneRunPerFire runs RunHosts for ten fires and checks that each ran
// exactly once, with no error logged.
func CheckOneRunPerFire(t *testing.T, newScheduler NewScheduler, job string, hosts []Host) {
	t.Helper()
	logs := &RecordLogger{}
	tally := RunHosts(t, newScheduler, job, hosts, 10, logs)
	hist := tally.Check(t, time.Second)
	if t.Failed() {
		for _, e := range logs.Find(false, "") {
			t.Logf("%s %v", e.Msg, e.KV)
		}
	}
	t.Logf("fires run 0 times: %d, once: %d, 2+ times: %d; claim refusals logged: %d",
		hist[0], hist[1], hist[2], logs.Count(false, "claimed by another"))
	if errs := logs.Find(true, ""); len(errs) != 0 {
		t.Errorf("error logs, want none: %v", errs)
	}
}

// A fire that finds the run of the previous fire still going is skipped on
// every instance, with a log naming the running fire and its instance (the
// run record in the Locker's store).
func testSchedulerRunStillGoing(t *testing.T, env Env) {
	CheckRunStillGoing(t, onEnv(env), "slow", false)
}

// CheckRunStillGoing runs job every second on two instances from
// newScheduler; the run of one fire takes 1.5 s. The fire after it is
// skipped on every instance, with a log naming the running fire and its
// instance; with WithQueue (queue) it waits and runs after it. Each fire
// runs at most once, and no two runs overlap.
func CheckRunStillGoing(t *testing.T, newScheduler NewScheduler, job string, queue bool) {
	t.Helper()
	logs := &RecordLogger{}
	tally := &FireTally{}
	var running, overlaps atomic.Int64
	var long atomic.Pointer[time.Time] // the fire whose run is long
	var scheds []*cron.Cron
	for _, name := range []string{"host-a", "host-b"} {
		c := cron.New(cron.WithSeconds())
		opts := []cronlock.Option{cronlock.WithInstance(name), cronlock.WithLogger(logs), cronlock.WithParser(SecondsParser)}
		if queue {
			opts = append(opts, cronlock.WithQueue())
		}
		s, err := newScheduler(t, c, Host{Name: name}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.AddJob(job, "* * * * * *", cronlock.Func(func(ctx context.Context) error {
			if running.Add(1) > 1 {
				overlaps.Add(1)
			}
			defer running.Add(-1)
			at, _ := cronlock.FireTime(ctx)
			tally.Add(at, name)
			// The third fire run takes 1.5 s, spanning the next fire.
			if tally.Distinct() == 3 && long.CompareAndSwap(nil, &at) {
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
		return l != nil && len(tally.Of(l.Add(3*time.Second))) > 0
	})
	StopAll(scheds)

	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d runs overlapped another", n)
	}
	l := *long.Load()
	next := l.Add(time.Second)
	for at, who := range tally.All() {
		if len(who) != 1 {
			t.Errorf("fire %v ran %d times: %v", at, len(who), who)
		}
	}
	nextRuns := len(tally.Of(next))
	busy := logs.Find(false, "still going")
	if queue {
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
		if e.KV["fire"] == next && e.KV["running_fire"] == l && e.KV["running_on"] != nil {
			found = true
		}
	}
	if !found {
		t.Errorf("no busy skip of fire %v names the running fire %v and its instance: %v", next, l, busy)
	}
}

// Two applications share the store with different prefixes, each on two
// instances, and each has a job named cleanup: each runs every fire of its
// own job exactly once, its claims kept in the Locker's store.
func testSchedulerPrefixes(t *testing.T, env Env) {
	CheckPrefixes(t, func(prefix string) NewScheduler {
		return func(t testing.TB, c *cron.Cron, _ Host, opts ...cronlock.Option) (*cronlock.Scheduler, error) {
			return cronlock.NewScheduler(c, env.NewLocker(t, lockmw.WithPrefix(prefix)), nil, opts...)
		}
	})
}

// CheckPrefixes runs the job cleanup of two applications, billing and
// mail, on two instances each (the second 300 ms late), with Schedulers
// from forPrefix with the application's prefix ("billing:", "mail:"), and
// checks that each application runs every fire exactly once, with no
// error logged.
func CheckPrefixes(t *testing.T, forPrefix func(prefix string) NewScheduler) {
	t.Helper()
	app := func(host string) string { return strings.SplitN(host, "-", 2)[0] }
	newScheduler := func(t testing.TB, c *cron.Cron, h Host, opts ...cronlock.Option) (*cronlock.Scheduler, error) {
		return forPrefix(app(h.Name)+":")(t, c, h, opts...)
	}
	logs := &RecordLogger{}
	tally := RunHosts(t, newScheduler, "cleanup", []Host{
		{Name: "billing-a"}, {Name: "billing-b", Late: 300 * time.Millisecond},
		{Name: "mail-a"}, {Name: "mail-b", Late: 300 * time.Millisecond},
	}, 10, logs)
	apps := map[string]*FireTally{"billing": {Started: tally.Started}, "mail": {Started: tally.Started}}
	for at, hosts := range tally.All() {
		for _, h := range hosts {
			apps[app(h)].Add(at, h)
		}
	}
	for _, name := range []string{"billing", "mail"} {
		t.Run(name, func(t *testing.T) { apps[name].Check(t, time.Second) })
	}
	if errs := logs.Find(true, ""); len(errs) != 0 {
		t.Errorf("error logs, want none: %v", errs)
	}
}
