package store

import (
	"hash/maphash"
	"sync/atomic"
	"time"
)

// This file remembers which locks a store found busy lately, for stores
// that choose their requests by it: a first attempt that carries no read
// for a lock likely free, and the queued one for a lock likely held (no
// request wasted before the waiter queues); the PostgreSQL store also
// chooses its release's batch by it (the cheap one for a lock nobody
// likely waits for).

// HotFor is how long a lock found busy counts as busy lately.
const HotFor = time.Second

// hotSlots is the number of locks remembered; locks whose names share a
// slot share its record, which only changes which request comes first.
const hotSlots = 256

// Hot records, per slot of lock names, when a lock was last found busy
// (Unix nanoseconds). The zero value is ready; it is safe for concurrent
// use.
type Hot struct {
	slots [hotSlots]atomic.Int64
}

var hotSeed = maphash.MakeSeed()

func (h *Hot) slot(name string) *atomic.Int64 {
	return &h.slots[maphash.String(hotSeed, name)%hotSlots]
}

// Busy records that lock name was found held (or queued for).
func (h *Hot) Busy(name string) { h.slot(name).Store(time.Now().UnixNano()) }

// BusyLately reports whether lock name (or one sharing its slot) was found
// busy less than HotFor ago.
func (h *Hot) BusyLately(name string) bool {
	return time.Now().UnixNano()-h.slot(name).Load() < int64(HotFor)
}
