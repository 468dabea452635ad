// Package lockmw provides distributed locks on Redis that stay safe when
// processes stall, networks drop and keys expire behind your back.
//
// A Locker hands out a Lease per holding. A lease is owned by a random
// 128-bit token (never a goroutine); every release and renewal is a
// compare-and-act Lua script, so nobody ever deletes or extends another
// owner's lock. One watchdog per Locker renews all of its leases at a third
// of their TTL, pipelined into one round trip per tick.
//
// Lost means cancelled: a lease's Context ends with cause ErrLost (a
// *LostError saying why) when its key expired or was taken, or when its
// validity deadline (last confirmed renewal + TTL − drift, on the monotonic
// clock) passes without a confirmed renewal, also while Redis is
// unreachable, so work stops before another holder can start.
//
// Every acquisition gets a fencing token, Lease.Fence, that strictly
// increases per key across holders, for stores to reject late writers
// (UPDATE ... WHERE fence < $token).
//
// Acquire on a context derived from a held lease's Context, for the same
// key and Locker, returns a nested lease instead of deadlocking; the lock is
// released with the outermost lease, and nested leases end with it (with
// its cause). Only a lease still held nests: a context that outlived its
// lease (context.WithoutCancel keeps the values) acquires as anyone else.
//
// # Deployments
//
// New takes a standalone or Sentinel-managed *redis.Client or a
// *redis.ClusterClient. On Cluster each lock lives on the master serving
// its hash tag's slot, renewals go to each master in one round trip per
// tick, and an acquisition retries briefly while its slot is being
// migrated. WithWaitReplicas makes acquisitions wait for replica
// acknowledgement (WAIT) and roll back without it; replication stays
// asynchronous, so fencing tokens remain what protects the data.
//
// # Redis keys
//
// A lock on key K uses prefix+"{K}" (the owner token, with the lease's
// expiry) and prefix+"{K}:fence" (the fencing counter). The counter never
// expires, so that tokens keep increasing: one small key per distinct lock
// name stays in Redis.
//
// # Telemetry
//
// Spans (tracer scope ScopeName): lockmw.acquire, lockmw.release, and
// lockmw.renew for failed renewals and lost leases, with attributes
// lock.name (WithName, default the key), lock.outcome
// (acquired|busy|timeout|error|lost|ok), lock.wait_ms and lock.fence.
// Metrics: lockmw.acquire.duration (s, by lock.name and lock.outcome),
// lockmw.hold.duration (s), lockmw.held (up-down), lockmw.renewals (by
// lock.outcome ok|error) and lockmw.lost (by lock.name and
// lock.lost_reason). Without WithTracerProvider/WithMeterProvider the global
// providers are used; while none is set, telemetry allocates nothing.
package lockmw
