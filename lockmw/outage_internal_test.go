package lockmw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/redistest"
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
