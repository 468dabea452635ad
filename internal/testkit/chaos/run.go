package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw"
)

// Rand is a generator with the helpers plans (and faults) need.
type Rand struct{ *rand.Rand }

func newRand(seed int64, stream uint64) Rand {
	return Rand{rand.New(rand.NewPCG(uint64(seed), stream))}
}

// Duration returns a uniform duration in [min, max].
func (r Rand) Duration(min, max time.Duration) time.Duration {
	return min + time.Duration(r.Int64N(int64(max-min)+1))
}

// LogDuration returns a duration in [min, max] uniform on a log scale.
func (r Rand) LogDuration(min, max time.Duration) time.Duration {
	lo, hi := math.Log(float64(min)), math.Log(float64(max))
	return time.Duration(math.Exp(lo + r.Float64()*(hi-lo)))
}

// Chance reports true with probability p.
func (r Rand) Chance(p float64) bool { return r.Float64() < p }

// Context kinds a nested operation derives its context from the enclosing
// lease's context with.
const (
	chaosCtxLease         = iota // lease.Context() itself
	chaosCtxCancel               // context.WithCancel, cancelled at random
	chaosCtxTimeout              // context.WithTimeout
	chaosCtxWithoutCancel        // context.WithoutCancel(lease.Context())
)

var chaosCtxNames = []string{"lease ctx", "derived ctx (cancelled)", "derived ctx (timeout)", "WithoutCancel(lease ctx)"}

// chaosAcq is how one acquisition is made.
type chaosAcq struct {
	try         bool
	fair        bool
	ttl         time.Duration // 0: the Locker's
	noWatchdog  bool
	hasWait     bool
	wait        time.Duration
	cancelAfter time.Duration // > 0: the context is cancelled then (lease included)
	timeout     time.Duration // > 0: context.WithTimeout
}

// describe tells how the acquisition is made, on Lockers whose WithTTL is
// lockerTTL.
func (a chaosAcq) describe(lockerTTL time.Duration) string {
	var b strings.Builder
	if a.try {
		b.WriteString("TryAcquire")
	} else {
		b.WriteString("Acquire")
	}
	if a.fair {
		b.WriteString(" Fair")
	}
	if a.ttl > 0 {
		fmt.Fprintf(&b, " ttl=%v", a.ttl)
	} else {
		fmt.Fprintf(&b, " ttl=%v(default)", lockerTTL)
	}
	if a.noWatchdog {
		b.WriteString(" WithoutWatchdog")
	}
	if a.hasWait {
		fmt.Fprintf(&b, " WithWait(%v)", a.wait)
	}
	if a.cancelAfter > 0 {
		fmt.Fprintf(&b, " cancel@%v", a.cancelAfter)
	}
	if a.timeout > 0 {
		fmt.Fprintf(&b, " timeout=%v", a.timeout)
	}
	return b.String()
}

// chaosOp is one planned operation: acquire, hold (running children at
// offsets into the hold), release.
type chaosOp struct {
	key        int
	acq        chaosAcq
	hold       time.Duration
	stopOnLoss bool // stop holding when the lease context ends
	release    int  // Release with 0: a live context, 1: an ended one, 2: a 50ms timeout
	children   []*chaosChild
}

// chaosChild is an acquisition made inside a lease's context: nested when
// its key is held on the context chain (by the same Locker), otherwise an
// outermost lease of another key.
type chaosChild struct {
	at       time.Duration // into the parent's hold
	ctxKind  int
	ctxAfter time.Duration // chaosCtxCancel, chaosCtxTimeout
	op       *chaosOp
}

// genOp draws an operation. Every random value is drawn here, before the
// operation runs, so that outcomes do not change what is drawn next.
//
// A top-level operation takes its slot's home key (slot % chaosKeys) more
// often than the others: with 6 slots on 4 keys, two keys are mostly
// contended by the waiters of one Locker, whose releases hand the lock over
// locally (transfer, early hand-over), and two by two Lockers.
func (c *chaosRun) genOp(r Rand, depth, homeKey, parentKey int) *chaosOp {
	op := &chaosOp{key: r.IntN(chaosKeys)}
	if r.Chance(0.5) {
		op.key = homeKey
	}
	if parentKey >= 0 && r.Chance(0.6) {
		op.key = parentKey
	}
	a := &op.acq
	a.try = r.Chance(0.3) && c.cfg.On("try")
	a.fair = r.Chance(0.35) && c.cfg.On("fair") && c.store.Fair
	if r.Chance(0.75) {
		minTTL := c.tm.MinTTL
		if !c.cfg.On("shortttl") {
			minTTL = c.tm.ShortMinTTL
		}
		a.ttl = r.LogDuration(minTTL, c.tm.MaxTTL)
		if step := c.tm.TTLStep; step > 0 {
			a.ttl = min(max(a.ttl.Round(step), minTTL), c.tm.MaxTTL)
		}
	}
	a.noWatchdog = r.Chance(0.3) && c.cfg.On("nowatchdog")
	if r.Chance(0.6) && c.cfg.On("wait") || depth > 0 {
		// Inside a lease, waits are bounded: two holders waiting for each
		// other's key must give up.
		a.hasWait, a.wait = true, r.Duration(0, 1500*time.Millisecond)
		if depth > 0 {
			a.wait = r.Duration(0, 400*time.Millisecond)
		}
	}
	if c.cfg.On("cancel") {
		if r.Chance(0.15) {
			a.cancelAfter = r.Duration(time.Millisecond, 2*time.Second)
		}
		if r.Chance(0.1) {
			a.timeout = r.Duration(time.Millisecond, 3*time.Second)
		}
	}
	ttl := a.ttl
	if ttl == 0 {
		ttl = c.tm.LockerTTL
	}
	// Holds from 0 to 3×TTL: most are short, so that hand-overs come
	// thick and fast; the rest, uniform on a log scale, outlast renewals,
	// or the lease itself without a watchdog.
	long := ttl * 3
	if depth > 0 {
		long = ttl
	}
	switch x := r.Float64(); {
	case x < 0.05:
		op.hold = 0
	case x < 0.8:
		op.hold = r.LogDuration(50*time.Microsecond, 20*time.Millisecond)
	default:
		op.hold = r.LogDuration(20*time.Millisecond, long)
	}
	op.stopOnLoss = r.Chance(0.8)
	op.release = r.IntN(3)
	if depth < 2 && c.cfg.On("nest") {
		for n := r.IntN(3); n > 0; n-- {
			if !r.Chance(0.5) {
				continue
			}
			ch := &chaosChild{at: r.Duration(0, op.hold), ctxKind: r.IntN(4)}
			if ch.ctxKind == chaosCtxWithoutCancel && !c.cfg.On("withoutcancel") {
				ch.ctxKind = chaosCtxLease
			}
			ch.ctxAfter = r.Duration(0, ttl)
			ch.op = c.genOp(r, depth+1, homeKey, op.key)
			op.children = append(op.children, ch)
		}
	}
	return op
}

