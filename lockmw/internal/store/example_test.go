package store_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// oneProcess is the smallest Store: locks in a map, for one process. It
// offers neither Notifier nor Queue, so its waiters would back off.
type oneProcess struct {
	mu    sync.Mutex
	locks map[store.Key]string
	fence uint64
}

func (s *oneProcess) CheckTTL(time.Duration) error { return nil }

func (s *oneProcess) Acquire(_ context.Context, k store.Key, token string, _ time.Duration, _ bool) (store.Reply, error) {
	sent := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, held := s.locks[k]; held {
		return store.Reply{}, nil
	}
	s.locks[k] = token
	s.fence++
	return store.Reply{Acquired: true, Fence: s.fence, ValidFrom: sent}, nil
}

func (s *oneProcess) Release(_ context.Context, k store.Key, token string) (store.Ownership, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.locks[k] {
	case token:
		delete(s.locks, k)
		return store.Owned, nil
	case "":
		return store.Missing, nil
	}
	return store.Taken, nil
}

func (s *oneProcess) Renew(_ context.Context, reqs []store.RenewRequest) []store.RenewResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := make([]store.RenewResult, len(reqs))
	for i, r := range reqs {
		res[i].Ownership = store.Missing
		if s.locks[r.Key] == r.Token {
			res[i].Ownership = store.Owned
		}
	}
	return res
}

func (s *oneProcess) Close() error { return nil }

// A store implements Store; package lockmw finds its optional capabilities
// by type assertion.
func Example() {
	var s store.Store = &oneProcess{locks: map[store.Key]string{}}
	_, notifies := s.(store.Notifier)
	_, queues := s.(store.Queue)
	fmt.Println("notifies:", notifies, "queues:", queues)

	ctx := context.Background()
	k := store.Key{Prefix: "lockmw:", Name: "report"}
	r, _ := s.Acquire(ctx, k, "token-a", time.Second, true)
	busy, _ := s.Acquire(ctx, k, "token-b", time.Second, true)
	o, _ := s.Release(ctx, k, "token-a")
	fmt.Println(r.Acquired, r.Fence, busy.Acquired, o == store.Owned)
	// Output:
	// notifies: false queues: false
	// true 1 false true
}

// A store package makes its Locker with lockmw.NewWithStore, which only
// code inside this repository can call (it cannot be given a store.Inside
// from outside).
func Example_locker() {
	l, err := lockmw.NewWithStore(store.Inside{Store: &oneProcess{locks: map[store.Key]string{}}}, lockmw.WithTTL(time.Minute))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	ctx := context.Background()
	lease, err := l.TryAcquire(ctx, "report")
	if err != nil {
		fmt.Println(err)
		return
	}
	_, busy := l.TryAcquire(ctx, "report")
	fmt.Println(lease.Fence(), busy)
	fmt.Println(lease.Release(ctx))
	// Output:
	// 1 lockmw: lock "report" not acquired: held by another owner
	// <nil>
}
