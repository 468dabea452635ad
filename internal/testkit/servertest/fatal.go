//go:build unix

package servertest

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
)

// FatalMessage runs fn, in a goroutine of its own, with a testing.TB whose
// Fatalf and Fatal record the message and end that goroutine instead of
// failing t; everything else (Cleanup, Helper, Logf...) goes to t. It
// returns the message, or "" if fn returned normally: for the tests of a
// launcher's failures (a bad flag, a missing binary).
func FatalMessage(t testing.TB, fn func(tb testing.TB)) string {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.msg
}

// fatalTB is FatalMessage's testing.TB.
type fatalTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fatalTB) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }
