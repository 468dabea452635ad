package lockmw

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// sayingStore is a store that answers as a test tells it: Acquire with
// acquire, Release with release, and Renew with renew or, when renew is
// nil, not at all until unblock is closed.
type sayingStore struct {
	acquire func() (store.Reply, error)
	release error
	renew   error
	unblock chan struct{}
}

func (s *sayingStore) CheckTTL(time.Duration) error { return nil }

func (s *sayingStore) Acquire(context.Context, store.Key, string, time.Duration, bool) (store.Reply, error) {
	return s.acquire()
}

func (s *sayingStore) Release(context.Context, store.Key, string) (store.Ownership, error) {
	if s.release != nil {
		return 0, s.release
	}
	return store.Owned, nil
}

func (s *sayingStore) Renew(_ context.Context, reqs []store.RenewRequest) []store.RenewResult {
	res := make([]store.RenewResult, len(reqs))
	if s.renew == nil {
		<-s.unblock
		return res
	}
	for i := range res {
		res[i].Err = s.renew
	}
	return res
}

func (s *sayingStore) Close() error { return nil }

// namedStore is a sayingStore that names itself.
type namedStore struct{ sayingStore }

func (s *namedStore) Name() string { return "Memo" }

// logBuffer is a bytes.Buffer safe for the Locker's goroutines to log into
// while the test reads it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A Locker on a store other than Redis says nothing of Redis: not in the
// errors of an acquisition answered too late or of a lease whose renewal
// went unanswered, nor in the logs of a lock it could not give back, a
// failed renewal or a lease it lost; nor does it name Redis keys
// (prefix+"{key}"). A store that names itself (store.Named) is named in
// each of them.
func TestStoreMessagesNameTheStore(t *testing.T) {
	const key = "report"
	for _, named := range []bool{false, true} {
		t.Run(map[bool]string{false: "unnamed", true: "named"}[named], func(t *testing.T) {
			var said []string // errors and log output, to check at the end
			newLocker := func(s *sayingStore, logs *logBuffer) *Locker {
				t.Helper()
				var st store.Store = s
				if named {
					st = &namedStore{*s}
				}
				l, err := newStoreLocker(st, []Option{WithTTL(time.Second), WithLogger(slog.New(slog.NewTextHandler(logs, nil)))})
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			mentions := func(what, text string) {
				t.Helper()
				said = append(said, text)
				if named && !strings.Contains(text, "Memo") {
					t.Errorf("%s does not name the store Memo: %s", what, text)
				}
			}

			// An acquisition the store answered after its validity ended.
			logs := &logBuffer{}
			l := newLocker(&sayingStore{acquire: func() (store.Reply, error) {
				return store.Reply{Acquired: true, Fence: 1, ValidFrom: time.Now().Add(-time.Hour)}, nil
			}, unblock: make(chan struct{})}, logs)
			_, err := l.TryAcquire(context.Background(), key)
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("late answer: err = %v, want ErrUnavailable", err)
			}
			mentions("the late answer's error", err.Error())
			_ = l.Close()

			// An acquisition without an answer, whose lock cannot be given
			// back until its TTL passes.
			logs = &logBuffer{}
			noAnswer := errors.New("no answer")
			l = newLocker(&sayingStore{acquire: func() (store.Reply, error) { return store.Reply{}, noAnswer },
				release: noAnswer, unblock: make(chan struct{})}, logs)
			if _, err := l.TryAcquire(context.Background(), key); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("no answer: err = %v, want ErrUnavailable", err)
			} else {
				said = append(said, err.Error())
			}
			for end := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "could not give back"); {
				if time.Now().After(end) {
					t.Fatalf("no log of the lock that could not be given back; logs:\n%s", logs)
				}
				time.Sleep(10 * time.Millisecond)
			}
			_ = l.Close()
			mentions("the give-back log", logs.String())
			if !strings.Contains(logs.String(), "key="+key) {
				t.Errorf("the give-back log does not name the key %q: %s", key, logs)
			}

			// A lease whose renewal the store never answers.
			logs = &logBuffer{}
			s := &sayingStore{acquire: func() (store.Reply, error) {
				return store.Reply{Acquired: true, Fence: 1, ValidFrom: time.Now()}, nil
			}, unblock: make(chan struct{})}
			l = newLocker(s, logs)
			lease, err := l.TryAcquire(context.Background(), key)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-lease.Context().Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the lease outlived its deadline by 10s")
			}
			var lost *LostError
			if cause := context.Cause(lease.Context()); !errors.As(cause, &lost) {
				t.Fatalf("cause = %v, want a *LostError", cause)
			}
			close(s.unblock)
			_ = l.Close()
			if lost.Err != nil {
				mentions("the lost lease's cause", lost.Error())
				mentions("the lost lease's log", logs.String())
			} else {
				// The deadline passed before the renewal was sent (the
				// machine is loaded): there is no renewal to speak of.
				said = append(said, lost.Error(), logs.String())
			}

			// A renewal the store refuses with an error.
			logs = &logBuffer{}
			l = newLocker(&sayingStore{acquire: func() (store.Reply, error) {
				return store.Reply{Acquired: true, Fence: 1, ValidFrom: time.Now()}, nil
			}, renew: errors.New("refused"), unblock: make(chan struct{})}, logs)
			if _, err := l.TryAcquire(context.Background(), key); err != nil {
				t.Fatal(err)
			}
			for end := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "renewal failed"); {
				if time.Now().After(end) {
					t.Fatalf("no log of the failed renewal; logs:\n%s", logs)
				}
				time.Sleep(10 * time.Millisecond)
			}
			_ = l.Close()
			mentions("the failed renewal's log", logs.String())

			for _, text := range said {
				if strings.Contains(strings.ToLower(text), "redis") || strings.Contains(text, "{"+key+"}") {
					t.Errorf("a message about a store other than Redis speaks of Redis or its key names: %s", text)
				}
			}
		})
	}
}
