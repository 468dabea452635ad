package postgres

import (
	"hash/maphash"
	"sync/atomic"
	"time"
)

// This file remembers which locks a store's waiting acquisitions found
// busy lately, so that Enqueue chooses its first request (a plain attempt
// for a lock that is likely free, cheaper; the queued one for a lock that
// is likely held, no request wasted before the waiter queues), and Release
// its batch (the cheap one for a lock nobody likely waits for; the
// hand-over's for one others likely wait for, no round trip wasted).

// hotFor is how long a lock found busy keeps Enqueue from starting with a
// plain attempt.
const hotFor = time.Second

// hotSlots is the number of locks remembered; locks whose names share a
// slot share its record, which only changes which request comes first.
const hotSlots = 256

// hotLocks records, per slot of lock names, when a queued attempt last
// found one busy (Unix nanoseconds). The zero value is ready.
type hotLocks struct {
	slots [hotSlots]atomic.Int64
}

var hotSeed = maphash.MakeSeed()

func (h *hotLocks) slot(row string) *atomic.Int64 {
	return &h.slots[maphash.String(hotSeed, row)%hotSlots]
}

// busy records that lock row was found held.
func (h *hotLocks) busy(row string) { h.slot(row).Store(time.Now().UnixNano()) }

// busyLately reports whether lock row (or one sharing its slot) was found
// held less than hotFor ago.
func (h *hotLocks) busyLately(row string) bool {
	return time.Now().UnixNano()-h.slot(row).Load() < int64(hotFor)
}
