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
	// value in the database. With WithNegativeCaching, Fetch caches that
	// answer and returns an error matching ErrNotFound without loading again
	// until it expires; without it, nothing is cached.
	ErrNotFound = errors.New("cachelock: not found")

	// ErrStale means Update's write succeeded but the cache entry could not
	// be invalidated afterwards (Redis unreachable), and the retry hook, if
	// any, did not succeed either. The entry may serve the old value until
	// it expires: at most the TTL it was filled with (plus the stale window,
	// for callers that accept stale values).
	ErrStale = errors.New("cachelock: cache may be stale: invalidation after the write failed")

	// ErrFenced means FencedExec changed no row: the row holds a fence at
	// least as new as the caller's (a newer writer got there first, so the
	// caller's lock was lost) or the row does not exist.
	ErrFenced = errors.New("cachelock: write fenced out: no row changed")
)
