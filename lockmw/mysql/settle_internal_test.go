package mysql

import (
	"sync"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// A winner's entry deleted while its Locker closes the store (a waiter
// still in WaitTurn when Close runs): settle and Close run at once, many
// times, without a race (go test -race) and without a delete left running
// after Close.
func TestSettleDuringClose(t *testing.T) {
	s0, _ := newTestStore(t)
	k := store.Key{Prefix: "lockmw:", Name: "settle"}
	for i := range 50 {
		s := &sqlStore{db: s0.db, n: s0.n, retention: Retention, stop: make(chan struct{}), done: make(chan struct{})}
		go s.cleanLoop(time.Hour)
		token := "t" + string(rune('a'+i%26))
		s.queued = map[string]time.Time{token: time.Now()}
		var wg sync.WaitGroup
		wg.Go(func() { s.settle(tctx(t), k, token, time.Second) })
		wg.Go(func() { _ = s.Close() })
		wg.Wait()
		s.dequeuing.Wait()
	}
}
