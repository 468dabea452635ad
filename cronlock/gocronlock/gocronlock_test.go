package gocronlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jonboulle/clockwork"

	"github.com/lockmw/lockmw/cronlock/gocronlock"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// skewedClock is the clock of a host whose clock reads offset ahead of the
// true time and whose timers fire late.
type skewedClock struct {
	clockwork.Clock
	offset, late time.Duration
}

func (c skewedClock) Now() time.Time                  { return time.Now().Add(c.offset) }
func (c skewedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c skewedClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }
func (c skewedClock) AfterFunc(d time.Duration, f func()) clockwork.Timer {
	return c.Clock.AfterFunc(d+c.late, f)
}

// logCounter is a slog.Handler counting records by level and message.
type logCounter struct {
	mu      sync.Mutex
	records []string // "LEVEL msg"
}

func (h *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCounter) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logCounter) WithGroup(string) slog.Handler            { return h }
func (h *logCounter) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	h.mu.Lock()
	h.records = append(h.records, b.String())
	h.mu.Unlock()
	return nil
}

func (h *logCounter) find(prefix string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.records {
		if strings.HasPrefix(r, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// tally counts runs per fire.
type tally struct {
	mu   sync.Mutex
	runs map[time.Time][]string
}

func (t *tally) add(at time.Time, inst string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.runs[at] = append(t.runs[at], inst)
}

func (t *tally) distinct() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.runs)
}

// Three gocron schedulers, one late or with its clock off, run each fire
// of a one-second cron job exactly once through gocronlock.
func TestOneRunPerFire(t *testing.T) {
	for _, tc := range []struct {
		name         string
		offset, late time.Duration // the third host's
	}{
		{"in step", 0, 0},
		{"one timer 300ms late", 0, 300 * time.Millisecond},
		{"one timer 700ms late", 0, 700 * time.Millisecond},
		{"one clock 1s ahead", time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			logs := &logCounter{}
			runs := &tally{runs: map[time.Time][]string{}}
			var scheds []gocron.Scheduler
			for i, name := range []string{"host-a", "host-b", "host-c"} {
				clock := skewedClock{Clock: clockwork.NewRealClock()}
				if i == 2 {
					clock.offset, clock.late = tc.offset, tc.late
				}
				client := srv.Client(t)
				jl, err := gocronlock.New(lockmwtest.NewLockerOn(t, client), client,
					gocronlock.WithInstance(name), gocronlock.WithClock(clock), gocronlock.WithLogger(slog.New(logs)))
				if err != nil {
					t.Fatal(err)
				}
				s, err := gocron.NewScheduler(gocron.WithClock(clock))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := jl.NewJob(s, "report", "* * * * * *", true, func(ctx context.Context) error {
					at, ok := gocronlock.FireTime(ctx)
					if !ok {
						t.Error("the job's context has no fire time")
					}
					runs.add(at, name)
					time.Sleep(10 * time.Millisecond)
					return ctx.Err()
				}); err != nil {
					t.Fatal(err)
				}
				scheds = append(scheds, s)
			}
			for _, s := range scheds {
				s.Start()
			}
			started := time.Now()
			deadline := time.Now().Add(30 * time.Second)
			for runs.distinct() < 10 {
				if time.Now().After(deadline) {
					t.Fatalf("only %d fires ran in 30s", runs.distinct())
				}
				time.Sleep(10 * time.Millisecond)
			}
			for _, s := range scheds {
				if err := s.Shutdown(); err != nil {
					t.Error(err)
				}
			}

			runs.mu.Lock()
			defer runs.mu.Unlock()
			var fires []time.Time
			for at := range runs.runs {
				fires = append(fires, at)
			}
			sort.Slice(fires, func(i, j int) bool { return fires[i].Before(fires[j]) })
			var hist [3]int
			var bad []string
			for at := started.Truncate(time.Second).Add(3 * time.Second); at.Before(fires[len(fires)-1]); at = at.Add(time.Second) {
				n := len(runs.runs[at])
				hist[min(n, 2)]++
				if n != 1 {
					bad = append(bad, fmt.Sprintf("%s: %d runs %v", at.Format("15:04:05.000"), n, runs.runs[at]))
				}
			}
			t.Logf("fires run 0 times: %d, once: %d, 2+ times: %d", hist[0], hist[1], hist[2])
			if len(bad) > 0 {
				t.Errorf("fires not run exactly once:\n%s\nlogs:\n%s", strings.Join(bad, "\n"), strings.Join(logs.find(""), "\n"))
			}
			if errs := logs.find("ERROR"); len(errs) > 0 {
				t.Errorf("error logs, want none:\n%s", strings.Join(errs, "\n"))
			}
			if n := len(logs.find("INFO gocronlock: skip: fire claimed by another instance")); n == 0 {
				t.Error("no instance logged a claimed fire")
			}
		})
	}
}

