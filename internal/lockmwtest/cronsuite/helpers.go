package cronsuite

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

// secondsParser parses six-field specs, seconds first.
var secondsParser = cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// eventually polls cond until it holds, failing the test after limit.
func eventually(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v", what, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// logEntry is one call to a recordLogger.
type logEntry struct {
	err bool // logged with Error
	msg string
	kv  map[string]any
}

// recordLogger is a cron.Logger that keeps every entry.
type recordLogger struct {
	mu      sync.Mutex
	entries []logEntry
}

func (l *recordLogger) Info(msg string, kv ...any) { l.add(false, nil, msg, kv) }

func (l *recordLogger) Error(err error, msg string, kv ...any) {
	l.add(true, err, msg, kv)
}

func (l *recordLogger) add(isErr bool, err error, msg string, kv []any) {
	e := logEntry{err: isErr, msg: msg, kv: map[string]any{}}
	for i := 0; i+1 < len(kv); i += 2 {
		e.kv[fmt.Sprint(kv[i])] = kv[i+1]
	}
	if err != nil {
		e.kv["error"] = err
	}
	l.mu.Lock()
	l.entries = append(l.entries, e)
	l.mu.Unlock()
}

// find returns the entries whose message contains part, logged with Error
// if isErr.
func (l *recordLogger) find(isErr bool, part string) []logEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logEntry
	for _, e := range l.entries {
		if e.err == isErr && strings.Contains(e.msg, part) {
			out = append(out, e)
		}
	}
	return out
}

func (l *recordLogger) count(isErr bool, part string) int { return len(l.find(isErr, part)) }

// counting is a cron.JobWrapper that counts calls before passing them on.
func counting(n *atomic.Int64) cron.JobWrapper {
	return func(j cron.Job) cron.Job {
		return cron.FuncJob(func() { n.Add(1); j.Run() })
	}
}

// delayed is a cron.JobWrapper that starts the job d late: a host whose
// timer fires late.
func delayed(d time.Duration) cron.JobWrapper {
	return func(j cron.Job) cron.Job {
		return cron.FuncJob(func() { time.Sleep(d); j.Run() })
	}
}

// everySecond is the schedule "* * * * * *": each whole second.
func everySecond(t testing.TB) cron.Schedule {
	t.Helper()
	s, err := secondsParser.Parse("* * * * * *")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// stopAll stops every Cron, waiting for their running jobs.
func stopAll(scheds []*cron.Cron) {
	var dones []context.Context
	for _, c := range scheds {
		dones = append(dones, c.Stop())
	}
	for _, d := range dones {
		<-d.Done()
	}
}

// recoverRun runs j and returns what it panicked with (nil if it did not).
func recoverRun(j cron.Job) (v any) {
	defer func() { v = recover() }()
	j.Run()
	return nil
}

// fixedGap is a schedule whose next fire is always gap away.
type fixedGap time.Duration

func (g fixedGap) Next(t time.Time) time.Time { return t.Add(time.Duration(g)) }

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
// interval after every scheduler had started, to before the last fire
// run, ran exactly once. Earlier fires belong to the start: a host whose
// clock is off by the whole interval can win a fire the others did not
// schedule, or claim its next one while another instance still runs the
// first.
func (f *fireTally) check(t *testing.T, every time.Duration) {
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
		if n := len(f.runs[at]); n != 1 {
			bad = append(bad, fmt.Sprintf("%s: %d runs %v", at.Format("15:04:05.000"), n, f.runs[at]))
		}
	}
	if len(bad) > 0 {
		for _, at := range fires {
			t.Logf("%s %v", at.Format("15:04:05.000"), f.runs[at])
		}
		t.Errorf("fires not run exactly once:\n%s", strings.Join(bad, "\n"))
	}
}
