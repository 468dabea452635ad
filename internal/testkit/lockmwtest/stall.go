package lockmwtest

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw"
)

// A WatchdogStall holds up a Locker's watchdog, as a host that fires timers
// late does: while it is stalled, the Locker's leases are neither renewed
// nor ended by their timers, so a lease's deadline passes while its context
// is still live, and only lockmw's own deadline checks (Lease.Valid) can
// tell.
//
// It works through the Locker's logger (give it Logger with
// lockmw.WithLogger): the watchdog reports a lease lost at its deadline from
// its own goroutine, and for the lease Stall takes that report blocks until
// Resume. A test using it should check that the lease it watches still has
// a live context when the deadline has passed, so that it fails, rather
// than passes for the wrong reason, if lockmw stops logging there.
type WatchdogStall struct {
	key     string
	stalled chan struct{}
	resume  chan struct{}
	once    sync.Once // closes stalled
	resumed sync.Once // closes resume
}

// stallMessage is what the watchdog logs for a lease it ends at its
// deadline (keepalive.go, finishLost).
const stallMessage = "lockmw: lock lost; its lease context is cancelled"

// NewWatchdogStall returns a WatchdogStall not stalled yet.
func NewWatchdogStall() *WatchdogStall {
	return &WatchdogStall{
		key:     "lockmwtest-watchdog-stall-" + time.Now().Format("150405.000000000"),
		stalled: make(chan struct{}),
		resume:  make(chan struct{}),
	}
}

// Logger returns the logger to give the Locker to stall. It drops every
// record.
func (w *WatchdogStall) Logger() *slog.Logger { return slog.New(stallHandler{w}) }

// Stall stalls the watchdog of l, a Locker made with Logger, and returns once
// it is stalled: it takes a lease that expires at once (WithoutWatchdog,
// MinTTL-sized) and waits until the watchdog reports it lost. The watchdog
// resumes on Resume or at the end of the test (before l's Close, if l was
// made before Stall was called).
func (w *WatchdogStall) Stall(t testing.TB, l *lockmw.Locker) {
	t.Helper()
	t.Cleanup(w.Resume)
	Eventually(t, 10*time.Second, "a lease that expires at once", func() bool {
		// Its validity is a few ms: on a loaded host the answer can come
		// too late for it (ErrUnavailable); then try again.
		_, err := l.TryAcquire(context.Background(), w.key, lockmw.WithoutWatchdog(), lockmw.WithLeaseTTL(5*lockmw.MinTTL))
		if err != nil && !errors.Is(err, lockmw.ErrUnavailable) {
			t.Fatalf("stalling the watchdog: %v", err)
		}
		return err == nil
	})
	select {
	case <-w.stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog did not report the stall lease lost: is the Locker made with WatchdogStall.Logger?")
	}
}

// Resume lets the watchdog go on. It may be called more than once.
func (w *WatchdogStall) Resume() { w.resumed.Do(func() { close(w.resume) }) }

// stallHandler is the slog.Handler of WatchdogStall.Logger.
type stallHandler struct{ w *WatchdogStall }

func (h stallHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h stallHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h stallHandler) WithGroup(string) slog.Handler            { return h }

func (h stallHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message != stallMessage {
		return nil
	}
	ours := false
	r.Attrs(func(a slog.Attr) bool {
		ours = a.Key == "key" && a.Value.String() == h.w.key
		return !ours
	})
	if ours {
		h.w.once.Do(func() { close(h.w.stalled) })
		<-h.w.resume
	}
	return nil
}
