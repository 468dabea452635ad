package mysql

import (
	"context"
	mathrand "math/rand/v2"
	"sync"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file paces default-mode waiters (store.Notifier): MariaDB cannot
// tell a waiter that a lock became free, so WaitFree only chooses when the
// waiter's next attempt (one statement, take) is due. lockmw lets one
// default-mode waiter per key and Locker wait in WaitFree and retry; the
// Locker's other waiters of that key wait at its gate (lockmw's
// notifyWay), so a Locker polls a key once however many of its goroutines
// wait for it. See the package documentation, "Waiting".
//
// The pace follows what the attempts saw (Reply.Seen, the low bits of the
// holder's fence, from take's busy reply): while the lock changes hands
// between a key's attempts, the next one comes after a jittered
// churnPause (5-10ms: short holdings, whose ends a waiter must not
// sleep through); while one holding lasts, the pause doubles up to
// BackoffMax (100ms), as a plain backoff would. A pause never runs past
// the holder's expiry (lockmw bounds WaitFree by the holder's TTL).
// Waiting decides only when to try: every lease still comes from take.

// churnPause bounds the pause of a waiter that saw the lock change hands
// since the key's attempt before.
const churnPause = 10 * time.Millisecond

// maxPolled bounds the keys whose pace the store keeps; past it, they are
// forgotten (and learnt again).
const maxPolled = 4096

// pollState is what a store's attempts saw of one key.
type pollState struct {
	seen    int64         // Reply.Seen of the last busy attempt; 0: none, or unknown
	backoff time.Duration // the next pause's bound
}

// pacer keeps the pace of each key's default-mode waiters.
type pacer struct {
	mu   sync.Mutex
	keys map[store.Key]pollState
}

// next is the pause before the next attempt on k, whose last busy attempt
// saw seen.
func (p *pacer) next(k store.Key, seen int64) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.keys == nil || len(p.keys) >= maxPolled {
		p.keys = make(map[store.Key]pollState)
	}
	st, ok := p.keys[k]
	switch {
	case !ok:
		st.backoff = BackoffMin
	case seen != 0 && seen != st.seen:
		// A new holding since the attempt before: holdings are short.
		st.backoff = churnPause
	default:
		st.backoff = min(2*st.backoff, BackoffMax)
	}
	st.seen = seen
	p.keys[k] = st
	return st.backoff/2 + mathrand.N(st.backoff/2+1)
}

// WaitFree (store.Notifier) returns when the next attempt on k is due
// (see the file's comment), or with ctx's error. Every return is a
// spurious one, by the letter of store.Notifier: MariaDB cannot notify,
// and the attempt that follows is the poll.
func (s *sqlStore) WaitFree(ctx context.Context, k store.Key, seen int64) error {
	t := time.NewTimer(s.pace.next(k, seen))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
