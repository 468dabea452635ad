// Package chaos is lockmw's seeded randomized safety checker, run by
// TestChaos against every store: Redis and Redlock (lockmw/chaos_test.go),
// etcd (lockmw/etcd/chaos_test.go). A store's test describes how to start a
// deployment of it (a Store: its Lockers' clients, the faults it can
// inject, how to list what it still holds) and calls RunStores, or Run for
// one store.
//
// Run runs many goroutines on a few Lockers taking a few keys with random
// operations (Acquire, TryAcquire, Fair, short TTLs, no watchdog, nesting
// through lease contexts, WithWait give-ups, cancellations, Locker.Close)
// while faults are injected, and checks lockmw's promise:
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
//     logged as a stall rather than failed (see DefaultDrift and
//     stallExcused). A nested lease
//     belongs to the outermost lease on its context chain: it must share its
//     fence, must not be granted live once that lease's context has ended,
//     and must end with it: lockmw ends nested leases before the outermost
//     lease's context, so one still live when the outermost context has
//     ended is a violation, whatever the timers.
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
//	go test -race -run '^TestChaos$' ./lockmw/                         # short: Timing.ShortDuration per store
//	go test -race -run '^TestChaos$/^redis$' ./lockmw/ -args -chaos.seed=42 -chaos.duration=30m
//	cd lockmw/etcd && go test -race -run '^TestChaos$' . -args -chaos.seed=42 -chaos.duration=30m
//	make chaos CHAOS_DURATION=30m
//
// Flags (registered by this package in every test binary that imports it):
// -chaos.seed, -chaos.duration, -chaos.store, -chaos.disable and
// -chaos.drift. Environment equivalents: LOCKMW_CHAOS_SEED,
// LOCKMW_CHAOS_DURATION, LOCKMW_CHAOS_STORE, LOCKMW_CHAOS_DISABLE.
// -chaos.disable (comma-separated) turns off operations (chaosOps), faults
// (by name, see the stores' FaultNames) or checks (chaosChecks), to narrow a
// failure down.
package chaos

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw"
)

var (
	chaosSeedFlag     = flag.Int64("chaos.seed", 0, "TestChaos: seed (0: random, or LOCKMW_CHAOS_SEED)")
	chaosDurationFlag = flag.Duration("chaos.duration", 0, "TestChaos: how long each store runs (0: short, or LOCKMW_CHAOS_DURATION)")
	chaosStoreFlag    = flag.String("chaos.store", "", "TestChaos: run only this store (or LOCKMW_CHAOS_STORE)")
	chaosDisableFlag  = flag.String("chaos.disable", "", "TestChaos: comma-separated operations or faults to leave out (or LOCKMW_CHAOS_DISABLE)")
	chaosDriftFlag    = flag.Float64("chaos.drift", DefaultDrift, "TestChaos: the Lockers' WithDriftFactor")
)

// DefaultDrift is every Locker's WithDriftFactor unless -chaos.drift says
// otherwise. A lease ends at its deadline only as promptly as this
// process's timers fire, and a 2-core machine running this test under
// -race (and others' tests) fires them tens of milliseconds late now and
// then: lockmw's exclusion holds only while that lateness stays under the
// drift margin (TTL × factor + 2ms), as its documentation says of process
// pauses. The default 1% leaves 3.5ms on a 150ms TTL; 20% leaves 32ms, and
// still exposes every bug that stretches a lease by a good part of its TTL.
// The log reports the worst lateness seen (see chaosRun.watchLateness), and
// every overlap the lateness seen shortly before it.
const DefaultDrift = 0.2

const (
	chaosSlots          = 6 // Lockers running at once
	chaosWorkersPerSlot = 3
	chaosKeys           = 4
	chaosFaultLoops     = 2 // fault schedules running at once
	// chaosNestGrace is how long after its outermost lease's holding ended
	// (Release called, or lost, or closed) a nested lease's end may be seen
	// without being counted as seen late. It is a statistic only: whether a
	// nested lease outlived its outer is judged exactly, by their contexts
	// (lockmw ends nested leases before the outermost context, see ended),
	// not by when the checker's goroutines got to run, which on a loaded
	// host can be hundreds of milliseconds apart (a 30-minute Redlock run
	// saw 168 and 460 ms with timers 3.2 s late); whether a late end lets
	// another holder in is judged by the overlap check (1).
	chaosNestGrace = 50 * time.Millisecond
	// chaosMaxViolations stops a run early.
	chaosMaxViolations = 50
)

