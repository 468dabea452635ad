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
//   - Get: returns what the cache holds, and never loads.
//   - Update: takes the lockmw lock on a resource (the row), runs the
//     database write with the lease's fencing token, invalidates the cache
//     keys the row is cached under (Invalidating), and releases. Writers of
//     a row are serialized across processes whichever keys they touch, and
//     a writer whose lock was lost (it stalled past its TTL) is rejected by
//     the database when the write checks the token; FencedExec runs such a
//     conditional UPDATE, binding the token where the query says {fence}.
//
// # Consistency model
//
// A reader (Fetch or Get) sees what the database held when the last
// invalidation of its key that completed before the read started, or
// something newer; a read that overlaps an Update may see the value from
// before that write. With WithStaleReads(window), a Fetch may also see an
// older value while another caller refills the key: the value that was
// cached when the key was first invalidated, and only until window after
// that first invalidation. Later invalidations do not extend the window,
// however often writes come, so a stale value is at most window plus the
// writer's commit-to-invalidation time older than the database.
//
// A writer whose Update returned nil is guaranteed that its write
// committed under the resource's lock with a fence higher than any earlier
// writer's (if the write checked it, as FencedExec does), and that every
// key it named was invalidated: no value loaded before the invalidation is
// installed after it, so every read that starts afterwards returns the new
// value or a later one (with stale reads, an older one for at most window).
// If the invalidation fails, Update returns ErrStale, and the keys may
// serve the old value until their fill TTL passes.
//
// # Fences and resources
//
// Update's fences are store-wide (lockmw.StoreWideFence): each is above
// every fence the Locker's store drew before the Update asked for its lock,
// under any resource, so a fenced write (FencedExec) wins over every write
// fenced before it. The resource should be the row, so that its writers
// are serialized; an Update under a wrong resource (the row updated once
// under another name, such as one of its cache keys) wins once: its write
// lands, the row's next Update under its own resource lands after it, and
// so do all later ones, with fences that keep rising. Only writes whose
// Updates overlap in time under two resources can fence each other out;
// the later fence wins. When a write is fenced out while its lock is held,
// Update's error says which case it is: the row does not exist (no earlier
// write can have fenced it out), or, if it does, a writer under another
// resource overtook it (with, for an Update without Invalidating, the
// advice to name the row as the resource), or write ran FencedExec with
// another fence than the one Update gave it.
//
// # Guarantees and their limits
//
// After Invalidate (or Update) returns nil, no value loaded before it is
// installed, so the cache converges to the database as soon as the next
// fill; a fill it revoked loads again rather than hand its callers what it
// read before.
//
// If Redis cannot be reached after the database write, Update returns an
// error matching ErrStale (unless the WithInvalidateRetry hook succeeds): the
// entry may serve the old value until it expires, at most the TTL it was
// filled with, plus the WithStaleReads window for callers that accept stale
// values. Fill TTLs bound staleness in every failure case.
//
// At most one load per key runs per fill lease period (WithFillLease,
// default 5s): a load that outlasts its lease is not installed, and another
// caller may load meanwhile, so set WithFillLease above the slowest load.
// While writes come faster than a load takes, fills keep being revoked:
// readers then load for themselves (fresh, uncached) rather than get old
// values.
//
// # Redis keys
//
// The entry of key K is the hash prefix+K (default prefix "cachelock:"),
// with fields s (state), v (value), o and lx (fill lease owner and expiry)
// and sx (end of the stale window, set by the first invalidation of a
// value). Update of resource R locks the lockmw key prefix+R through the
// Locker, which adds its own prefix; the Locker may use another Redis
// deployment than the entries (see New).
//
// # Telemetry
//
// Spans (tracer scope ScopeName): cachelock.fetch, cachelock.get,
// cachelock.update and cachelock.invalidate, with attribute cache.outcome
// (for Fetch: hit, negative, loaded, filled, stale, fallback or error; for
// Get: hit, negative, miss or error), cache.keys on updates and
// invalidations, and lock.fence on updates: the fencing token of Update's
// lease, under the key every lockmw adapter uses (it was cache.fence
// before). Metrics: cachelock.hits, cachelock.misses (by cache.outcome),
// cachelock.loads (by cache.outcome ok, error or fallback),
// cachelock.stale_served, cachelock.fills.revoked and
// cachelock.invalidations (by cache.outcome ok or error). Without
// WithTracerProvider and WithMeterProvider the global providers are used.
// Update's lock is reported by lockmw under the name "cachelock.update".
package cachelock
