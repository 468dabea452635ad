package lockmw

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/errs"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// Errors returned by lockmw. Match them with errors.Is: the returned errors
// wrap these sentinels and add the key and the reason. ErrClosed,
// ErrInvalidOption, ErrUnavailable, ErrStoreSetup and ErrNotReplicated are
// the same values the stores' internals use (lockmw/internal/errs).
var (
	// ErrNotAcquired means the lock is held by another owner: TryAcquire found
	// it busy, or Acquire's WithWait ran out. It never stands for a store
	// failure or a cancelled context. RetryAfter reports the holder's
	// remaining TTL when it is known.
	ErrNotAcquired = errors.New("lockmw: lock not acquired: held by another owner")

	// ErrLost is the cause of a lease context that ended because the lock was
	// lost: its key expired or was deleted, another owner took it, or the
	// validity deadline passed without a confirmed renewal (the store slow
	// or unreachable). Release returns it for a lost lease, and for a nested
	// lease whose outermost lease ended before it (reason LostReleased when
	// that one was released). The error also wraps the reason (see
	// LostError), and for failed renewals the store's error.
	ErrLost = errors.New("lockmw: lock lost")

	// ErrClosed is returned by every call on a Locker after Close, and is the
	// context cause of leases that were still held when it closed.
	ErrClosed = errs.ErrClosed

	// ErrInvalidKey means the key is empty or longer than MaxKeyLen bytes.
	// Nothing was sent to the store.
	ErrInvalidKey = errors.New("lockmw: invalid key")

	// ErrInvalidOption means an option holds a value lockmw cannot use (a TTL
	// under MinTTL, a negative wait, a drift factor outside [0, 0.5), ...).
	// Nothing was sent to the store.
	ErrInvalidOption = errs.ErrInvalidOption

	// ErrNilClient means New (or a store's constructor, such as etcd.New)
	// was given a nil client.
	ErrNilClient = errors.New("lockmw: nil client")

	// ErrUnavailable means the store (a server, a quorum, a database) could
	// not be reached, answered with an error, or answered too slowly for the
	// lease to be valid. The lock state is unknown to the caller but safe:
	// an acquisition that may have landed expires after its TTL. The
	// underlying error is wrapped too.
	ErrUnavailable = errs.ErrUnavailable

	// ErrStoreSetup means the store answered, but is not set up for
	// lockmw: a table or sequence the store keeps its locks in is missing
	// (create it with the store's CreateTable, or its SQL in a
	// migration), or the server is not one the store supports. It is a
	// setup mistake, not an outage: it does not match ErrUnavailable, and
	// retrying does not help until an operator acts. The store's own error
	// (such as postgres.ErrNoTable) is wrapped too, saying what to do. The
	// adapters answer it as a server error (HTTP 500, gRPC Internal), and
	// log it once.
	ErrStoreSetup = errs.ErrStoreSetup

	// ErrNotReplicated means an acquisition under WithWaitReplicas took the
	// lock, but fewer replicas than asked acknowledged it in time, so it was
	// released again. Errors matching it also match ErrUnavailable.
	ErrNotReplicated = errs.ErrNotReplicated
)

// LostReason says why a lease was lost.
type LostReason string

// The reasons a lease can be lost.
const (
	// LostExpired: the lock key was gone when lockmw renewed or released it
	// (it expired, or something deleted it).
	LostExpired LostReason = "expired"
	// LostTaken: the lock key holds another owner's token.
	LostTaken LostReason = "taken"
	// LostDeadline: the validity deadline (last confirmed renewal + TTL −
	// drift, on the monotonic clock) passed without a confirmed renewal (a
	// renewal confirmed only after it does not count).
	LostDeadline LostReason = "deadline"
	// LostReleased: a nested lease's outermost lease was released while the
	// nested lease was still held, so the lock was no longer the nested
	// holder's (see Lease.Release).
	LostReleased LostReason = "released"
)

