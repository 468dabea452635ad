package cachelock

import "errors"

// Errors returned by cachelock. Match them with errors.Is. Besides these,
// calls return errors matching the lockmw sentinels: lockmw.ErrUnavailable
// (Redis unreachable), lockmw.ErrLost (Update's lock was lost during the
// write), lockmw.ErrInvalidKey, lockmw.ErrInvalidOption and
// lockmw.ErrNilClient.
var (
	// ErrNilLocker means New was given a nil *lockmw.Locker.
	ErrNilLocker = errors.New("cachelock: nil locker")

	// ErrNotFound is what a load function returns for a key that has no
	// value in the database: it is the only way to say "not found". With
	// WithNegativeCaching, Fetch caches that answer and returns an error
	// matching ErrNotFound without loading again until it expires; without
	// it, nothing is cached. Get returns it for a cached "not found".
	ErrNotFound = errors.New("cachelock: not found")

	// ErrNilValue means a load function returned a nil slice and a nil
	// error. Fetch refuses that answer and caches nothing, because it is
	// ambiguous: return ErrNotFound for a missing row, and a non-nil empty
	// slice ([]byte{}) for a value that is empty.
	ErrNilValue = errors.New("cachelock: load returned a nil value and a nil error")

	// ErrMiss is what Get returns when the cache holds no current value for
	// the key (never filled, invalidated, or expired). Get never loads.
	ErrMiss = errors.New("cachelock: cache miss")

	// ErrInvalidQuery means FencedExec refused its query before running it:
	// the query has no {fence} marker, mixes placeholder styles, or has a
	// placeholder count that does not match its arguments, so the fence or
	// an argument would have been bound in the wrong place.
	ErrInvalidQuery = errors.New("cachelock: invalid fenced query")

	// ErrStale means Update's write succeeded but the cache entry could not
	// be invalidated afterwards (Redis unreachable), and the retry hook, if
	// any, did not succeed either. The entry may serve the old value until
	// it expires: at most the TTL it was filled with (plus the stale window,
	// for callers that accept stale values).
	ErrStale = errors.New("cachelock: cache may be stale: invalidation after the write failed")

	// ErrFenced means FencedExec changed no row: the row holds a fence at
	// least as new as the caller's (a newer writer got there first: the
	// caller's lock was lost, or a writer under another resource overtook
	// it) or the row does not exist. Update's error says which (see the
	// package documentation, Fences and resources).
	ErrFenced = errors.New("cachelock: write fenced out: no row changed")
)