// chaosLease is the record of one lease.
type chaosLease struct {
	id     int64
	key    string
	locker string
	mode   string
	fence  uint64
	ttl    time.Duration // its outermost lease's TTL
	lease  *lockmw.Lease
	// parent is the context Acquire was called with, from which the
	// lease context derives.
	parent context.Context
	// outer is, for a nested lease, the lease on the context chain it was
	// acquired in (itself perhaps nested): root is the holding it belongs to.
	outer *chaosLease

	// Since the run began: Acquire called and returned, Release called and
	// returned, context ended.
	called, granted, releasing, released, ended time.Duration
	isReleased, isEnded                         bool
	cause                                       string
	releaseErr                                  string

	// Outermost leases: the epoch (see dataLoss) and whether the fence
	// is compared.
	epoch   int
	fenceOK bool

	nested []*chaosLease // outermost leases: every lease nested in it
	// holdEnded is, for an outermost lease, when its holding ended: its
	// Release was called, or its context ended lost (ErrLost) or closed
	// (ErrClosed). A context that ended only because the context it was
	// acquired with did still holds the lock until Release, and lockmw
	// still nests in it.
	holdEnded   time.Duration
	isHoldEnded bool
	outerEnded  time.Duration // nested: when its outermost lease's holding ended while it was live
	outerGone   bool
	overlapped  bool // a grant to another holder while it was live was reported
}

func (l *chaosLease) root() *chaosLease {
	for l.outer != nil {
		l = l.outer
	}
	return l
}

func (l *chaosLease) String() string {
	end := "live"
	if l.isEnded {
		end = fmtD(l.ended)
	}
	s := fmt.Sprintf("#%d %s fence=%d [%s → %s] %s", l.id, l.locker, l.fence, fmtD(l.granted), end, l.mode)
	if l.isReleased {
		s += fmt.Sprintf("; Release %s–%s", fmtD(l.releasing), fmtD(l.released))
		if l.releaseErr != "" {
			s += " = " + l.releaseErr
		}
	}
	if l.isEnded && l.cause != "" {
		s += "; cause: " + l.cause
	}
	return s
}

func fmtD(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }

// chaosKeyState is the registry of one key.
type chaosKeyState struct {
	live map[*chaosLease]struct{}
	hist []*chaosLease // every lease of the key, oldest first (trimmed)
	// maxEnded is the outermost lease with the highest fence among those
	// of the current epoch whose context has ended.
	maxEnded *chaosLease
	fences   map[uint64]*chaosLease // current epoch
}

const chaosHistCap = 5000

type chaosFaultRec struct {
	name       string
	begin, end time.Duration
	notes      []string
}

func (f *chaosFaultRec) String() string {
	return fmt.Sprintf("%s–%s %s %s", fmtD(f.begin), fmtD(f.end), f.name, strings.Join(f.notes, "; "))
}

type chaosViolation struct {
	at   time.Duration
	key  string
	kind string
	msg  string
	// stale is, for an overlap, the lease that was still live when
	// another holder's lease was granted (at).
	stale *chaosLease
}

// stallExcused reports whether timer lateness explains an overlap: only a
// stall longer than the stale holding's drift margin (its outermost lease's
// TTL × drift factor + 2ms) can make a correct lease outlive its lock, and
// then by less than the stall; the stale lease, and its outermost lease,
// must have ended within twice the worst lateness seen after the other's
// grant (the deadline timer and the AfterFunc that recorded the end can
// each be that late). Caller holds c.mu.
func (c *chaosRun) stallExcused(v *chaosViolation) (excess, late time.Duration, ok bool) {
	if v.stale == nil {
		return 0, 0, false
	}
	root := v.stale.root()
	if !v.stale.isEnded || !root.isEnded {
		return 0, 0, false
	}
	excess = max(v.stale.ended, root.ended) - v.at
	late = c.latenessLocked(v.at-2*c.tm.MaxTTL, max(v.stale.ended, root.ended))
	margin := time.Duration(float64(root.ttl)*c.cfg.Drift) + 2*time.Millisecond
	return excess, late, late > margin && excess <= 2*late
}

// chaosSlot is one Locker position; Locker churn replaces its Locker.
type chaosSlot struct {
	idx int
	mu  sync.Mutex
	l   *lockmw.Locker
	gen int
}

func (s *chaosSlot) current() (*lockmw.Locker, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.l, fmt.Sprintf("L%d.%d", s.idx, s.gen)
}

