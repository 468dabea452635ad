//lint:file-ignore SA1019 the deprecated Singleton and New keep working: their tests use them on purpose.

package cronsuite

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/lockmw/lockmw/cronlock"
	"github.com/lockmw/lockmw/lockmw"
)

// Three instances with a 2-second schedule and a 10 ms job run it once per
// fire, also when one instance's timer fires 300 ms late: by then the job
// has ended, but the lock is still held for MinHold (half the interval).
// Singleton promises one run per fire while the instances' acquisitions
// differ by less than MinHold and the lock is released before the next
// fire: with a 1-second schedule (MinHold 500 ms) the late instance had
// 200 ms to spare, which a loaded machine's store latency used up; with 2
// seconds it has 700 ms, and the next fire 1 s.
func testOneRunPerFire(t *testing.T, env Env) {
	for _, tc := range []struct {
		name string
		skew time.Duration // the third instance's lateness
	}{
		{"in step", 0},
		{"one instance 300ms late", 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // own lock key and logs
			key := "report-" + tc.skew.String()
			sched := everyTwoSeconds(t)
			logs := &RecordLogger{}
			var fires, runs atomic.Int64
			job := cronlock.Func(func(ctx context.Context) error {
				runs.Add(1)
				time.Sleep(10 * time.Millisecond) // the job's work
				return nil
			})
			var scheds []*cron.Cron
			for i, inst := range []string{"host-a", "host-b", "host-c"} {
				var chain []cron.JobWrapper
				if i == 0 {
					chain = append(chain, counting(&fires))
				}
				if i == 2 {
					chain = append(chain, Delayed(tc.skew))
				}
				chain = append(chain, cronlock.Singleton(env.NewLocker(t), key, cronlock.WithSchedule(sched),
					cronlock.WithInstance(inst), cronlock.WithLogger(logs)))
				c := cron.New(cron.WithSeconds())
				c.Schedule(sched, cron.NewChain(chain...).Then(job))
				scheds = append(scheds, c)
			}
			for _, c := range scheds {
				c.Start()
			}
			eventually(t, 60*time.Second, "five fires", func() bool { return fires.Load() >= 5 })
			StopAll(scheds)

			f, r := fires.Load(), runs.Load()
			t.Logf("fires %d, runs %d, busy skips %d", f, r, logs.Count(false, "skip"))
			if r < f-1 || r > f+1 {
				t.Errorf("the job ran %d times over %d fires, want one run per fire (±1)", r, f)
			}
			if n := logs.Count(true, ""); n != 0 {
				t.Errorf("%d error logs, want none: %v", n, logs.Find(true, ""))
			}
		})
	}
}

