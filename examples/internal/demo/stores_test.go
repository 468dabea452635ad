package demo

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"sync"
	"testing"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// syncBuffer is a bytes.Buffer that two goroutines may write to.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// TestActOnePrintsRisingFences: the examples' headers promise that Act 1's
// holders each hold with a fence that rises from one holder to the next;
// Act 1 prints each holder's fence, and they rise.
func TestActOnePrintsRisingFences(t *testing.T) {
	srv := redistest.Start(t)
	var lockers []*lockmw.Locker
	for range 2 {
		l, err := lockmw.New(srv.Client(t), lockmw.WithLogger(Logger()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		lockers = append(lockers, l)
	}
	var w syncBuffer
	old := out
	out = &w
	t.Cleanup(func() { out = old })
	if err := Run(context.Background(), lockers[0], lockers[1]); err != nil {
		t.Fatal(err)
	}
	text := w.buf.String()
	act1, _, _ := bytes.Cut([]byte(text), []byte("== Act 2"))
	m := regexp.MustCompile(`instance-[ab] holds report:daily with fence (\d+)`).FindAllSubmatch(act1, -1)
	if len(m) != 6 {
		t.Fatalf("Act 1 printed %d holdings with a fence, want 6:\n%s", len(m), text)
	}
	var last uint64
	for _, s := range m {
		f, _ := strconv.ParseUint(string(s[1]), 10, 64)
		if f <= last {
			t.Fatalf("Act 1's fences do not rise:\n%s", text)
		}
		last = f
	}
}