type chaosRun struct {
	t     *testing.T
	cfg   Config
	store Store
	tm    Timing        // store.Timing with defaults
	dur   time.Duration // how long the run lasts
	dep   *Deployment
	begin time.Time
	ctx   context.Context // ends when the run stops
	slots []*chaosSlot

	mu         sync.Mutex
	keys       map[string]*chaosKeyState
	epoch      int // odd while a data-losing restart is under way
	nextID     int64
	faults     []*chaosFaultRec
	violations []*chaosViolation
	dropped    int // violations beyond chaosMaxViolations
	stats      map[string]int
	lateness   []time.Duration // worst timer lateness per chaosLatenessBucket
	lockers    []*lockmw.Locker
	stop       context.CancelFunc
}

func (c *chaosRun) now() time.Duration { return time.Since(c.begin) }

func (c *chaosRun) count(what string) {
	c.mu.Lock()
	c.stats[what]++
	c.mu.Unlock()
}

func (c *chaosRun) keyState(key string) *chaosKeyState {
	ks := c.keys[key]
	if ks == nil {
		ks = &chaosKeyState{live: map[*chaosLease]struct{}{}, fences: map[uint64]*chaosLease{}}
		c.keys[key] = ks
	}
	return ks
}

// violateLocked records a violation and returns it (nil once
// chaosMaxViolations are recorded: the run then stops). Caller holds c.mu.
func (c *chaosRun) violateLocked(key, kind, format string, args ...any) *chaosViolation {
	if len(c.violations) >= chaosMaxViolations {
		c.dropped++
		c.stop()
		return nil
	}
	v := &chaosViolation{at: c.now(), key: key, kind: kind, msg: fmt.Sprintf(format, args...)}
	c.violations = append(c.violations, v)
	return v
}

func (c *chaosRun) violate(key, kind, format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.violateLocked(key, kind, format, args...)
}

// chaosFloor is what a new outermost lease's fence must exceed: the highest
// fence of the key's leases that had ended before its Acquire was called.
type chaosFloor struct {
	epoch int
	lease *chaosLease
}

func (c *chaosRun) floor(key string) chaosFloor {
	c.mu.Lock()
	defer c.mu.Unlock()
	ks := c.keyState(key)
	f := chaosFloor{epoch: c.epoch, lease: ks.maxEnded}
	for e := range ks.live {
		if e.outer == nil && e.fenceOK && e.epoch == c.epoch && e.lease.Context().Err() != nil &&
			(f.lease == nil || e.fence > f.lease.fence) {
			f.lease = e
		}
	}
	return f
}

// register records a lease as Acquire or TryAcquire has just returned it,
// and checks it against the key's live leases.
func (c *chaosRun) register(rec *chaosLease, floor chaosFloor) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec.granted = c.now()
	c.nextID++
	rec.id = c.nextID
	ks := c.keyState(rec.key)
	root := rec.root()
	recLive := chaosLive(rec)
	for e := range ks.live {
		if recLive && e.root() != root && chaosLive(e) {
			if e.overlapped {
				// Reported already: one stale lease, many grants.
				c.stats["further grants while an overlapping lease was live"]++
				continue
			}
			e.overlapped = true
			v := c.violateLocked(rec.key, "overlap", "%s granted #%d while #%d (%s, in holder #%d) was live (timers fired up to %v late in the 2s before):\n\t\t%s\n\t\t%s",
				rec.locker, rec.id, e.id, e.locker, e.root().id, c.latenessLocked(rec.granted-2*time.Second, rec.granted).Round(time.Millisecond), rec, e)
			if v != nil {
				v.stale = e
			}
		}
	}
	if o := root; o != rec {
		// lockmw nests in the outermost lease on the chain: that is the
		// holding a nested lease belongs to.
		if rec.fence != o.fence {
			c.violateLocked(rec.key, "nested fence", "nested #%d has fence %d, its outermost lease #%d has %d", rec.id, rec.fence, o.id, o.fence)
		}
		// Granted after the holding ended (or while it was ending): the
		// nested lease must end within the grace of that end (see ended).
		if o.isHoldEnded {
			rec.outerEnded, rec.outerGone = o.holdEnded, true
		}
		// lockmw ends nested leases before it ends the outermost lease
		// (its context with ErrLost or ErrClosed, or Release): one whose
		// outermost lease has ended so must have ended too.
		if holdingGone(o) && rec.lease.Context().Err() == nil {
			c.violateLocked(rec.key, "nested outlives outer", "nested #%d is live though its outermost lease #%d has ended:\n\t\t%s\n\t\t%s", rec.id, o.id, rec, o)
		}
		o.nested = append(o.nested, rec)
	} else {
		rec.epoch = c.epoch
		rec.fenceOK = floor.epoch == c.epoch && c.epoch%2 == 0
		if rec.fenceOK {
			if p := floor.lease; p != nil && rec.fence <= p.fence {
				c.violateLocked(rec.key, "fence order", "#%d got fence %d, not above fence %d of #%d, which had ended before #%d was asked for:\n\t\t%s\n\t\t%s",
					rec.id, rec.fence, p.fence, p.id, rec.id, rec, p)
			}
			if p := ks.fences[rec.fence]; p != nil {
				c.violateLocked(rec.key, "fence reused", "#%d and #%d both got fence %d:\n\t\t%s\n\t\t%s", rec.id, p.id, rec.fence, rec, p)
			}
			ks.fences[rec.fence] = rec
		}
	}
	ks.live[rec] = struct{}{}
	ks.hist = append(ks.hist, rec)
	if len(ks.hist) > chaosHistCap {
		ks.hist = append(ks.hist[:0], ks.hist[chaosHistCap/2:]...)
	}
	context.AfterFunc(rec.lease.Context(), func() { c.ended(rec) })
}

