package lockmw

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file names a store request that ran out its bound. Each request the
// Locker makes of the store (an acquisition, a queue entry, a release, a
// renewal) is bounded by the lease TTL: an answer later than that is
// worthless. The Locker sets that bound itself (bound), except on an
// acquisition, which every store bounds by the TTL itself (some by their
// client's timeouts, which are shorter): there it is told by the time the
// error took (ranOut), so that the hot path of a lock+unlock carries one
// timer context, the release's, not two. When that bound, and not the
// caller's context, ends a request, the store's client usually returns the
// bare context error; the Locker replaces it by one that names the store,
// what it waited for and how long, and the last error the store's client saw
// reaching the store (store.Diagnoser), such as a refused dial. The error
// still matches context.DeadlineExceeded, and the caller's own context
// ending stays the caller's error (storeErr).

// errBound is the cause of a request context whose bound ran out.
var errBound = errors.New("lockmw: the store request's bound ran out")

// diagnoseWait bounds the Diagnoser's answer.
const diagnoseWait = time.Second

// bound returns ctx bounded by d, for one store request whose error goes
// through unanswered.
func bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, errBound)
}

// boundEnded reports whether rctx's bound (from bound) ended the request
// made under it, while rctx's parent was still live.
func boundEnded(rctx context.Context) bool {
	return errors.Is(context.Cause(rctx), errBound)
}

// ranOut reports whether err, the error of a request sent at sent under
// ctx and bounded by the store itself (an acquisition: every store bounds
// its Acquire by the TTL, d), is that bound's: it came at least d after
// the request was sent, with ctx still live (whatever type the store's
// client gives the error: etcd's and ZooKeeper's differ). An end of ctx's
// own, or a shorter timeout of the store's client, is not.
func ranOut(ctx context.Context, sent time.Time, d time.Duration, err error) bool {
	return err != nil && ctx.Err() == nil && time.Since(sent) >= d
}

// unanswered returns err, the error of a store request bounded by d,
// unchanged unless that bound ended it (ended: boundEnded or ranOut)
// while the caller's context was still live: then an *unansweredError
// naming the store (name), what the request was (what) and d, with the
// store's diagnosis when it offers one.
func unanswered(ended bool, name string, diag store.Diagnoser, what string, d time.Duration, err error) error {
	if err == nil || !ended {
		return err
	}
	if name == "" {
		name = "the store"
	}
	e := &unansweredError{store: name, request: what, bound: d, err: err}
	if diag != nil {
		ctx, cancel := context.WithTimeout(context.Background(), diagnoseWait)
		e.diagnosed, e.last = true, diag.Diagnose(ctx)
		cancel()
	}
	return e
}

// unansweredError is the error of a store request that the Locker's bound
// (the lease TTL) ended before the store answered. It wraps the request's
// own error (so it matches context.DeadlineExceeded), and only that: the
// last error the store's client saw reaching the store (a refused dial,
// say) is in its text, never matched, so that it cannot pass for what the
// request itself did (store.LeftNothing judges the request's own error).
// The Locker returns it wrapped in ErrUnavailable (acquisition, release),
// or as the renewal error a LostError wraps.
type unansweredError struct {
	store     string        // "etcd", "ZooKeeper", ...
	request   string        // "the acquisition", "the release", ...
	bound     time.Duration // how long the Locker waited
	diagnosed bool          // the store was asked for last
	last      error         // the store client's last error reaching the store; nil if none
	err       error         // the request's error
}

// Error names the store, the request, the bound and the last error.
func (e *unansweredError) Error() string {
	msg := fmt.Sprintf("%s did not answer %s within %v (the lease TTL bounds each request)", e.store, e.request, e.bound)
	switch {
	case e.last != nil:
		msg += "; last error reaching it: " + e.last.Error()
	case e.diagnosed:
		msg += "; its client saw no connection error (a stalled or overloaded server?)"
	}
	return msg + ": " + e.err.Error()
}

// Unwrap returns the request's error.
func (e *unansweredError) Unwrap() error { return e.err }
