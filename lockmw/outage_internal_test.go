package lockmw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

// levelCounter is a slog.Handler that counts records by level whose
// message contains msg.
type levelCounter struct {
	msg string
	mu  sync.Mutex
	n   map[slog.Level]int
}

func (h *levelCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *levelCounter) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.msg) {
		h.mu.Lock()
		h.n[r.Level]++
		h.mu.Unlock()
	}
	return nil
}
func (h *levelCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *levelCounter) WithGroup(string) slog.Handler      { return h }

func (h *levelCounter) count(level slog.Level) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[level]
}

// Locks that cannot be given back in one outage are warned about once;
// the others are logged at Debug level.
func TestGiveBackFailuresWarnOncePerOutage(t *testing.T) {
	srv := redistest.Start(t)
	logs := &levelCounter{msg: "could not give back", n: map[slog.Level]int{}}
	l, err := New(srv.Client(t, quickTimeouts), WithLogger(slog.New(logs)), WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	failWhilePaused(t, srv, l, "k0")
	defer srv.Resume(t)
	for i := 1; i < 4; i++ {
		if _, err := l.TryAcquire(context.Background(), fmt.Sprint("k", i)); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("TryAcquire on a paused Redis = %v, want ErrUnavailable", err)
		}
	}
	if err := l.Close(); err != nil { // one last try each, unanswered: given up
		t.Fatal(err)
	}
	if warn, debug := logs.count(slog.LevelWarn), logs.count(slog.LevelDebug); warn != 1 || warn+debug != 4 {
		t.Errorf("4 locks not given back: %d warnings and %d debug lines, want 1 and 3", warn, debug)
	}
}

// An acquisition refused a connection (Redis killed) never reached Redis:
// nothing is handed to the cleaner, and nothing is logged about giving it
// back.
func TestRefusedAcquisitionLeavesNothingToGiveBack(t *testing.T) {
	srv := redistest.Start(t)
	logs := &levelCounter{msg: "could not give back", n: map[slog.Level]int{}}
	l, err := New(srv.Client(t, quickTimeouts, func(o *redis.Options) { o.DialerRetries = 1 }), WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill(t)
	for i := range 5 {
		_, err := l.TryAcquire(context.Background(), fmt.Sprint("k", i))
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("TryAcquire on a killed Redis = %v, want ErrUnavailable", err)
		}
		if !neverSent(err) {
			t.Fatalf("TryAcquire on a killed Redis = %v: not a refused connection", err)
		}
		if !l.cleaner.idle() {
			t.Fatalf("acquisition %d, refused a connection, left a give-back to the cleaner", i+1)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := logs.count(slog.LevelWarn); n != 0 {
		t.Errorf("%d warnings about give-backs for acquisitions that never left", n)
	}
}

// Right after a killed Redis is back, go-redis' main pool can still fail
// every command at once with its last dial error (its dial breaker, opened
// by refused dials during the outage, closes only when its own probe, once
// a second, gets through), while the pipeline pool already works: a lease
// taken then is still released.
func TestReleaseRightAfterRefusedOutage(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t, quickTimeouts, func(o *redis.Options) { o.DialerRetries = 1 })
	l := newTestLocker(t, c, WithTTL(2*time.Second))
	srv.Kill(t)
	// The application's own commands, refused, open the main pool's breaker.
	for range c.Options().PoolSize + 1 {
		if err := c.Ping(context.Background()).Err(); err == nil {
			t.Fatal("PING answered by a killed Redis")
		}
	}
	srv.Restart(t)
	lease, err := l.Acquire(context.Background(), "k", WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("Acquire after the restart: %v", err)
	}
	if err := c.Ping(context.Background()).Err(); err == nil {
		t.Log("the main pool's breaker was closed already: this run shows nothing")
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatalf("Release right after the restart: %v", err)
	}
}

// neverSent reports whether err says that the request found no connection
// to send it on: a failed dial, or no connection free in the pool (as the
// Redis store reads it: package redisstore, neverSent).
func neverSent(err error) bool {
	var op *net.OpError
	return (errors.As(err, &op) && op.Op == "dial") || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted)
}
