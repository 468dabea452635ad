package adapt

import (
	"context"
	"errors"
	"time"

	"github.com/lockmw/lockmw/lockmw"
)

// This file is the request adapters' opt-in holder description on busy
// answers (ginlock.WithHolderInBusy, grpclock.WithHolderInBusy): who holds
// the lock, as its Locker described itself (lockmw.WithHolderInfo).

// holderLookup bounds the Inspect a busy answer makes: the answer goes out
// without the description rather than wait on a slow store.
const holderLookup = 250 * time.Millisecond

// HolderError is a busy error with the holder's description.
type HolderError struct {
	Err    error
	Holder string
}

func (e *HolderError) Error() string { return e.Err.Error() + " (held by " + e.Holder + ")" }
func (e *HolderError) Unwrap() error { return e.Err }

// WithHolder returns busy (an error of an acquisition of key that found
// it busy) with the holder's description, when the store reports one
// within holderLookup; else busy as it is.
func WithHolder(ctx context.Context, locker *lockmw.Locker, key string, busy error) error {
	ctx, cancel := context.WithTimeout(ctx, holderLookup)
	defer cancel()
	info, err := locker.Inspect(ctx, key)
	if err != nil || !info.Held || !info.Holder.Known() {
		return busy
	}
	return &HolderError{Err: busy, Holder: info.Holder.Value}
}

// HolderOf returns the holder description WithHolder added to err.
func HolderOf(err error) (string, bool) {
	var h *HolderError
	if errors.As(err, &h) {
		return h.Holder, true
	}
	return "", false
}