// Bad input is refused with errors matched by errors.Is.
func TestBadInput(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	locker := lockmwtest.NewLockerOn(t, client)
	if _, err := gocronlock.New(nil, client); !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Errorf("New(nil Locker) = %v, want ErrInvalidOption", err)
	}
	if _, err := gocronlock.New(locker, client, gocronlock.WithInstance("")); !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Errorf("WithInstance(\"\") = %v, want ErrInvalidOption", err)
	}
	jl, err := gocronlock.New(locker, client)
	if err != nil {
		t.Fatal(err)
	}
	s, err := gocron.NewScheduler()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Shutdown() }()
	fn := func(context.Context) error { return nil }
	if _, err := jl.NewJob(s, "", "* * * * *", false, fn); !errors.Is(err, lockmw.ErrInvalidKey) {
		t.Errorf("NewJob(\"\") = %v, want ErrInvalidKey", err)
	}
	if _, err := jl.NewJob(s, "a", "* * * * *", false, fn); err != nil {
		t.Fatal(err)
	}
	if _, err := jl.NewJob(s, "a", "*/5 * * * *", false, fn); !errors.Is(err, gocronlock.ErrDuplicateJob) {
		t.Errorf("second NewJob(\"a\") = %v, want ErrDuplicateJob", err)
	}
	if _, err := jl.Lock(context.Background(), "not-added"); !errors.Is(err, gocronlock.ErrUnknownJob) {
		t.Errorf("Lock of a job not added with NewJob = %v, want ErrUnknownJob", err)
	}
}

// A fire that finds the run of the previous one still going is skipped on
// every instance (ErrRunning, logged with the running fire); with
// WithQueue it runs after it. Runs never overlap, and the job gets a lease
// context that is live while it runs.
func TestRunStillGoing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		queue bool
	}{{"skip (default)", false}, {"WithQueue", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			logs := &logCounter{}
			runs := &tally{runs: map[time.Time][]string{}}
			var mu sync.Mutex
			running, overlaps := 0, 0
			var long time.Time
			var scheds []gocron.Scheduler
			for _, name := range []string{"host-a", "host-b"} {
				client := srv.Client(t)
				opts := []gocronlock.Option{gocronlock.WithInstance(name), gocronlock.WithLogger(slog.New(logs))}
				if tc.queue {
					opts = append(opts, gocronlock.WithQueue())
				}
				jl, err := gocronlock.New(lockmwtest.NewLockerOn(t, client, lockmw.WithTTL(time.Second)), client, opts...)
				if err != nil {
					t.Fatal(err)
				}
				s, err := gocron.NewScheduler()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := jl.NewJob(s, "slow", "* * * * * *", true, func(ctx context.Context) error {
					at, _ := gocronlock.FireTime(ctx)
					mu.Lock()
					running++
					if running > 1 {
						overlaps++
					}
					isLong := long.IsZero() && runs.distinct() == 2
					if isLong {
						long = at
					}
					mu.Unlock()
					runs.add(at, name)
					if isLong {
						time.Sleep(1500 * time.Millisecond) // spans the next fire and a lease TTL
						if err := context.Cause(ctx); err != nil {
							t.Errorf("the lease context ended during the run: %v", err)
						}
					}
					mu.Lock()
					running--
					mu.Unlock()
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				scheds = append(scheds, s)
				s.Start()
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				mu.Lock()
				l := long
				mu.Unlock()
				if !l.IsZero() {
					runs.mu.Lock()
					done := len(runs.runs[l.Add(3*time.Second)]) > 0
					runs.mu.Unlock()
					if done {
						break
					}
				}
				if time.Now().After(deadline) {
					t.Fatal("no long run and three fires after it in 20s")
				}
				time.Sleep(10 * time.Millisecond)
			}
			for _, s := range scheds {
				_ = s.Shutdown()
			}
			mu.Lock()
			defer mu.Unlock()
			if overlaps != 0 {
				t.Errorf("%d runs overlapped another", overlaps)
			}
			runs.mu.Lock()
			defer runs.mu.Unlock()
			for at, who := range runs.runs {
				if len(who) != 1 {
					t.Errorf("fire %v ran %d times: %v", at, len(who), who)
				}
			}
			next := len(runs.runs[long.Add(time.Second)])
			if tc.queue {
				if next != 1 {
					t.Errorf("with WithQueue the fire after the long run ran %d times, want 1", next)
				}
				return
			}
			if next != 0 {
				t.Errorf("the fire after the long run ran %d times, want it skipped", next)
			}
			want := "INFO gocronlock: skip: the run of an earlier fire is still going job=slow"
			found := false
			for _, r := range logs.find(want) {
				if strings.Contains(r, "running_fire="+long.String()) && strings.Contains(r, "running_on=host-") {
					found = true
				}
			}
			if !found {
				t.Errorf("no skip log names the running fire %v and its host:\n%s", long, strings.Join(logs.find(""), "\n"))
			}
		})
	}
}

