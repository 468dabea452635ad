package lockmwtest

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// Logs is a slog.Handler that keeps every record, for a test to read
// (give a Locker slog.New(logs) through WithLogger). Its zero value is
// ready to use; it is safe for concurrent use.
type Logs struct {
	mu      sync.Mutex
	records []slog.Record
}

// Enabled reports true: every level is kept.
func (h *Logs) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps r.
func (h *Logs) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}

// WithAttrs returns h: attributes given to a derived logger are not kept.
func (h *Logs) WithAttrs([]slog.Attr) slog.Handler { return h }

// WithGroup returns h: groups are not kept.
func (h *Logs) WithGroup(string) slog.Handler { return h }

// Find returns the records of level min or above whose message contains
// msg, in the order they were logged.
func (h *Logs) Find(min slog.Level, msg string) []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []slog.Record
	for _, r := range h.records {
		if r.Level >= min && strings.Contains(r.Message, msg) {
			out = append(out, r)
		}
	}
	return out
}

// Text returns r's message followed by its attributes, each as " key=value".
func Text(r slog.Record) string {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	return b.String()
}

// Texts returns Text of each of rs.
func Texts(rs []slog.Record) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, Text(r))
	}
	return out
}