// Timing is a store's time scale: the lease TTLs the checker draws and how
// long a run lasts by default. A zero field takes the default given with
// it, which suits Redis.
type Timing struct {
	// MinTTL is the shortest lease TTL drawn (default 150ms).
	MinTTL time.Duration
	// ShortMinTTL is the shortest lease TTL drawn when "shortttl" is
	// disabled (default 600ms).
	ShortMinTTL time.Duration
	// MaxTTL is the longest lease TTL drawn (default 2s). Holds are drawn
	// relative to a lease's TTL (up to three times it), so they scale with
	// these.
	MaxTTL time.Duration
	// LockerTTL is every Locker's WithTTL (default 1s).
	LockerTTL time.Duration
	// TTLStep, when set, rounds every drawn TTL to a multiple of it (etcd
	// takes whole seconds).
	TTLStep time.Duration
	// ExpirySlack is how much longer than MaxTTL the store may keep a lock
	// key alive after the run (etcd extends leases by an election
	// timeout when its leader changes, and reports their remaining TTL
	// rounded up to a second). Default 0.
	ExpirySlack time.Duration
	// ShortDuration is how long a run lasts when no duration is given
	// (default 10s); with -test.short, a third of it, in whole seconds.
	ShortDuration time.Duration
}

func (tm Timing) withDefaults() Timing {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&tm.MinTTL, 150*time.Millisecond)
	def(&tm.ShortMinTTL, 600*time.Millisecond)
	def(&tm.MaxTTL, 2*time.Second)
	def(&tm.LockerTTL, time.Second)
	def(&tm.ShortDuration, 10*time.Second)
	return tm
}

// duration returns how long a run with cfg lasts.
func (tm Timing) duration(cfg Config) time.Duration {
	if cfg.Duration > 0 {
		return cfg.Duration
	}
	if testing.Short() {
		return max(time.Second, (tm.ShortDuration / 3).Truncate(time.Second))
	}
	return tm.ShortDuration
}

// chaosOps are the operations -chaos.disable can turn off.
var chaosOps = []string{
	"fair",          // lockmw.Fair() (on stores that support it)
	"try",           // TryAcquire
	"nest",          // acquisitions inside a lease's context (nested and other keys)
	"withoutcancel", // nesting through context.WithoutCancel(lease.Context())
	"shortttl",      // TTLs under Timing.ShortMinTTL
	"nowatchdog",    // WithoutWatchdog()
	"cancel",        // acquisition contexts cancelled or timed out
	"wait",          // WithWait
	"close",         // Locker.Close mid-flight, then a fresh Locker
}

// chaosChecks are the checks -chaos.disable can turn off.
var chaosChecks = []string{
	"queueresidue", // no fair queue left after the run (entries of waiters whose leave could not reach the store stay until a hand-over skips them)
}

// Config is what the flags (or their environment equivalents) ask of a
// run.
type Config struct {
	// Seed seeds every generator of the run.
	Seed int64
	// Duration is how long each store runs (0: its Timing.ShortDuration).
	Duration time.Duration
	// Drift is every Locker's WithDriftFactor.
	Drift float64
	// Store, when set, names the only store to run.
	Store string
	// Disabled are the operations, faults and checks left out.
	Disabled map[string]bool
}

// On reports whether the operation, fault or check name is enabled.
func (c *Config) On(name string) bool { return !c.Disabled[name] }