// A job that runs longer than the lease TTL runs once: the watchdog keeps
// its lock through the following fires, and its context stays live.
func testLongJobKeepsLock(t *testing.T, env Env) {
	sched := everySecond(t)
	logs := &RecordLogger{}
	var runs atomic.Int64
	jobCtx := make(chan context.Context, 3)
	finish := make(chan struct{})
	job := cronlock.Func(func(ctx context.Context) error {
		runs.Add(1)
		select {
		case jobCtx <- ctx:
		default:
		}
		select {
		case <-finish:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	var scheds []*cron.Cron
	for _, inst := range []string{"host-a", "host-b", "host-c"} {
		l := env.NewLocker(t, lockmw.WithTTL(env.TTL))
		c := cron.New(cron.WithSeconds())
		c.Schedule(sched, cronlock.Singleton(l, "long", cronlock.WithSchedule(sched),
			cronlock.WithInstance(inst), cronlock.WithLogger(logs))(job))
		scheds = append(scheds, c)
		c.Start()
	}
	defer StopAll(scheds)
	defer close(finish) // before stopAll, which waits for running jobs

	var ctx context.Context
	select {
	case ctx = <-jobCtx:
	case <-time.After(10 * time.Second):
		t.Fatal("the job never started")
	}
	// The first fire is skipped by two instances, each later one by all
	// three: 3(n+1) skips span at least n more fires, over two TTLs.
	want := 3 * (int(2*env.TTL/time.Second) + 1)
	eventually(t, 20*time.Second+4*env.TTL, "busy skips over two TTLs", func() bool { return logs.Count(false, "skip") >= want })
	if err := context.Cause(ctx); err != nil {
		t.Fatalf("the job's context ended while it ran: %v", err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the job started %d times while the first run held the lock, want 1", n)
	}
}

// A lock deleted from the store under a running job is lost at the next
// renewal: the job's context is cancelled with ErrLost, and the wrapper
// logs the loss.
func testLostLockCancelsJob(t *testing.T, env Env) {
	CheckLossCancelsJob(t, env.NewLocker(t, lockmw.WithTTL(env.TTL)), "lost", 10*time.Second+3*env.TTL, func() { env.Lose(t, "lost") })
}

// CheckLossCancelsJob runs job under a Singleton of l and calls lose while
// it runs: the job's context must be cancelled with ErrLost within limit,
// and the wrapper must log the loss once.
func CheckLossCancelsJob(t *testing.T, l *lockmw.Locker, job string, limit time.Duration, lose func()) {
	t.Helper()
	logs := &RecordLogger{}
	started := make(chan struct{})
	cause := make(chan error, 1)
	j := cronlock.Singleton(l, job, cronlock.WithLogger(logs))(cronlock.Func(func(ctx context.Context) error {
		close(started)
		select {
		case <-ctx.Done():
			cause <- context.Cause(ctx)
		case <-time.After(limit):
			cause <- nil
		}
		return nil
	}))
	done := make(chan struct{})
	go func() { defer close(done); j.Run() }()
	select {
	case <-started:
	case <-done:
		t.Fatalf("the job did not run: %v", logs.Find(true, ""))
	}
	lose()
	<-done
	if err := <-cause; !errors.Is(err, lockmw.ErrLost) {
		t.Fatalf("job context cause = %v, want ErrLost", err)
	}
	if logs.Count(true, "lock lost") != 1 {
		t.Errorf("want one error log of the lost lock, got %v", logs.Find(true, ""))
	}
}

// A panicking job releases the lock at once, even with a long MinHold, and
// the panic reaches the caller unchanged, so cron.Recover still handles it.
func testPanicReleasesLock(t *testing.T, env Env) {
	l, rival := env.NewLocker(t), env.NewLocker(t)
	logs := &RecordLogger{}
	boom := errors.New("boom")
	panicking := cron.FuncJob(func() { panic(boom) })
	singleton := cronlock.Singleton(l, "panicky", cronlock.WithMinHold(time.Minute), cronlock.WithLogger(logs))

	if v := RecoverRun(singleton(panicking)); v != boom {
		t.Fatalf("recovered %v, want the job's own panic value", v)
	}
	lease, err := rival.TryAcquire(context.Background(), "panicky")
	if err != nil {
		t.Fatalf("after the panic the lock is still held: %v", err)
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}

	recovered := &RecordLogger{}
	singleton = cronlock.Singleton(l, "panicky", cronlock.WithMinHold(time.Minute), cronlock.WithLogger(logs))
	if v := RecoverRun(cron.NewChain(cron.Recover(recovered), singleton).Then(panicking)); v != nil {
		t.Fatalf("cron.Recover outside Singleton let %v through", v)
	}
	if recovered.Count(true, "panic") != 1 {
		t.Errorf("cron.Recover logged %v, want the panic", recovered.Find(true, ""))
	}
	lease, err = rival.TryAcquire(context.Background(), "panicky")
	if err != nil {
		t.Fatalf("after the recovered panic the lock is still held: %v", err)
	}
	_ = lease.Release(context.Background())
}

// After a short job returns, the lock stays held for MinHold without
// holding up the caller; with MinHold 0 it is released before Run returns.
func testMinHold(t *testing.T, env Env) {
	l, rival := env.NewLocker(t), env.NewLocker(t)
	quick := cron.FuncJob(func() {})
	ctx := context.Background()

	cronlock.Singleton(l, "held", cronlock.WithMinHold(time.Minute), cronlock.WithLogger(cron.DiscardLogger))(quick).Run()
	if _, err := rival.TryAcquire(ctx, "held"); !errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatalf("right after the job, TryAcquire = %v, want ErrNotAcquired (MinHold 1m)", err)
	}

	cronlock.Singleton(l, "free", cronlock.WithMinHold(0), cronlock.WithLogger(cron.DiscardLogger))(quick).Run()
	lease, err := rival.TryAcquire(ctx, "free")
	if err != nil {
		t.Fatalf("after the job with MinHold 0, TryAcquire = %v, want the lock", err)
	}
	_ = lease.Release(ctx)
}

// MinHold is half the time to the next fire, capped, and DefaultMinHold
// without a schedule.
func testDerivedMinHold(t *testing.T, env Env) {
	l := env.NewLocker(t)
	for i, tc := range []struct {
		opts []cronlock.Option
		want time.Duration
	}{
		{nil, cronlock.DefaultMinHold},
		{[]cronlock.Option{cronlock.WithSchedule(fixedGap(10 * time.Second))}, 5 * time.Second},
		{[]cronlock.Option{cronlock.WithSchedule(cron.Every(time.Hour))}, cronlock.MaxDerivedMinHold},
		{[]cronlock.Option{cronlock.WithSchedule(fixedGap(10 * time.Second)), cronlock.WithMinHold(time.Second)}, time.Second},
		{[]cronlock.Option{cronlock.WithSchedule(fixedGap(10 * time.Second)), cronlock.WithMaxHold(2 * time.Second)}, 2 * time.Second},
	} {
		logs := &RecordLogger{}
		name := "derived-" + string(rune('a'+i))
		opts := append([]cronlock.Option{cronlock.WithLogger(logs)}, tc.opts...)
		cronlock.Singleton(l, name, opts...)(cron.FuncJob(func() {})).Run()
		runs := logs.Find(false, "cronlock: run")
		if len(runs) != 1 {
			t.Fatalf("case %d: want one run log, got %v", i, logs.Find(false, ""))
		}
		if got := runs[0].KV["min_hold"]; got != tc.want {
			t.Errorf("case %d: min_hold = %v, want %v", i, got, tc.want)
		}
	}
}

// A stuck job's context is cancelled with ErrMaxHold once MaxHold passes,
// and its lock is released while it still runs.
func testMaxHold(t *testing.T, env Env) {
	l, rival := env.NewLocker(t), env.NewLocker(t)
	logs := &RecordLogger{}
	cause := make(chan error, 1)
	freed := make(chan struct{})
	job := cronlock.Singleton(l, "stuck", cronlock.WithMaxHold(200*time.Millisecond), cronlock.WithLogger(logs))(
		cronlock.Func(func(ctx context.Context) error {
			select {
			case <-ctx.Done():
				cause <- context.Cause(ctx)
			case <-time.After(10 * time.Second):
				cause <- nil
			}
			<-freed // still running while the test checks the lock
			return nil
		}))
	done := make(chan struct{})
	go func() { defer close(done); job.Run() }()
	select {
	case err := <-cause:
		if !errors.Is(err, cronlock.ErrMaxHold) {
			close(freed)
			t.Fatalf("job context cause = %v, want ErrMaxHold", err)
		}
	case <-done:
		t.Fatalf("the job did not run: %v", logs.Find(true, ""))
	}
	eventually(t, 5*time.Second, "the stuck job's lock released", func() bool {
		lease, err := rival.TryAcquire(context.Background(), "stuck")
		if err == nil {
			_ = lease.Release(context.Background())
		}
		return err == nil
	})
	close(freed)
	<-done
	if logs.Count(true, "MaxHold") != 1 {
		t.Errorf("want one error log of the MaxHold, got %v", logs.Find(true, ""))
	}
}

// Bad arguments give errors matching lockmw's sentinels; Singleton panics
// with them.
func testRejectsBadInput(t *testing.T, env Env) {
	l := env.NewLocker(t)
	long := string(make([]byte, lockmw.MaxKeyLen+1))
	for _, tc := range []struct {
		name   string
		locker *lockmw.Locker
		job    string
		opts   []cronlock.Option
		want   error
	}{
		{"nil locker", nil, "job", nil, lockmw.ErrInvalidOption},
		{"empty name", l, "", nil, lockmw.ErrInvalidKey},
		{"long name", l, long, nil, lockmw.ErrInvalidKey},
		{"negative MinHold", l, "job", []cronlock.Option{cronlock.WithMinHold(-time.Second)}, lockmw.ErrInvalidOption},
		{"zero MaxHold", l, "job", []cronlock.Option{cronlock.WithMaxHold(0)}, lockmw.ErrInvalidOption},
		{"MinHold over MaxHold", l, "job", []cronlock.Option{cronlock.WithMinHold(time.Minute), cronlock.WithMaxHold(time.Second)}, lockmw.ErrInvalidOption},
		{"nil schedule", l, "job", []cronlock.Option{cronlock.WithSchedule(nil)}, lockmw.ErrInvalidOption},
		{"nil logger", l, "job", []cronlock.Option{cronlock.WithLogger(nil)}, lockmw.ErrInvalidOption},
		{"empty instance", l, "job", []cronlock.Option{cronlock.WithInstance("")}, lockmw.ErrInvalidOption},
		{"nil holder client", l, "job", []cronlock.Option{cronlock.WithHolderRecord(nil)}, lockmw.ErrInvalidOption},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := cronlock.New(tc.locker, tc.job, tc.opts...)
			if !errors.Is(err, tc.want) || w != nil {
				t.Fatalf("New = (%v, %v), want nil and an error matching %v", w != nil, err, tc.want)
			}
			defer func() {
				if v, _ := recover().(error); !errors.Is(v, tc.want) {
					t.Fatalf("Singleton panicked with %v, want an error matching %v", v, tc.want)
				}
			}()
			cronlock.Singleton(tc.locker, tc.job, tc.opts...)
		})
	}
}
