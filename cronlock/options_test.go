//lint:file-ignore SA1019 the deprecated Singleton and New keep working: their tests use them on purpose.

package cronlock_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/lockmw/lockmw/cronlock"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// Nil options are skipped by New, NewScheduler and AddJob: the job runs
// with the others.
func TestNilOptionsAreSkipped(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv)
	var nilOpt cronlock.Option
	var runs atomic.Int64
	w, err := cronlock.New(l, "nilopts", nil, cronlock.WithMinHold(0), nilOpt)
	if err != nil {
		t.Fatalf("New with nil options: %v", err)
	}
	w(cron.FuncJob(func() { runs.Add(1) })).Run()
	if n := runs.Load(); n != 1 {
		t.Errorf("the job ran %d times, want 1", n)
	}
	s, err := cronlock.NewScheduler(cron.New(), l, nil, nil, cronlock.WithInstance("host-a"), nilOpt)
	if err != nil {
		t.Fatalf("NewScheduler with nil options: %v", err)
	}
	if _, err := s.AddJob("nilopts-scheduled", "@hourly", cron.FuncJob(func() {}), nilOpt, nil); err != nil {
		t.Errorf("AddJob with nil options: %v", err)
	}
}

// Option mistakes are found by the constructors (which return them, all of
// them, matching lockmw.ErrInvalidOption and naming each option), never by
// the option functions.
func TestConstructorsReturnEveryOptionMistake(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv)
	var nilClient *redis.Client
	_, err := cronlock.New(l, "job",
		cronlock.WithMinHold(-time.Second), cronlock.WithMaxHold(0), cronlock.WithSchedule(nil),
		cronlock.WithInstance(""), cronlock.WithHolderRecord(nilClient), cronlock.WithLogger(nil))
	if !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Fatalf("New = %v, want ErrInvalidOption", err)
	}
	for _, name := range []string{"cronlock.WithMinHold(-1s)", "cronlock.WithMaxHold(0s)", "cronlock.WithSchedule(nil)",
		`cronlock.WithInstance("")`, "cronlock.WithHolderRecord(nil)", "cronlock.WithLogger(nil)"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("New = %q, want it to name %s", err, name)
		}
	}
	if _, err := cronlock.New(l, "job", cronlock.WithMinHold(time.Minute), cronlock.WithMaxHold(time.Second)); !errors.Is(err, lockmw.ErrInvalidOption) ||
		!strings.Contains(err.Error(), "cronlock.WithMinHold(1m0s): exceeds cronlock.WithMaxHold(1s)") {
		t.Errorf("New with MinHold over MaxHold = %v, want ErrInvalidOption naming both", err)
	}

	// The Scheduler's options, given to every job, are checked by
	// NewScheduler; the hold options of Singleton are refused there.
	_, err = cronlock.NewScheduler(cron.New(), l, nil, cronlock.WithParser(nil), cronlock.WithMinHold(time.Second), cronlock.WithSchedule(cron.Every(time.Hour)))
	if !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Fatalf("NewScheduler = %v, want ErrInvalidOption", err)
	}
	for _, name := range []string{"cronlock.WithParser(nil)", "cronlock.WithMinHold(1s)", "cronlock.WithSchedule"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("NewScheduler = %q, want it to name %s", err, name)
		}
	}

	// A later valid value replaces an invalid one: options are checked once
	// applied.
	if _, err := cronlock.New(l, "job", cronlock.WithMaxHold(0), cronlock.WithMaxHold(time.Second)); err != nil {
		t.Errorf("New with WithMaxHold(0) then WithMaxHold(1s) = %v, want nil", err)
	}
}
