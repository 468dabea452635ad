package postgres_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/lockmw"
)

// While PostgreSQL is paused past the TTL, what the Lockers say (the lost
// lease's cause, an acquisition's error, the logs of the lost lease and of
// the lock a failed acquisition could not give back) names PostgreSQL and
// the user's key, and never Redis or a Redis key name.
func TestMessagesNamePostgres(t *testing.T) {
	const key = "messages"
	srv := startServer(t)
	logs := &lockmwtest.SyncBuffer{}
	logger := lockmw.WithLogger(slog.New(slog.NewTextHandler(logs, nil)))
	holder, other := newLocker(t, srv.URL(), logger), newLocker(t, srv.URL(), logger)
	ctx := bg(t)
	lease, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// other's pool gets a connection before the pause: its attempt is then
	// sent, and given back (an attempt that finds no connection sends
	// nothing, and has nothing to give back).
	if l, err := other.TryAcquire(ctx, key+"-warm"); err != nil {
		t.Fatal(err)
	} else {
		_ = l.Release(ctx)
	}

	srv.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume(t)
		}
	}()
	tryCtx, cancel := context.WithTimeout(ctx, testTTL/4)
	_, tryErr := other.TryAcquire(tryCtx, key)
	cancel()
	if tryErr == nil {
		t.Fatal("TryAcquire took the lock while PostgreSQL was paused and the lock held")
	}
	lockmwtest.Eventually(t, 10*testTTL, "the holder's lease context ends", func() bool { return lease.Context().Err() != nil })
	lockmwtest.Eventually(t, 10*testTTL, "a log of the lock the failed attempt could not give back",
		func() bool { return strings.Contains(logs.String(), "could not give back") })
	srv.Resume(t)
	resumed = true

	var lost *lockmw.LostError
	if cause := context.Cause(lease.Context()); !errors.As(cause, &lost) {
		t.Fatalf("lease context cause %v, want a *LostError", cause)
	}
	if lost.Err != nil && strings.Contains(lost.Err.Error(), "has not answered") && !strings.Contains(lost.Err.Error(), "PostgreSQL") {
		t.Errorf("the unanswered renewal is not said to be PostgreSQL's: %v", lost)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "could not give back") && (!strings.Contains(line, "PostgreSQL") || !strings.Contains(line, "key="+key)) {
			t.Errorf("the give-back log does not name PostgreSQL and the key %q: %s", key, line)
		}
	}
	for _, said := range []string{lost.Error(), tryErr.Error(), logs.String()} {
		if strings.Contains(strings.ToLower(said), "redis") || strings.Contains(said, "{"+key+"}") {
			t.Errorf("a Locker on PostgreSQL speaks of Redis or its key names: %s", said)
		}
	}
}
