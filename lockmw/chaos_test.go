package lockmw_test

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/lockmw"
)

// TestChaos is a seeded randomized safety checker. For each store (see
// chaos_store_test.go) it runs many goroutines on a few Lockers taking a
// few keys with random operations (Acquire, TryAcquire, Fair, short TTLs,
// no watchdog, nesting through lease contexts, WithWait give-ups,
// cancellations, Locker.Close) while faults are injected, and checks
// lockmw's promise:
//
//  1. Exclusion: no two holders of a key have live lease contexts at
//     once. When Acquire returns a lease (outermost, or nested in a
//     holding) whose context is live, no lease (outermost or nested) of
//     another holder of the key may have a live context. This is checked
//     at that moment against a registry of live leases kept under a mutex:
//     both contexts are seen live at the same instant, so no
//     tolerance is needed (times are only recorded for the report, on this
//     process's monotonic clock, which every Locker shares). lockmw's
//     exclusion assumes its timers fire within the drift margin, so an
//     overlap no longer than the timer lateness measured around it is
//     logged as a stall rather than failed (see chaosDrift and
//     stallExcused). A nested lease
//     belongs to the outermost lease on its context chain: it must share its
//     fence, must not be granted live once that lease's context has ended,
//     and must end with it (see chaosNestGrace).
//  2. Fences: a lease's fence is greater than that of every lease of the
//     key whose context had ended before its Acquire was called, and no
//     fence is handed out twice. Across a restart that loses stored data
//     fences legitimately start over, so they are compared only between
//     leases acquired entirely on one side of it.
//  3. After the run, with every Locker closed: every lease context has
//     ended, no lock key outlives the longest TTL (and none lacks an
//     expiry), no fair queue is left and no channel stays subscribed.
//  4. No goroutine running lockmw code outlives the run.
//
// Reproducing: the seed is logged at the start and printed with every
// failure. Each worker, the fault schedule and the Locker churn draw from
// their own generator seeded from it, and an operation's parameters are all
// drawn before it runs, so one seed gives the same sequence of planned
// operations per worker and the same sequence of faults. Timing, and so
// outcomes and interleavings, differ from run to run.
//
//	go test -race -run '^TestChaos$' ./lockmw/                         # short: chaosShortDuration per store
//	go test -race -run '^TestChaos$/^redis$' ./lockmw/ -args -chaos.seed=42 -chaos.duration=30m
//	make chaos CHAOS_DURATION=30m
//
// Environment equivalents: LOCKMW_CHAOS_SEED, LOCKMW_CHAOS_DURATION,
// LOCKMW_CHAOS_STORE, LOCKMW_CHAOS_DISABLE. -chaos.disable (comma-separated)
// turns off operations (chaosOps), faults (by name, see the stores) or
// checks (chaosChecks), to narrow a failure down.
func TestChaos(t *testing.T) {
	cfg := chaosConfigFromFlags(t)
	// Links are cut and servers killed all the time: go-redis would log
	// every failed dial.
	redis.SetLogger(chaosRedisLogger{})
	defer redis.SetLogger(chaosRedisLogger{all: true})
	t.Logf("chaos: seed %d, %v per store (-chaos.seed=%d to replay the schedule)", cfg.seed, cfg.duration, cfg.seed)
	if len(cfg.disabled) > 0 {
		t.Logf("chaos: disabled: %s", strings.Join(slices.Sorted(maps.Keys(cfg.disabled)), ","))
	}
	ran := false
	for _, store := range chaosStores {
		if cfg.store != "" && cfg.store != store.name {
			continue
		}
		ran = true
		t.Run(store.name, func(t *testing.T) { runChaos(t, cfg, store) })
	}
	if !ran {
		t.Fatalf("-chaos.store=%q: no such store", cfg.store)
	}
}