// chaosLive reports whether l's context is live. For a nested lease whose
// outermost lease's context has ended, it first waits for that
// cancellation to finish (context.Cause takes the context's lock, which
// the cancellation holds until every context derived from it is cancelled
// too): a nested lease made through a derived context is then done, one
// that still is live outlives its holding.
func chaosLive(l *chaosLease) bool {
	if l.lease.Context().Err() != nil {
		return false
	}
	if r := l.root(); r != l && r.lease.Context().Err() != nil {
		_ = context.Cause(r.lease.Context())
	}
	return l.lease.Context().Err() == nil
}

// ended runs when rec's context has ended.
func (c *chaosRun) ended(rec *chaosLease) {
	// Cause takes the context's lock, which its cancellation holds until
	// every context derived from it is cancelled too: after it, a nested
	// lease made through a derived context must be done.
	cause := context.Cause(rec.lease.Context())
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	rec.ended, rec.isEnded = now, true
	if cause != nil {
		rec.cause = cause.Error()
	}
	ks := c.keyState(rec.key)
	delete(ks.live, rec)
	if rec.outer == nil && rec.fenceOK && rec.epoch == c.epoch && (ks.maxEnded == nil || rec.fence > ks.maxEnded.fence) {
		ks.maxEnded = rec
	}
	if rec.outer == nil && (errors.Is(cause, lockmw.ErrLost) || errors.Is(cause, lockmw.ErrClosed)) {
		c.holdEndedLocked(rec, now)
	}
	if rec.outer == nil && holdingGone(rec) {
		c.nestedEndedLocked(rec)
	}
	if rec.outerGone {
		// Its holding ended (Release called, lost or closed) while it was
		// live; judged exactly above. How late its end was seen here says
		// how busy the host was, and one past the grace is counted.
		if lag := now - rec.outerEnded; lag > chaosNestGrace+2*c.latenessLocked(rec.outerEnded-time.Second, now) {
			c.stats["nested lease's end seen past the grace after its outer's (a late goroutine)"]++
		} else {
			c.stats["nested lease ended just after its outer (within grace)"]++
		}
	}
}

// holdingGone reports whether lockmw is known to have ended the outermost
// lease rec's holding: Release returned, or its context ended with ErrLost
// or ErrClosed while the context it was acquired with is live (so lockmw
// ended it, not the parent, whose cause the lease context would carry). A
// context ended by its parent ends no holding: the lock stays held, and
// leases nested through context.WithoutCancel stay live, until Release.
// Caller holds c.mu.
func holdingGone(rec *chaosLease) bool {
	if rec.isReleased {
		return true
	}
	cause := context.Cause(rec.lease.Context())
	return rec.parent.Err() == nil && (errors.Is(cause, lockmw.ErrLost) || errors.Is(cause, lockmw.ErrClosed))
}

// nestedEndedLocked checks that every lease nested in the outermost lease
// rec has ended, once lockmw ended rec's holding: lockmw ends nested
// leases first. This is judged by their contexts, not by when the
// checker's goroutines that record their ends got to run, which on a
// loaded host can be hundreds of milliseconds apart. Caller holds c.mu.
func (c *chaosRun) nestedEndedLocked(rec *chaosLease) {
	for _, n := range rec.nested {
		if n.lease.Context().Err() == nil {
			c.violateLocked(rec.key, "nested outlives outer", "nested #%d is live though its outermost lease #%d has ended:\n\t\t%s\n\t\t%s", n.id, rec.id, n, rec)
		}
	}
}

// holdEndedLocked records that the outermost lease rec's holding ended at
// now, if it had not already: every lease nested in it must end within
// chaosNestGrace. Caller holds c.mu.
func (c *chaosRun) holdEndedLocked(rec *chaosLease, now time.Duration) {
	if rec.isHoldEnded {
		return
	}
	rec.holdEnded, rec.isHoldEnded = now, true
	for _, n := range rec.nested {
		if !n.isEnded && !n.outerGone {
			n.outerEnded, n.outerGone = now, true
		}
	}
}

// dataLoss brackets a restart that loses stored data (see FaultEnv).
func (c *chaosRun) dataLoss(bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	if c.epoch%2 == 0 {
		for _, ks := range c.keys {
			ks.maxEnded = nil
			ks.fences = map[uint64]*chaosLease{}
		}
	}
}

// allEnded reports every lease whose context is still live.
func (c *chaosRun) allEnded(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, ks := range c.keys {
		for e := range ks.live {
			if e.lease.Context().Err() == nil {
				c.violateLocked(key, "lease outlives its validity", "%s, #%d still live:\n\t\t%s", why, e.id, e)
			}
		}
	}
}

// lockerOpts are the options of slot's Lockers: odd slots describe
// themselves (WithHolderInfo), so that the stores' holder descriptions,
// written with or beside the holdings, run under the faults too.
func (c *chaosRun) lockerOpts(slot int) []lockmw.Option {
	opts := []lockmw.Option{
		lockmw.WithTTL(c.tm.LockerTTL),
		lockmw.WithDriftFactor(c.cfg.Drift),
		lockmw.WithLogger(slog.New(slog.DiscardHandler)),
	}
	if slot%2 == 1 {
		opts = append(opts, lockmw.WithHolderInfo(fmt.Sprintf("chaos slot %d", slot)))
	}
	return opts
}

// newLocker returns a new Locker for slot, or nil (after failing the test)
// if the store could not make one.
func (c *chaosRun) newLocker(slot int) *lockmw.Locker {
	l, err := c.dep.NewLocker(slot, c.lockerOpts(slot)...)
	if err != nil {
		c.t.Errorf("new Locker for slot %d: %v", slot, err)
		return nil
	}
	c.mu.Lock()
	c.lockers = append(c.lockers, l)
	c.mu.Unlock()
	return l
}

