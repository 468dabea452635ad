// Package redisstore keeps lockmw's locks in Redis: Store on one
// deployment (a standalone server, a Sentinel-managed primary, or a
// Cluster), made by lockmw.New, and Redlock on a quorum of independent
// masters, made by lockmw.NewRedlock. Both sit behind the store boundary
// of package lockmw/internal/store: the Locker acquires, releases and
// renews through store.Store, and finds their extras by type assertion
// (Store is a store.Granter, whose releases hand the lock to a waiter in
// the same step; Redlock is a store.WakeQueue). They share the wire
// protocol: the Lua scripts (scripts/ and scripts.go), the key names
// (keys.go), the pub/sub subscriber, the batcher (batch.go), and the guard
// against go-redis sending a write twice (noretry.go).
//
// The package is internal to this repository. A store is made with New or
// NewRedlock, then bound to its Locker once with Bind (Config: the
// Locker's id, prefix, events and options), before the Locker's first
// request.
//
// Names: a lock on key K under prefix P is P+"{K}" (the lock), with
// ":fence", ":q", ":n" and ":g:"+ID after it (newLockKeys), whatever bytes K
// holds, on one Redis and under Redlock. Store on a Cluster names a key
// that starts with '}', under a prefix without '{', P+"#{H}{K}" instead, H
// its CRC-32 in hex, since the hash tag of its plain names is empty
// (naming, in keys.go, argues why no two locks share a name and why old
// and new releases agree); TestLockKeys and TestClusterNames pin both.
//
// Why leases stay safe on these stores, and what the scripts must
// do for that, is argued in package lockmw's documentation (doc.go,
// "Safety: how a lease becomes live").
package redisstore