var (
	chaosSeedFlag     = flag.Int64("chaos.seed", 0, "TestChaos: seed (0: random, or LOCKMW_CHAOS_SEED)")
	chaosDurationFlag = flag.Duration("chaos.duration", 0, "TestChaos: how long each store runs (0: short, or LOCKMW_CHAOS_DURATION)")
	chaosStoreFlag    = flag.String("chaos.store", "", "TestChaos: run only this store (or LOCKMW_CHAOS_STORE)")
	chaosDisableFlag  = flag.String("chaos.disable", "", "TestChaos: comma-separated operations or faults to leave out (or LOCKMW_CHAOS_DISABLE)")
	chaosDriftFlag    = flag.Float64("chaos.drift", chaosDrift, "TestChaos: the Lockers' WithDriftFactor")
)

const (
	chaosSlots          = 6 // Lockers running at once
	chaosWorkersPerSlot = 3
	chaosKeys           = 4
	chaosMinTTL         = 150 * time.Millisecond
	chaosShortMinTTL    = 600 * time.Millisecond // the shortest TTL when "shortttl" is disabled
	chaosMaxTTL         = 2 * time.Second
	chaosLockerTTL      = time.Second // WithTTL of every Locker
	// chaosDrift is every Locker's WithDriftFactor unless -chaos.drift
	// says otherwise. A lease ends at its deadline only as promptly as this
	// process's timers fire, and a 2-core machine running this test under
	// -race (and others' tests) fires them tens of milliseconds late now
	// and then: lockmw's exclusion holds only while that lateness stays
	// under the drift margin (TTL × factor + 2ms), as its documentation
	// says of process pauses. The default 1% leaves 3.5ms on a 150ms TTL;
	// 20% leaves 32ms, and still exposes every bug that stretches a lease
	// by a good part of its TTL. The log reports the worst lateness seen
	// (see chaosRun.watchLateness), and every overlap the lateness seen
	// shortly before it.
	chaosDrift         = 0.2
	chaosShortDuration = 10 * time.Second
	chaosFaultLoops    = 2 // fault schedules running at once
	// chaosNestGrace is how long a nested lease's context may stay live
	// after its outermost lease's holding ended (Release called, or lost,
	// or closed). A nested lease made through
	// a context derived from the outer's ends in the same cancellation (the
	// checker waits for that to finish, see ended), so only one made through
	// context.WithoutCancel(lease.Context()) can lag at all: the core has to
	// end it itself, after the outer's end, which may take a goroutine
	// switch (context.AfterFunc). Whether such a lag lets another holder in
	// is judged exactly, with no tolerance, by the overlap check (1); this
	// one catches nested leases that live on past their lock.
	chaosNestGrace = 50 * time.Millisecond
	// chaosMaxViolations stops a run early.
	chaosMaxViolations = 50
)

// chaosOps are the operations -chaos.disable can turn off.
var chaosOps = []string{
	"fair",          // lockmw.Fair() (on stores that support it)
	"try",           // TryAcquire
	"nest",          // acquisitions inside a lease's context (nested and other keys)
	"withoutcancel", // nesting through context.WithoutCancel(lease.Context())
	"shortttl",      // TTLs under chaosShortMinTTL
	"nowatchdog",    // WithoutWatchdog()
	"cancel",        // acquisition contexts cancelled or timed out
	"wait",          // WithWait
	"close",         // Locker.Close mid-flight, then a fresh Locker
}

// chaosChecks are the checks -chaos.disable can turn off.
var chaosChecks = []string{
	"queueresidue", // no fair queue left after the run (entries of waiters whose leave could not reach the store stay until a hand-over skips them)
}

type chaosConfig struct {
	seed     int64
	duration time.Duration
	drift    float64
	store    string
	disabled map[string]bool
}

func (c *chaosConfig) on(name string) bool { return !c.disabled[name] }