// ConfigFromFlags reads the -chaos.* flags, then the LOCKMW_CHAOS_*
// variables for those not given, and draws a seed if neither gives one. A
// name in -chaos.disable must be an operation, a check or a fault of one
// of stores. It fails the test on a bad value.
func ConfigFromFlags(t testing.TB, stores ...Store) Config {
	t.Helper()
	cfg := Config{Seed: *chaosSeedFlag, Duration: *chaosDurationFlag, Drift: *chaosDriftFlag, Store: *chaosStoreFlag, Disabled: map[string]bool{}}
	if cfg.Seed == 0 {
		if s := os.Getenv("LOCKMW_CHAOS_SEED"); s != "" {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				t.Fatalf("LOCKMW_CHAOS_SEED=%q: %v", s, err)
			}
			cfg.Seed = v
		}
	}
	for cfg.Seed == 0 {
		var b [8]byte
		_, _ = crand.Read(b[:])
		cfg.Seed = int64(binary.LittleEndian.Uint64(b[:]) >> 1)
	}
	if cfg.Duration == 0 {
		if s := os.Getenv("LOCKMW_CHAOS_DURATION"); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil {
				t.Fatalf("LOCKMW_CHAOS_DURATION=%q: %v", s, err)
			}
			cfg.Duration = d
		}
	}
	if cfg.Store == "" {
		cfg.Store = os.Getenv("LOCKMW_CHAOS_STORE")
	}
	known := map[string]bool{}
	for _, o := range slices.Concat(chaosOps, chaosChecks) {
		known[o] = true
	}
	var faults []string
	for _, s := range stores {
		for _, f := range s.FaultNames {
			if !known[f] {
				faults = append(faults, f)
			}
			known[f] = true
		}
	}
	for _, f := range repoFaults {
		known[f] = true
	}
	for _, list := range []string{*chaosDisableFlag, os.Getenv("LOCKMW_CHAOS_DISABLE")} {
		for _, name := range strings.Split(list, ",") {
			if name = strings.TrimSpace(name); name == "" {
				continue
			}
			if !known[name] {
				t.Fatalf("-chaos.disable: unknown operation, fault or check %q (operations: %s; faults: %s; checks: %s)",
					name, strings.Join(chaosOps, ","), strings.Join(faults, ","), strings.Join(chaosChecks, ","))
			}
			cfg.Disabled[name] = true
		}
	}
	return cfg
}

// RunStores reads the configuration (ConfigFromFlags) and runs the checker
// against each of stores, or the one -chaos.store names, as a subtest named
// after it. It fails the test if -chaos.store names none of them.
func RunStores(t *testing.T, stores ...Store) {
	t.Helper()
	cfg := ConfigFromFlags(t, stores...)
	per := "the store's default duration"
	if cfg.Duration > 0 {
		per = cfg.Duration.String()
	}
	t.Logf("chaos: seed %d, %s per store (-chaos.seed=%d to replay the schedule)", cfg.Seed, per, cfg.Seed)
	if len(cfg.Disabled) > 0 {
		t.Logf("chaos: disabled: %s", strings.Join(slices.Sorted(maps.Keys(cfg.Disabled)), ","))
	}
	ran := false
	for _, store := range stores {
		if cfg.Store != "" && cfg.Store != store.Name {
			continue
		}
		ran = true
		t.Run(store.Name, func(t *testing.T) { Run(t, cfg, store) })
	}
	if !ran {
		if where, ok := storeHomes[cfg.Store]; ok {
			t.Skipf("-chaos.store=%q: that store's TestChaos is in %s", cfg.Store, where)
		}
		t.Fatalf("-chaos.store=%q: no such store", cfg.Store)
	}
}

// repoFaults are the fault names of every store of the repository, also
// accepted by -chaos.disable where no store of the test has them (make
// chaos passes the same flags to every package).
var repoFaults = []string{"latency", "cut", "reset", "pause", "scriptflush", "killpubsub", "restart", "leader", "counterdel", "killconn", "backend"}

// storeHomes says, for every store of the repository, which package's
// TestChaos runs it: -chaos.store naming a store of another package skips
// TestChaos (make chaos passes the same flags to every package), a name
// of none fails it.
var storeHomes = map[string]string{
	"redis":     "./lockmw/",
	"redlock":   "./lockmw/",
	"etcd":      "lockmw/etcd (its own module)",
	"zookeeper": "lockmw/zookeeper (its own module)",
	"mariadb":   "lockmw/mysql (its own module)",
	"postgres":  "lockmw/postgres (its own module)",
}

