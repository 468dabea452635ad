package cronsuite

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
)

// The helpers below are shared by the suite and by cronlock's own tests.

// SecondsParser parses six-field specs, seconds first.
var SecondsParser = cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// eventually polls cond until it holds, failing the test after limit.
var eventually = lockmwtest.Eventually

// A LogEntry is one call to a RecordLogger.
type LogEntry struct {
	Err bool // logged with Error
	Msg string
	KV  map[string]any // the key-value pairs, and the error under "error"
}

// A RecordLogger is a cron.Logger that keeps every entry.
type RecordLogger struct {
	mu      sync.Mutex
	entries []LogEntry
}

// Info records an Info entry.
func (l *RecordLogger) Info(msg string, kv ...any) { l.add(false, nil, msg, kv) }

// Error records an Error entry.
func (l *RecordLogger) Error(err error, msg string, kv ...any) {
	l.add(true, err, msg, kv)
}

func (l *RecordLogger) add(isErr bool, err error, msg string, kv []any) {
	e := LogEntry{Err: isErr, Msg: msg, KV: map[string]any{}}
	for i := 0; i+1 < len(kv); i += 2 {
		e.KV[fmt.Sprint(kv[i])] = kv[i+1]
	}
	if err != nil {
		e.KV["error"] = err
	}
	l.mu.Lock()
	l.entries = append(l.entries, e)
	l.mu.Unlock()
}

// Find returns the entries whose message contains part, logged with Error
// if isErr.
func (l *RecordLogger) Find(isErr bool, part string) []LogEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []LogEntry
	for _, e := range l.entries {
		if e.Err == isErr && strings.Contains(e.Msg, part) {
			out = append(out, e)
		}
	}
	return out
}

// Count returns how many entries Find returns.
func (l *RecordLogger) Count(isErr bool, part string) int { return len(l.Find(isErr, part)) }

// counting is a cron.JobWrapper that counts calls before passing them on.
func counting(n *atomic.Int64) cron.JobWrapper {
	return func(j cron.Job) cron.Job {
		return cron.FuncJob(func() { n.Add(1); j.Run() })
	}
}

// Delayed is a cron.JobWrapper that starts the job d late: a host whose
// timer fires late.
func Delayed(d time.Duration) cron.JobWrapper {
	return func(j cron.Job) cron.Job {
		return cron.FuncJob(func() { time.Sleep(d); j.Run() })
	}
}

// everySecond is the schedule "* * * * * *": each whole second.
func everySecond(t testing.TB) cron.Schedule {
	t.Helper()
	s, err := SecondsParser.Parse("* * * * * *")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// everyTwoSeconds is the schedule "*/2 * * * * *": each even second.
func everyTwoSeconds(t testing.TB) cron.Schedule {
	t.Helper()
	s, err := SecondsParser.Parse("*/2 * * * * *")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// StopAll stops every Cron, waiting for their running jobs.
func StopAll(scheds []*cron.Cron) {
	var dones []context.Context
	for _, c := range scheds {
		dones = append(dones, c.Stop())
	}
	for _, d := range dones {
		<-d.Done()
	}
}

// RecoverRun runs j and returns what it panicked with (nil if it did not).
func RecoverRun(j cron.Job) (v any) {
	defer func() { v = recover() }()
	j.Run()
	return nil
}

// fixedGap is a schedule whose next fire is always gap away.
type fixedGap time.Duration

func (g fixedGap) Next(t time.Time) time.Time { return t.Add(time.Duration(g)) }

// A FireTally counts the runs of each fire, by scheduled time.
type FireTally struct {
	Started time.Time // when every scheduler had started
	mu      sync.Mutex
	runs    map[time.Time][]string // fire → instances that ran it
}

// Add records a run of the fire at by instance inst.
func (f *FireTally) Add(at time.Time, inst string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.runs == nil {
		f.runs = map[time.Time][]string{}
	}
	f.runs[at] = append(f.runs[at], inst)
}

// Distinct returns how many fires ran.
func (f *FireTally) Distinct() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.runs)
}

// Of returns the instances that ran the fire at.
func (f *FireTally) Of(at time.Time) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.runs[at]...)
}

// All returns the instances that ran each fire.
func (f *FireTally) All() map[time.Time][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.runs)
}

// Check fails t unless every fire, each interval, from the third whole
// interval after every scheduler had started, to before the last fire
// run, ran exactly once. Earlier fires belong to the start: a host whose
// clock is off by the whole interval can win a fire the others did not
// schedule, or claim its next one while another instance still runs the
// first. It returns how many fires ran 0, 1 and 2+ times.
func (f *FireTally) Check(t *testing.T, every time.Duration) (hist [3]int) {
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
	for at := f.Started.Truncate(every).Add(3 * every); at.Before(fires[len(fires)-1]); at = at.Add(every) {
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
