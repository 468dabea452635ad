package cronlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/lockmw/lockmw/internal/lockmwtest"
)

// newLocker and newLockerOn return a Locker closed at cleanup.
var (
	newLocker   = lockmwtest.NewLocker
	newLockerOn = lockmwtest.NewLockerOn
)

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

// delayed is a cron.JobWrapper that starts the job d late: a host whose
// timer fires late.
func delayed(d time.Duration) cron.JobWrapper {
	return func(j cron.Job) cron.Job {
		return cron.FuncJob(func() { time.Sleep(d); j.Run() })
	}
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