// Run runs the checker against store for cfg.Duration (or the store's
// Timing.ShortDuration), then closes every Locker, checks what is left and
// fails t with the seed and the history around each violation. Run's
// goroutines and the store's deployment end before it returns (the
// deployment's processes at t's cleanup).
func Run(t *testing.T, cfg Config, store Store) {
	before := lockmwGoroutines()
	tm := store.Timing.withDefaults()
	dep := store.Start(t, chaosSlots)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	c := &chaosRun{
		t: t, cfg: cfg, store: store, tm: tm, dur: tm.duration(cfg), dep: dep, ctx: ctx, stop: stop,
		keys:  map[string]*chaosKeyState{},
		stats: map[string]int{},
	}
	var faultNames []string
	for _, f := range dep.Faults {
		if !slices.Contains(store.FaultNames, f.Name) || !slices.Contains(repoFaults, f.Name) {
			t.Fatalf("chaos %s: fault %q is not in the store's FaultNames %v, or not in repoFaults", store.Name, f.Name, store.FaultNames)
		}
		if cfg.On(f.Name) {
			faultNames = append(faultNames, f.Name)
		}
	}
	links := map[string]int{}
	for i := range chaosSlots {
		links[dep.Describe(i)]++
	}
	var linkDesc []string
	for _, l := range slices.Sorted(maps.Keys(links)) {
		linkDesc = append(linkDesc, fmt.Sprintf("%d %s", links[l], l))
	}
	t.Logf("chaos %s: %v, %d Lockers (%s), %d workers, %d keys, TTLs %v–%v, faults %s",
		store.Name, c.dur, chaosSlots, strings.Join(linkDesc, ", "), chaosSlots*chaosWorkersPerSlot, chaosKeys, tm.MinTTL, tm.MaxTTL, strings.Join(faultNames, ","))
	c.begin = time.Now()
	for i := range chaosSlots {
		l := c.newLocker(i)
		if l == nil {
			t.FailNow()
		}
		c.slots = append(c.slots, &chaosSlot{idx: i, l: l})
	}

	var wg sync.WaitGroup
	for w := range chaosSlots * chaosWorkersPerSlot {
		wg.Go(func() { c.worker(w, c.slots[w%chaosSlots]) })
	}
	var faultsDone sync.WaitGroup
	wg.Go(c.watchLateness)
	var exclusive sync.RWMutex
	for i := range chaosFaultLoops {
		faultsDone.Go(func() { c.faultLoop(i, &exclusive) })
	}
	if cfg.On("close") {
		wg.Go(c.churn)
	}
	select {
	case <-time.After(c.dur):
	case <-ctx.Done(): // too many violations
	}
	stop()
	wg.Wait()
	faultsDone.Wait()
	c.finish(before)
	c.report()
}

// chaosLatenessTick is how often watchLateness measures, and the width
// of the buckets it keeps.
const (
	chaosLatenessTick   = 5 * time.Millisecond
	chaosLatenessBucket = 100 * time.Millisecond
)

// watchLateness measures, until the run stops, how late this process's
// timers fire: the worst lateness per chaosLatenessBucket.
func (c *chaosRun) watchLateness() {
	t := time.NewTimer(chaosLatenessTick)
	defer t.Stop()
	for {
		start := time.Now()
		t.Reset(chaosLatenessTick)
		select {
		case <-t.C:
		case <-c.ctx.Done():
			return
		}
		late := time.Since(start) - chaosLatenessTick
		c.mu.Lock()
		i := int(c.now() / chaosLatenessBucket)
		for len(c.lateness) <= i {
			c.lateness = append(c.lateness, 0)
		}
		c.lateness[i] = max(c.lateness[i], late)
		c.mu.Unlock()
	}
}

// latenessLocked returns the worst timer lateness seen in [from, to].
// Caller holds c.mu.
func (c *chaosRun) latenessLocked(from, to time.Duration) time.Duration {
	var worst time.Duration
	for i := max(0, int(from/chaosLatenessBucket)); i <= int(to/chaosLatenessBucket) && i < len(c.lateness); i++ {
		worst = max(worst, c.lateness[i])
	}
	return worst
}

// worker runs planned operations on its slot's current Locker until the
// run stops.
func (c *chaosRun) worker(w int, slot *chaosSlot) {
	r := newRand(c.cfg.Seed, uint64(w)+1)
	for c.ctx.Err() == nil {
		op := c.genOp(r, 0, slot.idx%chaosKeys, -1)
		gap := r.Duration(0, 30*time.Millisecond)
		l, name := slot.current()
		if err := c.runOp(l, name, c.ctx, nil, op, ""); errors.Is(err, lockmw.ErrUnavailable) {
			gap += 25 * time.Millisecond // the store is down: do not spin
		}
		c.sleep(gap)
	}
}

