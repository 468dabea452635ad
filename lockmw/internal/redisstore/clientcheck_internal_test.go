package redisstore

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// warnings is a slog.Handler that keeps the text of each warning.
type warnings struct {
	mu    sync.Mutex
	lines []string
}

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *warnings) WithGroup(string) slog.Handler            { return w }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return nil
	}
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	w.mu.Lock()
	w.lines = append(w.lines, b.String())
	w.mu.Unlock()
	return nil
}

// On a Cluster client the check counts MaxRedirects as retries, says so,
// and advises a timeout that passes with them; a Cluster client that
// follows the advice gets no warning. (The check reads the options only:
// the clients never connect.)
func TestClusterClientCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts redis.ClusterOptions
		want []string // in the one warning; none if nil
	}{
		{"go-redis defaults", redis.ClusterOptions{},
			[]string{"ReadTimeout=5s", "retries=3", "PipelinePoolSize=0", "two timeouts", "at most 833ms for this TTL",
				"the 3 MaxRedirects count as retries", "MaxRetries: -1", "PipelinePoolSize: -1"}},
		{"no pipeline pool of its own, long timeouts", redis.ClusterOptions{ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1, PipelinePoolSize: -1},
			[]string{"ReadTimeout=1s", "retries=3", "one failed command can take 4s", "at most 833ms for this TTL"}},
		{"the advised client", redis.ClusterOptions{ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, MaxRetries: -1, PipelinePoolSize: -1}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.Addrs = []string{"127.0.0.1:1"}
			c := redis.NewClusterClient(&o)
			defer c.Close()
			w := &warnings{}
			warnSlowClient(slog.New(w), []redis.UniversalClient{c}, 10*time.Second)
			switch {
			case tc.want == nil && len(w.lines) != 0:
				t.Errorf("warned: %q", w.lines)
			case tc.want != nil && len(w.lines) != 1:
				t.Errorf("%d warnings, want 1: %q", len(w.lines), w.lines)
			case tc.want != nil:
				for _, want := range tc.want {
					if !strings.Contains(w.lines[0], want) {
						t.Errorf("warning %q does not say %q", w.lines[0], want)
					}
				}
			}
		})
	}
}