func chaosConfigFromFlags(t *testing.T) chaosConfig {
	cfg := chaosConfig{seed: *chaosSeedFlag, duration: *chaosDurationFlag, drift: *chaosDriftFlag, store: *chaosStoreFlag, disabled: map[string]bool{}}
	if cfg.seed == 0 {
		if s := os.Getenv("LOCKMW_CHAOS_SEED"); s != "" {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				t.Fatalf("LOCKMW_CHAOS_SEED=%q: %v", s, err)
			}
			cfg.seed = v
		}
	}
	for cfg.seed == 0 {
		var b [8]byte
		_, _ = crand.Read(b[:])
		cfg.seed = int64(binary.LittleEndian.Uint64(b[:]) >> 1)
	}
	if cfg.duration == 0 {
		if s := os.Getenv("LOCKMW_CHAOS_DURATION"); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil {
				t.Fatalf("LOCKMW_CHAOS_DURATION=%q: %v", s, err)
			}
			cfg.duration = d
		}
	}
	if cfg.duration == 0 {
		cfg.duration = chaosShortDuration
		if testing.Short() {
			cfg.duration = 3 * time.Second
		}
	}
	if cfg.store == "" {
		cfg.store = os.Getenv("LOCKMW_CHAOS_STORE")
	}
	known := map[string]bool{}
	for _, o := range slices.Concat(chaosOps, chaosChecks) {
		known[o] = true
	}
	// Fault names, as the stores in chaos_store_test.go call them.
	for _, f := range []string{"latency", "cut", "reset", "pause", "scriptflush", "killpubsub", "restart"} {
		known[f] = true
	}
	for _, list := range []string{*chaosDisableFlag, os.Getenv("LOCKMW_CHAOS_DISABLE")} {
		for _, name := range strings.Split(list, ",") {
			if name = strings.TrimSpace(name); name == "" {
				continue
			}
			if !known[name] {
				t.Fatalf("-chaos.disable: unknown operation, fault or check %q (operations: %s; checks: %s)", name, strings.Join(chaosOps, ","), strings.Join(chaosChecks, ","))
			}
			cfg.disabled[name] = true
		}
	}
	return cfg
}

// chaosRand is a generator with the helpers plans need.
type chaosRand struct{ *rand.Rand }

func newChaosRand(seed int64, stream uint64) chaosRand {
	return chaosRand{rand.New(rand.NewPCG(uint64(seed), stream))}
}

// Duration returns a uniform duration in [min, max].
func (r chaosRand) Duration(min, max time.Duration) time.Duration {
	return min + time.Duration(r.Int64N(int64(max-min)+1))
}

// LogDuration returns a duration in [min, max] uniform on a log scale.
func (r chaosRand) LogDuration(min, max time.Duration) time.Duration {
	lo, hi := math.Log(float64(min)), math.Log(float64(max))
	return time.Duration(math.Exp(lo + r.Float64()*(hi-lo)))
}

func (r chaosRand) Chance(p float64) bool { return r.Float64() < p }

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

