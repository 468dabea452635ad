// Package adapt holds the policy the adapters (ginlock, grpclock,
// cachelock, cronlock and cronlock/gocronlock) share, so that they behave
// alike:
//
//   - the rule for the identifiers they lock (CheckID) and for lock name
//     templates (ParseTemplate);
//   - one set of telemetry attribute keys (AttrName, AttrOutcome,
//     AttrWaitMS, AttrFence) and lock.outcome values (OutcomeAcquired ...),
//     and the outcome of a failed acquisition (AcquireOutcome), which each
//     adapter turns into its own answer (cronlock into its skip reason;
//     its job runs keep their own cron.* attributes);
//   - the misuse rule for options and constructors (Apply, Misuse,
//     MustSetup), and the tracer, meter and counters of each adapter
//     (Instruments, Counter);
//   - the estimate of how long a busy lock will stay held, which the
//     request adapters send to clients as the time to wait before retrying
//     (Holds).
package adapt

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
	"weak"
)

// ErrBadID is wrapped by CheckID's errors.
var ErrBadID = errors.New("unusable identifier")

// CheckID accepts a non-empty identifier of valid UTF-8 without control
// characters; what names it in the error.
func CheckID(what, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: %s is missing or empty", ErrBadID, what)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrBadID, what)
	case strings.IndexFunc(id, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: %s contains control characters", ErrBadID, what)
	}
	return nil
}

// holdWeight is the weight of the newest hold in the moving average.
const holdWeight = 0.25

// holdKey names one lock family: a lock name (a template such as
// "order:{id}") of one Locker. The Locker is held weakly, so that the
// estimates of a closed and dropped Locker do not keep it alive.
type holdKey struct {
	locker any // weak.Pointer to the Locker
	name   string
}

var holds sync.Map // holdKey -> *Hold: shared by every adapter in the process

// Holds finds the hold estimates of one Locker, by lock name. ginlock and
// grpclock share one estimate per Locker and name.
type Holds struct {
	locker any      // weak.Pointer to the Locker
	names  sync.Map // name -> *Hold, a local cache of holds
}

// NewHolds returns the estimates of the Locker identified by locker (any
// pointer unique to it).
func NewHolds[T any](locker *T) *Holds {
	return &Holds{locker: weak.Make(locker)}
}

// For returns the estimate of the locks named name.
func (h *Holds) For(name string) *Hold {
	if v, ok := h.names.Load(name); ok {
		return v.(*Hold)
	}
	v, _ := holds.LoadOrStore(holdKey{locker: h.locker, name: name}, new(Hold))
	h.names.Store(name, v)
	return v.(*Hold)
}

// A Hold is the moving average of how long the locks of one name were held
// by this process.
type Hold struct {
	mu  sync.Mutex
	avg time.Duration
}

// Observe adds one hold duration: from the acquisition to the release.
func (h *Hold) Observe(d time.Duration) {
	if d <= 0 {
		d = time.Nanosecond
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.avg == 0 {
		h.avg = d
		return
	}
	h.avg += time.Duration(holdWeight * float64(d-h.avg))
	if h.avg <= 0 {
		h.avg = time.Nanosecond
	}
}

// FirstWait is the wait Hold.Wait suggests while no hold of the lock's name
// has been seen, unless the holder's remaining TTL is shorter. It is not
// the TTL: with the watchdog renewing it, the TTL left says nothing about
// how soon the lock is released, and a client told to wait a whole TTL
// (10s by default) for a lock held for milliseconds waits for nothing.
const FirstWait = time.Second

// Wait estimates how long a request that found the lock busy should wait
// before retrying: the moving average of the holds observed, bounded by the
// holder's remaining TTL (left, when known: ok). With no hold observed yet
// it is FirstWait, bounded the same way. known is false only when ok is
// false and no hold has been seen.
func (h *Hold) Wait(left time.Duration, ok bool) (wait time.Duration, known bool) {
	h.mu.Lock()
	avg := h.avg
	h.mu.Unlock()
	switch {
	case avg > 0 && ok && left > 0:
		return min(avg, left), true
	case avg > 0:
		return avg, true
	case ok && left > 0:
		return min(FirstWait, left), true
	}
	return 0, false
}
