// Package cachelock is a cache-aside helper on Redis and lockmw whose fills
// and updates never leave stale data behind.
//
// # The race it closes
//
// With plain cache-aside, a reader misses, loads v1 from the database and
// stalls (a GC pause, a slow network); a writer commits v2 and deletes the
// cache key; the reader then writes v1 into the cache, where it stays until
// its TTL. Deleting before and after the update ("delayed double delete")
// only narrows that window.
//
// cachelock closes it with fill leases, as memcache leases and rockscache
// do. Each entry is a Redis hash holding the value, its state, and the
// owner token and expiry of a per-key fill lease; all of it is read and
// written by Lua scripts, with times taken from the Redis clock.
//
//   - Fetch: on a miss, one caller across all processes wins the key's fill
//     lease and runs load; it installs the value only if its lease is still
//     its own and unexpired, in one script. Other callers wait for that fill
//     or, with WithStaleReads, get the invalidated old value. In a process,
//     concurrent Fetches of a key share one Redis round trip and one load.
//   - Invalidate: marks entries deleted and revokes their fill leases, so a
//     value loaded before it completed is never installed after it.
//   - Update: takes the lockmw lock on the key, runs the database write with
//     the lease's fencing token, invalidates, and releases. Writers of a key
//     are serialized across processes, and a writer whose lock was lost
//     (it stalled past its TTL) is rejected by the database when the write
//     checks the token; FencedExec runs such a conditional UPDATE.
//
// # Guarantees and their limits
//
// After Invalidate (or Update) returns nil, no value loaded before it is
// installed, so the cache converges to the database as soon as the next
// fill; a fill it revoked loads again rather than hand its callers what it
// read before. A Fetch that runs concurrently with an Update may still
// return the value from before the write: that read overlapped the write.
//
// If Redis cannot be reached after the database write, Update returns an
// error matching ErrStale (unless the WithInvalidateRetry hook succeeds): the
// entry may serve the old value until it expires, at most the TTL it was
// filled with, plus the WithStaleReads window for callers that accept stale
// values. Fill TTLs bound staleness in every failure case.
//
// At most one load per key runs per fill lease period (WithFillLease,
// default 5s): a load that outlasts its lease is not installed, and another
// caller may load meanwhile.
//
// # Redis keys
//
// The entry of key K is the hash prefix+K (default prefix "cachelock:"),
// with fields s (state), v (value), o and lx (fill lease owner and expiry)
// and sx (end of the stale window). Update locks the lockmw key prefix+K
// through the Locker, which adds its own prefix.
//
// # Telemetry
//
// Spans (tracer scope ScopeName): cachelock.fetch, cachelock.update and
// cachelock.invalidate, with attribute cache.outcome (for Fetch: hit,
// negative, loaded, filled, stale, fallback or error) and cache.fence on
// updates. Metrics: cachelock.hits, cachelock.misses (by cache.outcome),
// cachelock.loads (by cache.outcome ok, error or fallback),
// cachelock.stale_served, cachelock.fills.revoked and
// cachelock.invalidations (by cache.outcome ok or error). Without
// WithTracerProvider and WithMeterProvider the global providers are used.
// Update's lock is reported by lockmw under the name "cachelock.update".
package cachelock