// sleep waits d or until the run stops, and reports whether it goes on.
func (c *chaosRun) sleep(d time.Duration) bool {
	if d <= 0 {
		return c.ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// runOp acquires op's key on l with a context derived from parent, holds
// it (running op's children), and releases it. chain is the leases on
// parent's context chain, innermost last: an acquisition of a key held on it
// is nested in that lease.
func (c *chaosRun) runOp(l *lockmw.Locker, lname string, parent context.Context, chain []*chaosLease, op *chaosOp, how string) error {
	key := "chaos:" + strconv.Itoa(op.key)
	var outer *chaosLease
	for i := len(chain) - 1; i >= 0; i-- {
		if chain[i].key == key {
			outer = chain[i]
			break
		}
	}
	ctx := parent
	if op.acq.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, op.acq.timeout)
		defer cancel()
	}
	if op.acq.cancelAfter > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		timer := time.AfterFunc(op.acq.cancelAfter, cancel)
		defer timer.Stop()
	}
	var opts []lockmw.AcquireOption
	if op.acq.fair {
		opts = append(opts, lockmw.Fair())
	}
	if op.acq.ttl > 0 {
		opts = append(opts, lockmw.WithLeaseTTL(op.acq.ttl))
	}
	if op.acq.noWatchdog {
		opts = append(opts, lockmw.WithoutWatchdog())
	}
	if op.acq.hasWait {
		opts = append(opts, lockmw.WithWait(op.acq.wait))
	}
	// The floor is taken in case the acquisition turns out not to nest:
	// lockmw nests only in a lease that is still held, and acquires anew
	// through the context of one that has ended.
	floor := c.floor(key)
	called := c.now()
	var lease *lockmw.Lease
	var err error
	if op.acq.try {
		lease, err = l.TryAcquire(ctx, key, opts...)
	} else {
		lease, err = l.Acquire(ctx, key, opts...)
	}
	if err != nil || lease == nil {
		c.countErr(key, err, outer != nil)
		return err
	}
	if outer != nil && lease.Fence() != outer.root().fence {
		// A lock of its own, not a nested lease: the outer lease had
		// ended (its context is done: checked as for any grant, the
		// outer's holding must not be live beside this one).
		c.count("acquired anew through an ended lease's context")
		outer = nil
	}
	mode := op.acq.describe(c.tm.LockerTTL)
	if how != "" {
		mode += " in " + how
	}
	if outer != nil {
		mode = fmt.Sprintf("nested in #%d, %s", outer.id, mode)
		c.count("granted nested")
	} else {
		c.count("granted")
	}
	ttl := op.acq.ttl
	if ttl == 0 {
		ttl = c.tm.LockerTTL
	}
	if outer != nil {
		ttl = outer.root().ttl
	}
	rec := &chaosLease{key: key, locker: lname, mode: mode, fence: lease.Fence(), ttl: ttl, lease: lease, parent: ctx, outer: outer, called: called}
	c.register(rec, floor)

	var children sync.WaitGroup
	for _, ch := range op.children {
		children.Go(func() { c.runChild(l, lname, lease, append(slices.Clip(chain), rec), ch) })
	}
	hold := time.NewTimer(op.hold)
	var lost <-chan struct{}
	if op.stopOnLoss {
		lost = lease.Context().Done()
	}
	select {
	case <-hold.C:
	case <-lost:
	case <-c.ctx.Done():
	}
	hold.Stop()

	rctx := context.Background()
	switch op.release {
	case 1:
		var cancel context.CancelFunc
		rctx, cancel = context.WithCancel(rctx)
		cancel()
	case 2:
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(rctx, 50*time.Millisecond)
		defer cancel()
	}
	releasing := c.now()
	if rec.outer == nil {
		c.mu.Lock()
		c.holdEndedLocked(rec, releasing)
		c.mu.Unlock()
	}
	rerr := lease.Release(rctx)
	c.mu.Lock()
	rec.releasing, rec.released, rec.isReleased = releasing, c.now(), true
	if rerr != nil {
		rec.releaseErr = rerr.Error()
	}
	if rec.outer == nil {
		c.nestedEndedLocked(rec)
	}
	c.mu.Unlock()
	children.Wait()
	return nil
}

// runChild runs ch inside the lease's context once ch.at of the hold has
// passed.
func (c *chaosRun) runChild(l *lockmw.Locker, lname string, lease *lockmw.Lease, chain []*chaosLease, ch *chaosChild) {
	if !c.sleep(ch.at) {
		return
	}
	ctx := lease.Context()
	switch ch.ctxKind {
	case chaosCtxCancel:
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		timer := time.AfterFunc(ch.ctxAfter, cancel)
		defer timer.Stop()
	case chaosCtxTimeout:
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ch.ctxAfter)
		defer cancel()
	case chaosCtxWithoutCancel:
		ctx = context.WithoutCancel(ctx)
	}
	_ = c.runOp(l, lname, ctx, chain, ch.op, fmt.Sprintf("%s of #%d", chaosCtxNames[ch.ctxKind], chain[len(chain)-1].id))
}

// countErr classifies a failed acquisition.
func (c *chaosRun) countErr(key string, err error, nested bool) {
	what := "acquire "
	if nested {
		what = "nested acquire "
	}
	switch {
	case err == nil:
		c.violate(key, "api", "Acquire returned neither a lease nor an error")
		return
	case errors.Is(err, lockmw.ErrNotAcquired):
		what += "busy"
	case errors.Is(err, lockmw.ErrUnavailable):
		what += "unavailable"
	case errors.Is(err, lockmw.ErrClosed):
		what += "closed"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		what += "context ended"
	default:
		c.violate(key, "api", "unexpected acquire error: %v", err)
		return
	}
	c.count(what)
}

