package servertest

import (
	"bytes"
	"sync"
)

const (
	// logCap is how many bytes of a server's output are kept in memory.
	logCap = 256 << 10
	// tailLines is how many lines of output Tail quotes.
	tailLines = 40
)

// logBuffer collects a server's stdout and stderr, keeping the last logCap
// bytes. It is written by os/exec's copying goroutines and read by tests.
type logBuffer struct {
	mu    sync.Mutex
	buf   []byte
	total int64 // bytes written since the start; buf holds the last ones
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	b.total += int64(len(p))
	if over := len(b.buf) - logCap; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// offset returns how many bytes have been written so far.
func (b *logBuffer) offset() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// since returns what was written from offset from on, as far as the
// buffer still holds it.
func (b *logBuffer) since(from int64) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	start := b.total - int64(len(b.buf))
	if from <= start {
		return string(b.buf)
	}
	return string(b.buf[from-start:])
}

// tail returns the last tailLines lines of output, formatted for a failure
// message.
func (b *logBuffer) tail(name string) string {
	out := bytes.TrimRight([]byte(b.String()), "\n")
	if len(out) == 0 {
		return name + " output: (empty)"
	}
	lines := bytes.Split(out, []byte("\n"))
	if len(lines) > tailLines {
		lines = lines[len(lines)-tailLines:]
	}
	return name + " output (last lines):\n\t" + string(bytes.Join(lines, []byte("\n\t")))
}
