package lockmw_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
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
				for _, want := range []string{"ReadTimeout=", "WriteTimeout=", "retries=", "ttl=", "README, Quickstart", "MaxRetries: -1"} {
					if !strings.Contains(got[0], want) {
						t.Errorf("warning %q does not name %q", got[0], want)
					}
				}
			}
		})
	}
}