// Store is one kind of storage the checker runs against.
type Store struct {
	// Name names the store: the subtest's name and -chaos.store's value.
	Name string
	// Fair reports whether the store supports lockmw.Fair().
	Fair bool
	// Start starts a deployment for slots Locker slots, owned by t.
	Start func(t *testing.T, slots int) *Deployment
	// FaultNames are the names of the faults its deployments inject, for
	// -chaos.disable.
	FaultNames []string
	// Timing is the store's time scale.
	Timing Timing
	// Dir and Package say how to run the store's TestChaos again, for the
	// failure report: Package ("./lockmw/", ".") in the module at Dir,
	// relative to the repository's root ("" for the root module).
	Dir, Package string
}

// Deployment is a running store, owned by one test.
type Deployment struct {
	// NewLocker returns a new Locker for slot (on that slot's own
	// client(s), which outlive it): called at the start and whenever the
	// checker closes a slot's Locker.
	NewLocker func(slot int, opts ...lockmw.Option) (*lockmw.Locker, error)
	// Describe names slot's link, e.g. "direct" or "proxied".
	Describe func(slot int) string
	// Faults are what the checker's fault schedule draws from; each one's
	// name must be in the Store's FaultNames.
	Faults []Fault
	// Residue lists what the store still holds for lockmw after the run:
	// lock keys (with their remaining TTL), fair queues and subscribed
	// channels or watches. Fence counters are residue only without an
	// expiry (they go after the Lockers' retention).
	Residue func(ctx context.Context) ([]Residue, error)
	// Events, when set, returns what the deployment recorded of the
	// store's own doings (deletions, leader changes...), oldest first: the
	// report shows those around each violation.
	Events func() []Event
}

// Event is one thing a deployment saw the store do.
type Event struct {
	At   time.Time
	What string
}

// Residue is one thing a store still holds.
type Residue struct {
	// What describes it.
	What string
	// Lock is set for a lock key (or what keeps one alive, such as an
	// etcd lease), with TTL its remaining time to live (negative: no
	// expiry). The checker waits up to Timing.MaxTTL (plus ExpirySlack) for
	// it to go.
	Lock bool
	TTL  time.Duration
	// Queue is set for a fair queue (check "queueresidue").
	Queue bool
}

func (r Residue) String() string {
	if r.Lock {
		return fmt.Sprintf("%s (TTL %v)", r.What, r.TTL)
	}
	return r.What
}

// Fault is one kind of fault. Run injects it with parameters drawn from
// env.Rand, waits (env.Sleep), heals it and returns; the checker records
// when each began and ended. Faults of two schedules may overlap (one
// healing a proxy heals the other's toxics on it too, which only shortens
// them), except exclusive ones.
type Fault struct {
	// Name names the fault, for -chaos.disable and the history.
	Name string
	// Weight is how often the fault is drawn relative to others (0: 4).
	Weight int
	// Exclusive faults run alone; others may overlap (the checker runs
	// chaosFaultLoops schedules at once).
	Exclusive bool
	// Run injects the fault, waits and heals it.
	Run func(env *FaultEnv)
}

// FaultEnv is what a fault gets from the checker.
type FaultEnv struct {
	// T fails softly: its Fatal and Fatalf are Error and Errorf (a fault
	// runs on a goroutine of its own, where FailNow must not be called).
	T testing.TB
	// Rand draws the fault's parameters.
	Rand Rand
	// MaxTTL is the longest lease TTL of the run.
	MaxTTL time.Duration
	// Sleep waits d, or less when the run is ending; it reports whether
	// the run goes on.
	Sleep func(d time.Duration) bool
	// Note adds detail to the fault's history entry.
	Note func(format string, args ...any)
	// DataLoss brackets a restart that loses stored data: the fence
	// counters start over, so fences are compared only between leases
	// acquired entirely before or entirely after it.
	DataLoss func(begin bool)
	// AllEnded reports, as a violation, every lease whose context is still
	// live: called when the store has been unreachable long enough for
	// every lease's validity to be over.
	AllEnded func(why string)
}

// softTB turns the Fatalf of test helpers called from a fault goroutine
// into Errorf (FailNow must only be called from the test goroutine).
type softTB struct{ testing.TB }

func (s softTB) Fatalf(format string, args ...any) { s.Errorf(format, args...) }
func (s softTB) Fatal(args ...any)                 { s.Error(args...) }