func (a chaosAcq) String() string {
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
		fmt.Fprintf(&b, " ttl=%v(default)", chaosLockerTTL)
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
func (c *chaosRun) genOp(r chaosRand, depth, homeKey, parentKey int) *chaosOp {
	op := &chaosOp{key: r.IntN(chaosKeys)}
	if r.Chance(0.5) {
		op.key = homeKey
	}
	if parentKey >= 0 && r.Chance(0.6) {
		op.key = parentKey
	}
	a := &op.acq
	a.try = r.Chance(0.3) && c.cfg.on("try")
	a.fair = r.Chance(0.35) && c.cfg.on("fair") && c.store.fair
	if r.Chance(0.75) {
		minTTL := chaosMinTTL
		if !c.cfg.on("shortttl") {
			minTTL = chaosShortMinTTL
		}
		a.ttl = r.LogDuration(minTTL, chaosMaxTTL)
	}
	a.noWatchdog = r.Chance(0.3) && c.cfg.on("nowatchdog")
	if r.Chance(0.6) && c.cfg.on("wait") || depth > 0 {
		// Inside a lease, waits are bounded: two holders waiting for each
		// other's key must give up.
		a.hasWait, a.wait = true, r.Duration(0, 1500*time.Millisecond)
		if depth > 0 {
			a.wait = r.Duration(0, 400*time.Millisecond)
		}
	}
	if c.cfg.on("cancel") {
		if r.Chance(0.15) {
			a.cancelAfter = r.Duration(time.Millisecond, 2*time.Second)
		}
		if r.Chance(0.1) {
			a.timeout = r.Duration(time.Millisecond, 3*time.Second)
		}
	}
	ttl := a.ttl
	if ttl == 0 {
		ttl = chaosLockerTTL
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
	if depth < 2 && c.cfg.on("nest") {
		for n := r.IntN(3); n > 0; n-- {
			if !r.Chance(0.5) {
				continue
			}
			ch := &chaosChild{at: r.Duration(0, op.hold), ctxKind: r.IntN(4)}
			if ch.ctxKind == chaosCtxWithoutCancel && !c.cfg.on("withoutcancel") {
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
	late = c.latenessLocked(v.at-2*chaosMaxTTL, max(v.stale.ended, root.ended))
	margin := time.Duration(float64(root.ttl)*c.cfg.drift) + 2*time.Millisecond
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
	cfg   chaosConfig
	store chaosStore
	dep   *chaosDeployment
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
	if rec.outerGone {
		if lag := now - rec.outerEnded; lag > chaosNestGrace+2*c.latenessLocked(rec.outerEnded-time.Second, now) {
			c.violateLocked(rec.key, "nested outlives outer", "nested #%d ended %v after its outermost lease #%d:\n\t\t%s\n\t\t%s", rec.id, lag, rec.root().id, rec, rec.root())
		} else {
			c.stats["nested lease ended just after its outer (within grace)"]++
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

// dataLoss brackets a restart that loses stored data (see chaosFaultEnv).
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

func (c *chaosRun) lockerOpts() []lockmw.Option {
	return []lockmw.Option{
		lockmw.WithTTL(chaosLockerTTL),
		lockmw.WithDriftFactor(c.cfg.drift),
		lockmw.WithLogger(slog.New(slog.DiscardHandler)),
	}
}

// newLocker returns a new Locker for slot, or nil (after failing the test)
// if the store could not make one.
func (c *chaosRun) newLocker(slot int) *lockmw.Locker {
	l, err := c.dep.newLocker(slot, c.lockerOpts()...)
	if err != nil {
		c.t.Errorf("new Locker for slot %d: %v", slot, err)
		return nil
	}
	c.mu.Lock()
	c.lockers = append(c.lockers, l)
	c.mu.Unlock()
	return l
}

func runChaos(t *testing.T, cfg chaosConfig, store chaosStore) {
	before := lockmwGoroutines()
	dep := store.start(t, chaosSlots)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	c := &chaosRun{
		t: t, cfg: cfg, store: store, dep: dep, ctx: ctx, stop: stop,
		keys:  map[string]*chaosKeyState{},
		stats: map[string]int{},
	}
	var faultNames []string
	for _, f := range dep.faults {
		if cfg.on(f.name) {
			faultNames = append(faultNames, f.name)
		}
	}
	t.Logf("chaos %s: %d Lockers (%d proxied), %d workers, %d keys, TTLs %v–%v, faults %s",
		store.name, chaosSlots, (chaosSlots+1)/2, chaosSlots*chaosWorkersPerSlot, chaosKeys, chaosMinTTL, chaosMaxTTL, strings.Join(faultNames, ","))
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
	if cfg.on("close") {
		wg.Go(c.churn)
	}
	select {
	case <-time.After(cfg.duration):
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
	r := newChaosRand(c.cfg.seed, uint64(w)+1)
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
	mode := op.acq.String()
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
		ttl = chaosLockerTTL
	}
	if outer != nil {
		ttl = outer.root().ttl
	}
	rec := &chaosLease{key: key, locker: lname, mode: mode, fence: lease.Fence(), ttl: ttl, lease: lease, outer: outer, called: called}
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
	var faults []chaosFault // each as many times as its weight
	for _, f := range c.dep.faults {
		if c.cfg.on(f.name) {
			n := f.weight
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
	r := newChaosRand(c.cfg.seed, 1000+uint64(i))
	for c.sleep(r.Duration(20*time.Millisecond, 500*time.Millisecond)) {
		f := faults[r.IntN(len(faults))]
		if f.exclusive {
			exclusive.Lock()
		} else {
			exclusive.RLock()
		}
		rec := &chaosFaultRec{name: f.name, begin: c.now()}
		env := &chaosFaultEnv{
			t:      softTB{c.t},
			rng:    r,
			maxTTL: chaosMaxTTL,
			sleep:  c.sleep,
			note: func(format string, args ...any) {
				c.mu.Lock()
				rec.notes = append(rec.notes, fmt.Sprintf(format, args...))
				c.mu.Unlock()
			},
			dataLoss: c.dataLoss,
			allEnded: c.allEnded,
		}
		f.run(env)
		if f.exclusive {
			exclusive.Unlock()
		} else {
			exclusive.RUnlock()
		}
		c.mu.Lock()
		rec.end = c.now()
		c.faults = append(c.faults, rec)
		c.stats["fault "+f.name]++
		c.mu.Unlock()
	}
}

// churn closes a random slot's Locker now and then, mid-flight, and puts a
// fresh one in its place.
func (c *chaosRun) churn() {
	r := newChaosRand(c.cfg.seed, 2000)
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
	deadline = time.Now().Add(chaosMaxTTL + 2*time.Second)
	var residue []chaosResidue
	for {
		var err error
		residue, err = c.dep.residue(context.Background())
		if err != nil {
			c.t.Errorf("listing what the store holds: %v", err)
			break
		}
		if !c.cfg.on("queueresidue") {
			residue = slices.DeleteFunc(residue, func(r chaosResidue) bool { return r.queue })
		}
		for _, r := range residue {
			if r.lock && (r.pttl < 0 || r.pttl > chaosMaxTTL) {
				c.violate("", "residue", "%v after the run: a lock key with no expiry or one beyond the longest TTL %v", r, chaosMaxTTL)
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
	deadline = time.Now().Add(chaosMaxTTL + 3*time.Second)
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

// lockmwGoroutines returns the stacks of the goroutines running lockmw's
// core code, by goroutine id.
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
		if !strings.Contains(g, "github.com/lockmw/lockmw/lockmw.") {
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
			c.store.name, len(excused), strings.Join(excused, "\n"))
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
	stats = append(stats, fmt.Sprintf("timers fired up to %v late (drift factor %v)", c.latenessLocked(0, c.now()).Round(time.Millisecond), c.cfg.drift))
	c.t.Logf("chaos %s: seed %d, %s:\n\t%s", c.store.name, c.cfg.seed, fmtD(c.now()), strings.Join(stats, "\n\t"))
	if len(c.violations) == 0 {
		return
	}
	var b strings.Builder
	kinds := map[string]int{}
	for _, v := range c.violations {
		kinds[v.kind]++
	}
	fmt.Fprintf(&b, "chaos %s: %d violation(s) (", c.store.name, len(c.violations)+c.dropped)
	for i, k := range slices.Sorted(maps.Keys(kinds)) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %d", k, kinds[k])
	}
	fmt.Fprintf(&b, ") with seed %d.\nReplay the same schedule of operations and faults (timing differs from run to run, so a failure may need a few tries or a longer run):\n\tgo test -race -count=1 -run '^TestChaos$/^%s$' ./lockmw/ -args -chaos.seed=%d -chaos.duration=%v",
		c.cfg.seed, c.store.name, c.cfg.seed, c.cfg.duration)
	if len(c.cfg.disabled) > 0 {
		fmt.Fprintf(&b, " -chaos.disable=%s", strings.Join(slices.Sorted(maps.Keys(c.cfg.disabled)), ","))
	}
	if c.cfg.drift != chaosDrift {
		fmt.Fprintf(&b, " -chaos.drift=%v", c.cfg.drift)
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
	}
	c.t.Error(b.String())
}

// chaosRedisLogger is go-redis' logger during TestChaos: it leaves out the
// failed dials the faults cause (all: it does not), and writes the rest to
// stderr as go-redis does by default.
type chaosRedisLogger struct{ all bool }

var chaosRedisLog = log.New(os.Stderr, "redis: ", log.LstdFlags)

func (l chaosRedisLogger) Printf(_ context.Context, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !l.all && strings.Contains(msg, "failed to dial") {
		return
	}
	chaosRedisLog.Print(msg)
}
