// Package stalls keeps, per lease token, the server-side sessions of
// requests that failed without an answer (a MariaDB connection id, a
// PostgreSQL backend), so that a give-back of the token can end them first:
// on a server with a thread or process per connection, such a request may
// still run after the give-back was answered, and take the lock for a
// token nobody holds. The SQL stores' stalled.go files say how each ends
// them, and why that is safe.
package stalls

import (
	"slices"
	"sync"
	"time"
)

// Notes are the sessions noted against tokens. The zero value is ready to
// use; it is safe for concurrent use.
type Notes[S comparable] struct {
	mu    sync.Mutex
	by    map[string][]S
	since map[string]time.Time
}

// Note records that a request of token on session s failed without an
// answer. Notes of tokens last noted more than keep ago (longer than any
// lease TTL a Locker gives back within) are forgotten.
func (n *Notes[S]) Note(token string, s S, keep time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.by == nil {
		n.by, n.since = make(map[string][]S), make(map[string]time.Time)
	}
	now := time.Now()
	for t, at := range n.since {
		if now.Sub(at) > keep {
			delete(n.by, t)
			delete(n.since, t)
		}
	}
	n.by[token] = append(n.by[token], s)
	n.since[token] = now
}

// Of returns the sessions noted against token.
func (n *Notes[S]) Of(token string) []S {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.by[token])
}

// Forget drops the notes of token that are in ended.
func (n *Notes[S]) Forget(token string, ended []S) {
	n.mu.Lock()
	defer n.mu.Unlock()
	rest := slices.DeleteFunc(n.by[token], func(s S) bool { return slices.Contains(ended, s) })
	if len(rest) == 0 {
		delete(n.by, token)
		delete(n.since, token)
		return
	}
	n.by[token] = rest
}
