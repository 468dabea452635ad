package lockmw_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// logRecords is a slog.Handler that keeps what is logged, for a test to
// read.
type logRecords struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecords) WithGroup(string) slog.Handler      { return h }

// lines returns the records of level at least level whose message
// contains msg, each as its message and attributes.
func (h *logRecords) lines(level slog.Level, msg string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.records {
		if r.Level < level || !strings.Contains(r.Message, msg) {
			continue
		}
		var b strings.Builder
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.String())
			return true
		})
		out = append(out, b.String())
	}
	return out
}

// readmeClient is the client the README and the package documentation
// recommend: short timeouts, no retries inside go-redis.
func readmeClient(o *redis.Options) {
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
	o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled = -1, 1, true
}

// A client whose failed command can outlast a third of the TTL (go-redis'
// defaults) gets one warning from New and NewRedlock, naming its settings
// and where to read about them; the README's client gets none.
func TestNewWarnsAboutASlowClient(t *testing.T) {
	srvs := redistest.StartN(t, 3)
	plain, readme := srvs[0].Client(t), srvs[0].Client(t, readmeClient)
	plains := []redis.UniversalClient{plain, srvs[1].Client(t), srvs[2].Client(t)}
	readmes := []redis.UniversalClient{readme, srvs[1].Client(t, readmeClient), srvs[2].Client(t, readmeClient)}
	const warning = "Redis client"
	for _, tc := range []struct {
		name  string
		new   func(logger *slog.Logger) (*lockmw.Locker, error)
		warns bool
	}{
		{"New, plain client", func(lg *slog.Logger) (*lockmw.Locker, error) { return lockmw.New(plain, lockmw.WithLogger(lg)) }, true},
		{"New, README client", func(lg *slog.Logger) (*lockmw.Locker, error) { return lockmw.New(readme, lockmw.WithLogger(lg)) }, false},
		{"New, README client, 600ms TTL", func(lg *slog.Logger) (*lockmw.Locker, error) {
			return lockmw.New(readme, lockmw.WithLogger(lg), lockmw.WithTTL(600*time.Millisecond))
		}, true},
		{"NewRedlock, plain clients", func(lg *slog.Logger) (*lockmw.Locker, error) {
			return lockmw.NewRedlock([]redis.UniversalClient{readmes[0], plains[1], plains[2]}, lockmw.WithLogger(lg))
		}, true},
		{"NewRedlock, README clients", func(lg *slog.Logger) (*lockmw.Locker, error) {
			return lockmw.NewRedlock(readmes, lockmw.WithLogger(lg))
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &logRecords{}
			l, err := tc.new(slog.New(logs))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			got := logs.lines(slog.LevelWarn, warning)
			switch {
			case !tc.warns && len(got) != 0:
				t.Errorf("warned about a client with short timeouts: %q", got)
			case tc.warns && len(got) != 1:
				t.Errorf("%d warnings, want 1: %q", len(got), got)
			case tc.warns:
				for _, want := range []string{"ReadTimeout=", "WriteTimeout=", "retries=", "ttl=", "README, Redis client settings", "MaxRetries: -1"} {
					if !strings.Contains(got[0], want) {
						t.Errorf("warning %q does not name %q", got[0], want)
					}
				}
			}
		})
	}
}

// acquisitionMark tags the contexts of the acquisitions a test counts.
type acquisitionMark struct{}

// handshakeCounter counts the connection handshakes (HELLO) made for
// contexts tagged with acquisitionMark, started before their context's
// deadline: each is a round trip to Redis that an acquisition may wait
// for before its own commands. (One started past the deadline ends at once,
// waiting for nothing.)
type handshakeCounter struct{ n atomic.Int64 }

func (h *handshakeCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *handshakeCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		dl, bounded := ctx.Deadline()
		if ctx.Value(acquisitionMark{}) != nil && cmd.Name() == "hello" && (!bounded || time.Now().Before(dl)) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *handshakeCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// With the README's client, an acquisition on a paused Redis is reported
// after one round trip: go-redis, whose pipeline connection could not be
// set up, does not try a second connection of its main pool (a second
// timeout) before the acquisition returns ErrUnavailable.
func TestPausedRedisCostsOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t, readmeClient)
	hellos := &handshakeCounter{}
	client.AddHook(hellos)
	l, err := lockmw.New(client)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srv.Pause(t)
	defer srv.Resume(t)
	ctx := context.WithValue(context.Background(), acquisitionMark{}, true)
	for i := range 3 {
		before := hellos.n.Load()
		if _, err := l.TryAcquire(ctx, fmt.Sprint("paused:", i)); !errors.Is(err, lockmw.ErrUnavailable) {
			t.Fatalf("TryAcquire on a paused Redis = %v, want ErrUnavailable", err)
		}
		if n := hellos.n.Load() - before; n != 1 {
			t.Errorf("acquisition %d waited for %d connection handshakes, want 1 (one timeout)", i+1, n)
		}
	}
}