// faultLoop runs fault schedule i: one fault at a time, with pauses
// between them, until the run stops. An exclusive fault waits until no
// other schedule's fault runs, and holds the others off.
func (c *chaosRun) faultLoop(i int, exclusive *sync.RWMutex) {
	var faults []Fault // each as many times as its weight
	for _, f := range c.dep.Faults {
		if c.cfg.On(f.Name) {
			n := f.Weight
			if n == 0 {
				n = 4
			}
			for range n {
				faults = append(faults, f)
			}
		}
	}
	if len(faults) == 0 {
		return
	}
	r := newRand(c.cfg.Seed, 1000+uint64(i))
	for c.sleep(r.Duration(20*time.Millisecond, 500*time.Millisecond)) {
		f := faults[r.IntN(len(faults))]
		if f.Exclusive {
			exclusive.Lock()
		} else {
			exclusive.RLock()
		}
		rec := &chaosFaultRec{name: f.Name, begin: c.now()}
		env := &FaultEnv{
			T:      softTB{c.t},
			Rand:   r,
			MaxTTL: c.tm.MaxTTL,
			Sleep:  c.sleep,
			Note: func(format string, args ...any) {
				c.mu.Lock()
				rec.notes = append(rec.notes, fmt.Sprintf(format, args...))
				c.mu.Unlock()
			},
			DataLoss: c.dataLoss,
			AllEnded: c.allEnded,
		}
		f.Run(env)
		if f.Exclusive {
			exclusive.Unlock()
		} else {
			exclusive.RUnlock()
		}
		c.mu.Lock()
		rec.end = c.now()
		c.faults = append(c.faults, rec)
		c.stats["fault "+f.Name]++
		c.mu.Unlock()
	}
}

// churn closes a random slot's Locker now and then, mid-flight, and puts a
// fresh one in its place.
func (c *chaosRun) churn() {
	r := newRand(c.cfg.Seed, 2000)
	for c.sleep(r.Duration(500*time.Millisecond, 4*time.Second)) {
		s := c.slots[r.IntN(len(c.slots))]
		fresh := c.newLocker(s.idx)
		if fresh == nil {
			return
		}
		s.mu.Lock()
		old, oldName := s.l, fmt.Sprintf("L%d.%d", s.idx, s.gen)
		s.l = fresh
		s.gen++
		s.mu.Unlock()
		rec := &chaosFaultRec{name: "close", begin: c.now(), notes: []string{oldName + ".Close(), replaced by " + fmt.Sprintf("L%d.%d", s.idx, s.gen)}}
		if err := old.Close(); err != nil {
			rec.notes = append(rec.notes, "Close: "+err.Error())
		}
		c.mu.Lock()
		rec.end = c.now()
		c.faults = append(c.faults, rec)
		c.stats["Locker closed mid-flight"]++
		c.mu.Unlock()
	}
}