// LostError is the cause of a lost lease's context and the error Release
// returns for it. errors.Is(err, ErrLost) is true for it; for LostDeadline it
// also wraps the last renewal error, if any.
type LostError struct {
	Key    string
	Reason LostReason
	Err    error // last renewal error for LostDeadline; nil otherwise
}

// Error describes the lost lock and why it was lost.
func (e *LostError) Error() string {
	msg := fmt.Sprintf("lockmw: lock %q lost: %s", e.Key, e.reasonText())
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *LostError) reasonText() string {
	switch e.Reason {
	case LostExpired:
		return "its key expired or was deleted"
	case LostTaken:
		return "another owner holds its key"
	case LostDeadline:
		return "validity deadline passed without a confirmed renewal"
	case LostReleased:
		return "the enclosing lease it was nested in had already been released"
	}
	return string(e.Reason)
}

// Is reports whether target is ErrLost.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// Unwrap returns the renewal error behind a LostDeadline loss.
func (e *LostError) Unwrap() error { return e.Err }

// NotAcquiredError is returned when the lock is held by another owner.
// errors.Is(err, ErrNotAcquired) is true for it.
type NotAcquiredError struct {
	Key string
	// RetryAfter is the holder's remaining TTL as the store reported it on
	// the last attempt; zero when unknown.
	RetryAfter time.Duration
}

// Error names the busy key.
func (e *NotAcquiredError) Error() string {
	return fmt.Sprintf("lockmw: lock %q not acquired: held by another owner", e.Key)
}

// Is reports whether target is ErrNotAcquired.
func (e *NotAcquiredError) Is(target error) bool { return target == ErrNotAcquired }

// RetryAfter returns how long the current holder's lock has left, as seen by
// the failed attempt behind err, and whether err carries that information.
// Adapters use it for HTTP Retry-After and gRPC RetryInfo.
func RetryAfter(err error) (time.Duration, bool) {
	var na *NotAcquiredError
	if errors.As(err, &na) && na.RetryAfter > 0 {
		return na.RetryAfter, true
	}
	return 0, false
}

// unavailable is the error of a store request op on key that failed with
// err: ErrUnavailable, unless the store says it is not set up
// (ErrStoreSetup), which is no outage.
func unavailable(op, key string, err error) error {
	if errors.Is(err, ErrStoreSetup) {
		return fmt.Errorf("lockmw: %s %q: %w", op, key, err)
	}
	return fmt.Errorf("%w: %s %q: %w", ErrUnavailable, op, key, err)
}

// ctxErr is the error for an acquisition stopped by ctx: it matches
// ctx.Err() and, when different, the context's cause.
func ctxErr(ctx context.Context, key string) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause != nil && cause != err {
		return fmt.Errorf("lockmw: acquire %q: %w: %w", key, err, cause)
	}
	return fmt.Errorf("lockmw: acquire %q: %w", key, err)
}

// storeErr is the error for a store call of an acquisition that failed:
// the context's when it ended, the store's own when it already matches a
// lockmw sentinel (an option the store cannot use), else ErrUnavailable
// (ErrStoreSetup for a store not set up: unavailable).
func storeErr(opCtx context.Context, key string, err error) error {
	switch {
	case opCtx.Err() != nil:
		return ctxErr(opCtx, key)
	case errors.Is(err, ErrInvalidOption), errors.Is(err, ErrClosed), errors.Is(err, ErrInvalidKey):
		return err
	}
	return unavailable("acquire", key, err)
}

// ownership is what a compare-and-act step found (store.Ownership).
type ownership = store.Ownership

// What a compare-and-act step found.
const (
	owned   = store.Owned   // the caller's token: the action was done
	missing = store.Missing // no lock: expired or deleted
	taken   = store.Taken   // another owner's token: left untouched
)

// lostReason maps a failed compare-and-act to the reason the lease is lost.
func lostReason(o ownership) LostReason {
	if o == taken {
		return LostTaken
	}
	return LostExpired
}
