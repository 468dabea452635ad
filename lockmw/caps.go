package lockmw

import (
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is what the Locker finds in its store beyond store.Store: the
// capabilities of package store that its generic parts use, found once by
// type assertion (newLocker). Those that only one way of waiting uses are
// found by its policy (newPolicy).

// caps are the optional capabilities of a Locker's store, found once by
// type assertion (newLocker).
type caps struct {
	notifier    store.Notifier    // nil: waiters back off
	queue       store.Queue       // nil: no Fair through a queue
	fairOnly    bool              // queue is for Fair waiters only (store.FairOnly)
	leftNothing store.LeftNothing // nil: every failed acquisition is given back
	diagnoser   store.Diagnoser   // nil: an unanswered request's error names no last error
	// backoffMin and backoffMax bound a waiter's backoff between attempts:
	// the store's (store.Backoff), else minBackoff and maxBackoff.
	backoffMin, backoffMax time.Duration
}