// Fires that no instance claimed are logged at Error by the instance that
// claims the next one.
func TestGapIsError(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	last := time.Now().Truncate(time.Second).Add(-5 * time.Second)
	if err := client.HSet(context.Background(), "cronlock:{gappy}:fired", "fire", last.UnixMilli(), "by", "host-gone").Err(); err != nil {
		t.Fatal(err)
	}
	logs := &logCounter{}
	jl, err := gocronlock.New(lockmwtest.NewLockerOn(t, client), client, gocronlock.WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := gocron.NewScheduler()
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 10)
	if _, err := jl.NewJob(s, "gappy", "* * * * * *", true, func(context.Context) error { ran <- struct{}{}; return nil }); err != nil {
		t.Fatal(err)
	}
	s.Start()
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the job never ran")
	}
	_ = s.Shutdown()
	gaps := logs.find("ERROR gocronlock: fires run by no instance")
	if len(gaps) == 0 || !strings.Contains(gaps[0], "previous_by=host-gone") {
		t.Errorf("no Error log of the fires after host-gone's claim:\n%s", strings.Join(logs.find(""), "\n"))
	}
}

// The claim record is under the Locker's prefix: applications sharing a
// Redis with different prefixes claim their fires apart.
func TestRecordUnderPrefix(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ran := map[string]chan struct{}{"billing:": make(chan struct{}, 1), "mail:": make(chan struct{}, 1)}
	var scheds []gocron.Scheduler
	for _, prefix := range []string{"billing:", "mail:"} {
		jl, err := gocronlock.New(lockmwtest.NewLockerOn(t, client, lockmw.WithPrefix(prefix)), client,
			gocronlock.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		s, err := gocron.NewScheduler()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := jl.NewJob(s, "cleanup", "* * * * * *", true, func(ctx context.Context) error {
			select {
			case ran[prefix] <- struct{}{}:
			default:
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		scheds = append(scheds, s)
		s.Start()
	}
	<-ran["billing:"] // each application runs the fires of its cleanup
	<-ran["mail:"]
	for _, s := range scheds {
		if err := s.Shutdown(); err != nil {
			t.Error(err)
		}
	}
	for _, key := range []string{"billing:cronlock:{cleanup}:claim", "mail:cronlock:{cleanup}:claim"} {
		if n, err := client.Exists(context.Background(), key).Result(); err != nil || n != 1 {
			t.Errorf("record %s: exists %d, %v", key, n, err)
		}
	}
}
