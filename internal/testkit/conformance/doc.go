// Package conformance is the one test suite every lockmw store passes:
// Redis, Redis Cluster, Redlock and any store added later run the same
// checks against real servers through lockmw's public API.
//
// A store's test describes its deployment as a Store (how to make a Locker
// on its own client, the faults it can inject, how to list what it still
// keeps for a key) and calls Run. Run's subtests check:
//
//   - Exclusion: many Lockers, several goroutines each, hammer one key; no
//     two critical sections overlap and a non-atomic counter ends exact.
//   - Fences: fences strictly increase in grant order across Lockers.
//   - LostWhenStorePaused, LostWhenStoreKilled, LostWhenLinkCut: a holder
//     whose store is paused (SIGSTOP) or killed for longer than the TTL, or
//     whose own link is cut, sees its lease's context end with ErrLost
//     before another Locker's Acquire returns the lock, whose fence is
//     higher (after a restart that lost the data, only for a store with
//     FencesRiseAfterDataLoss).
//   - WaiterWakesOnRelease: a waiter gets a released lock within a small
//     fraction of the holder's TTL; a store that notifies (Store.Notifies)
//     does so without polling it (few requests while waiting).
//   - FairOrder: Fair waiters queued one after another are served in that
//     order.
//   - GiveUpLeavesNothing, CancelLeavesNothing: WithWait running out gives
//     ErrNotAcquired, a cancelled context its error, and neither leaves a
//     queue entry, subscription or lock behind.
//   - BadInput: bad keys and options give the documented sentinel errors.
//   - Keys: keys users pass (slashes, escapes, Japanese and emoji, spaces,
//     tab, newline, NUL, bytes that are not UTF-8, Redis hash tag braces,
//     lockmw's own name suffixes, a key of MaxKeyLen bytes) can each be
//     locked, are busy for another Locker and for the holder's Locker from
//     a fresh context, wake a waiter when released, and are all held at
//     once, beside keys that differ only by case, padding or Unicode
//     normalisation: no two keys share a lock.
//   - Close: releases held locks (another Locker gets them at once), ends
//     waiting calls and later calls with ErrClosed, leaves nothing.
//   - WaitingMetric: lockmw.waiting counts a Locker's waiting Acquire calls
//     in every mode, not a busy TryAcquire, and returns to 0.
//   - Inspect, Locks: what Inspect reports of a key never used, a held
//     lock (with and without holder info, with Fair waiters), a released
//     and an expired one, with the exactness the store declares
//     (Inspects); the listing of a prefix's held locks past one page,
//     without its idle ones, and its refusal of bad limits and cursors.
//
// A subtest that needs a hook the store does not provide (Pause, Kill, a
// cuttable Locker, Fair) is skipped, saying which hook is missing; every
// other subtest can fail.
package conformance
