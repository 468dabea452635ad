package redisstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"
)

// A call failed unsent behind a timeout took nothing (the Locker gives
// nothing back for it), whatever wraps its error; the timeout it names
// may have run.
func TestNotSentLeftNothing(t *testing.T) {
	timeout := fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded)
	notSent := fmt.Errorf("lockmw: store unavailable: acquire %q: %w", "k", &notSentError{timeout: timeout})
	if mayHaveRun(notSent) {
		t.Errorf("mayHaveRun(%v) = true, want false: it was never sent", notSent)
	}
	if !mayHaveRun(timeout) {
		t.Errorf("mayHaveRun(%v) = false, want true", timeout)
	}
}

// Only the client's own timeouts say that a node did not answer: not a
// timeout whose call's context had ended or reached its deadline.
func TestClientTimeout(t *testing.T) {
	timeout := fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded)
	bg := context.Background()
	expired, cancel := context.WithDeadline(bg, time.Now().Add(-time.Millisecond))
	defer cancel()
	later, cancel2 := context.WithTimeout(bg, time.Hour)
	defer cancel2()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"no error", bg, nil, false},
		{"a reply error", bg, errors.New("ERR"), false},
		{"a timeout", bg, timeout, true},
		{"a timeout, the caller's deadline far", later, timeout, true},
		{"a timeout, the caller's deadline passed", expired, timeout, false},
		{"the caller's deadline", expired, context.DeadlineExceeded, false},
	} {
		if got := clientTimeout(tc.ctx, tc.err); got != tc.want {
			t.Errorf("%s: clientTimeout = %v, want %v", tc.name, got, tc.want)
		}
	}
}