// finish closes every Locker and runs the checks that follow the run.
func (c *chaosRun) finish(before map[string]string) {
	c.mu.Lock()
	lockers := slices.Clone(c.lockers)
	c.mu.Unlock()
	for _, l := range lockers {
		_ = l.Close()
	}
	end := c.now()

	// Every lease context has ended (Close ends those still held). The
	// AfterFuncs that record it run in goroutines of their own: give them
	// a moment.
	deadline := time.Now().Add(2 * time.Second)
	for {
		c.mu.Lock()
		var live []*chaosLease
		for _, ks := range c.keys {
			for e := range ks.live {
				if e.lease.Context().Err() == nil {
					live = append(live, e)
				}
			}
		}
		if len(live) > 0 && time.Now().After(deadline) {
			for _, e := range live {
				c.violateLocked(e.key, "lease outlives its Locker", "#%d still live after the run, with every Locker closed:\n\t\t%s", e.id, e)
			}
		}
		c.mu.Unlock()
		if len(live) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Nothing stays behind in the store: lock keys go within their TTL
	// (a release that could not reach the store leaves them to expire),
	// queues and subscriptions at once.
	maxExpiry := c.tm.MaxTTL + c.tm.ExpirySlack
	deadline = time.Now().Add(maxExpiry + 2*time.Second)
	var residue []Residue
	for {
		var err error
		residue, err = c.dep.Residue(context.Background())
		if err != nil {
			c.t.Errorf("listing what the store holds: %v", err)
			break
		}
		if !c.cfg.On("queueresidue") {
			residue = slices.DeleteFunc(residue, func(r Residue) bool { return r.Queue })
		}
		for _, r := range residue {
			if r.Lock && (r.TTL < 0 || r.TTL > maxExpiry) {
				c.violate("", "residue", "%v after the run: a lock key with no expiry or one beyond the longest TTL %v (+%v)", r, c.tm.MaxTTL, c.tm.ExpirySlack)
			}
		}
		if len(residue) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, r := range residue {
		c.violate("", "residue", "%v still there %v after every Locker closed", r, c.now()-end)
	}

	// No lockmw goroutine outlives its Locker.
	deadline = time.Now().Add(maxExpiry + 3*time.Second)
	for {
		var leaked []string
		for id, stack := range lockmwGoroutines() {
			if _, ok := before[id]; !ok {
				leaked = append(leaked, stack)
			}
		}
		if len(leaked) == 0 {
			break
		}
		if time.Now().After(deadline) {
			sort.Strings(leaked)
			c.violate("", "goroutine leak", "%d goroutines running lockmw code outlive the run, e.g.:\n%s", len(leaked), strings.Join(leaked[:min(3, len(leaked))], "\n\n"))
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lockmwCode matches a function of lockmw's own packages in a stack: the
// core and its internal packages, and the stores below it (such as
// lockmw/etcd). lockmwGoroutines leaves out test packages and harnesses
// (lockmw/etcd_test, lockmw/etcd/internal/etcdtest), whose goroutines
// belong to the test; lockmw_test does not match at all.
var lockmwCode = regexp.MustCompile(`github\.com/lockmw/lockmw/lockmw(/[a-z0-9_/]*[a-z0-9])?\.`)

// runsLockmw reports whether a goroutine's stack has a frame of lockmw's
// code, test packages and harnesses aside.
func runsLockmw(stack string) bool {
	for _, m := range lockmwCode.FindAllStringSubmatch(stack, -1) {
		if !strings.HasSuffix(m[1], "test") {
			return true
		}
	}
	return false
}

// lockmwGoroutines returns the stacks of the goroutines running lockmw's
// code (see lockmwCode), by goroutine id.
func lockmwGoroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !runsLockmw(g) {
			continue
		}
		if f := strings.Fields(g); len(f) > 1 && f[0] == "goroutine" {
			out[f[1]] = g
		}
	}
	return out
}

// report logs the run's figures and fails the test with the seed and the
// history around each violation.
func (c *chaosRun) report() {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Overlaps that timer lateness explains are logged, not failed.
	var excused []string
	c.violations = slices.DeleteFunc(c.violations, func(v *chaosViolation) bool {
		excess, late, ok := c.stallExcused(v)
		if ok {
			excused = append(excused, fmt.Sprintf("at %s on %s: #%d (TTL %v) outlived the grant by %v; timers fired up to %v late then:\n\t%s",
				fmtD(v.at), v.key, v.stale.id, v.stale.ttl.Round(time.Millisecond), excess.Round(time.Millisecond), late.Round(time.Millisecond), v.msg))
		}
		return ok
	})
	if len(excused) > 0 {
		c.t.Logf("chaos %s: %d overlap(s) within a timer stall (not failures: lockmw's exclusion assumes its timers fire within the drift margin):\n%s",
			c.store.Name, len(excused), strings.Join(excused, "\n"))
	}
	var stats []string
	for _, k := range slices.Sorted(maps.Keys(c.stats)) {
		stats = append(stats, fmt.Sprintf("%s: %d", k, c.stats[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(c.keys)) {
		var held time.Duration
		var n int
		for _, l := range c.keys[k].hist {
			if l.outer == nil && l.isEnded {
				held += l.ended - l.granted
				n++
			}
		}
		stats = append(stats, fmt.Sprintf("%s: %d outermost leases (last %d kept), live %.0f%% of the run", k, n, len(c.keys[k].hist), 100*held.Seconds()/c.now().Seconds()))
	}
	stats = append(stats, fmt.Sprintf("timers fired up to %v late (drift factor %v)", c.latenessLocked(0, c.now()).Round(time.Millisecond), c.cfg.Drift))
	c.t.Logf("chaos %s: seed %d, %s:\n\t%s", c.store.Name, c.cfg.Seed, fmtD(c.now()), strings.Join(stats, "\n\t"))
	if len(c.violations) == 0 {
		return
	}
	var b strings.Builder
	kinds := map[string]int{}
	for _, v := range c.violations {
		kinds[v.kind]++
	}
	fmt.Fprintf(&b, "chaos %s: %d violation(s) (", c.store.Name, len(c.violations)+c.dropped)
	for i, k := range slices.Sorted(maps.Keys(kinds)) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %d", k, kinds[k])
	}
	fmt.Fprintf(&b, ") with seed %d.\nReplay the same schedule of operations and faults (timing differs from run to run, so a failure may need a few tries or a longer run):\n\t", c.cfg.Seed)
	if c.store.Dir != "" {
		fmt.Fprintf(&b, "cd %s && ", c.store.Dir)
	}
	pkg := c.store.Package
	if pkg == "" {
		pkg = "."
	}
	fmt.Fprintf(&b, "go test -race -count=1 -run '^TestChaos$/^%s$' %s -args -chaos.seed=%d -chaos.duration=%v",
		c.store.Name, pkg, c.cfg.Seed, c.dur)
	if len(c.cfg.Disabled) > 0 {
		fmt.Fprintf(&b, " -chaos.disable=%s", strings.Join(slices.Sorted(maps.Keys(c.cfg.Disabled)), ","))
	}
	if c.cfg.Drift != DefaultDrift {
		fmt.Fprintf(&b, " -chaos.drift=%v", c.cfg.Drift)
	}
	b.WriteString("\n")
	shown := map[string]int{}
	for i, v := range c.violations {
		fmt.Fprintf(&b, "\n[%d] at %s, %s", i+1, fmtD(v.at), v.kind)
		if v.key != "" {
			fmt.Fprintf(&b, " on %s", v.key)
		}
		fmt.Fprintf(&b, ": %s\n", v.msg)
		// The history around the first violation of each kind.
		if shown[v.kind] >= 1 || v.key == "" {
			continue
		}
		shown[v.kind]++
		from, to := v.at-4*time.Second, v.at+500*time.Millisecond
		fmt.Fprintf(&b, "    leases of %s around it (granted → context ended; times since the run began):\n", v.key)
		var lines []string
		for _, l := range c.keys[v.key].hist {
			if l.granted <= to && (!l.isEnded || l.ended >= from) {
				lines = append(lines, "      "+l.String())
			}
		}
		if len(lines) > 60 {
			lines = append([]string{fmt.Sprintf("      (%d earlier leases left out)", len(lines)-60)}, lines[len(lines)-60:]...)
		}
		b.WriteString(strings.Join(lines, "\n"))
		b.WriteString("\n    faults and Locker closes around it:\n")
		for _, f := range c.faults {
			if f.begin <= to && f.end >= from {
				fmt.Fprintf(&b, "      %s\n", f)
			}
		}
		if c.dep.Events != nil {
			var evs []string
			for _, e := range c.dep.Events() {
				if at := e.At.Sub(c.begin); at >= from && at <= to {
					evs = append(evs, fmt.Sprintf("      %s %s", fmtD(at), e.What))
				}
			}
			if len(evs) > 80 {
				evs = append([]string{fmt.Sprintf("      (%d earlier events left out)", len(evs)-80)}, evs[len(evs)-80:]...)
			}
			b.WriteString("    what the store recorded around it:\n")
			b.WriteString(strings.Join(evs, "\n"))
			b.WriteString("\n")
		}
	}
	c.t.Error(b.String())
}
