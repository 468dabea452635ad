package store

import (
	"context"
	"time"
)

// validityKey carries a deadline set by WithValidity.
type validityKey struct{}

// WithValidity returns ctx carrying the validity deadline of the lease a
// release or hand-over gives up: a store that retries such a call (the
// Redis store, while a Cluster slot moves) retries it no later than
// deadline. A zero deadline (unknown) leaves ctx as it is.
func WithValidity(ctx context.Context, deadline time.Time) context.Context {
	if deadline.IsZero() {
		return ctx
	}
	return context.WithValue(ctx, validityKey{}, deadline)
}

// ValidUntil returns the deadline WithValidity put in ctx; ok is false
// when there is none.
func ValidUntil(ctx context.Context) (deadline time.Time, ok bool) {
	deadline, ok = ctx.Value(validityKey{}).(time.Time)
	return deadline, ok
}
