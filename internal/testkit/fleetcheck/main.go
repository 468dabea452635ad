// Command fleetcheck is one member of a mixed fleet: it takes a lockmw
// lock over and over for a while, through lockmw's public API only, and
// proves on Redis itself that no one else held the lock at the same time.
// Built once from an old commit and once from a new one (the same source
// builds against both: it uses only the API that main has had since
// 6aaaf71, where Redlock was merged, so keep it so), processes
// of the two builds contend for the same keys and show whether the two
// versions still exclude each other: that the Redis key bytes, scripts and
// fences of the new version are what the old one expects. TestFleet (this
// package's test, `make fleet OLD=<commit>`) builds both and runs them.
//
// Usage:
//
//	fleetcheck -addrs 127.0.0.1:6379 -role old -id old-1 -duration 60s [-mode fair]
//	fleetcheck -addrs a:6379,b:6379,c:6379 ...   (several addresses: Redlock)
//
// While it holds a lease, a worker runs a script on the check server
// (-check, default the first address) that, in one step, increments a
// guard counter, which must then be 1 (nobody else is inside), and
// compares the lease's fence with the highest fence any member recorded
// for the key, which it must exceed (then it becomes the highest). It also
// records the role of the member that held the key last, so that hand-overs
// between roles (old→new, new→old) are counted. At exit, before the
// release, the guard is decremented and must be 0. Every violation is
// printed to standard error and counted, in the process and in the check
// server's hash fleetcheck:{KEY}:stats (fields acquired:ROLE,
// handover:FROM>TO, violations); all of the check's keys expire an hour
// after their last write.
//
// At the end it prints a summary (acquisitions, highest fence, violations,
// lost leases, errors) and one line "SUMMARY {json}" for the driver, and
// exits with status 1 if it saw a violation (2 for bad flags or a Locker
// that could not be built).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/lockmw"
)

// checkTTL is how long the check's keys live after their last write.
const checkTTL = time.Hour

// maxPrinted bounds how many violations and errors are printed one by one.
const maxPrinted = 20

// enterScript runs when a worker has just acquired a lease.
// KEYS: guard, highest fence, last holder's role, stats hash.
// ARGV: the fence as 20 zero-padded decimal digits (so that string order is
// numeric order, beyond Lua's 2^53), the role, the TTL in milliseconds.
// It returns {guard after INCR, highest fence before, last role before}.
var enterScript = redis.NewScript(`
local g = redis.call('INCR', KEYS[1])
local high = redis.call('GET', KEYS[2]) or ''
local bad = 0
if g ~= 1 then bad = bad + 1 end
if ARGV[1] > high then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
else
  bad = bad + 1
end
local prev = redis.call('GET', KEYS[3]) or ''
redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[3])
redis.call('HINCRBY', KEYS[4], 'acquired:' .. ARGV[2], 1)
if prev ~= '' then
  redis.call('HINCRBY', KEYS[4], 'handover:' .. prev .. '>' .. ARGV[2], 1)
end
if bad > 0 then redis.call('HINCRBY', KEYS[4], 'violations', bad) end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[4], ARGV[3])
return {g, high, prev}
`)

// exitScript runs before a worker releases its lease. KEYS: guard, stats
// hash. It returns the guard after DECR, which must be 0.
var exitScript = redis.NewScript(`
local g = redis.call('DECR', KEYS[1])
if g ~= 0 then redis.call('HINCRBY', KEYS[2], 'violations', 1) end
return g
`)

// Summary is what one process reports at its end (the SUMMARY line).
type Summary struct {
	ID       string `json:"id"`
	Role     string `json:"role"`
	Mode     string `json:"mode"`
	Masters  int    `json:"masters"`
	Acquired int64  `json:"acquired"`
	// Tried counts the acquisitions made by TryAcquire (part of Acquired).
	Tried int64 `json:"tried"`
	Busy  int64 `json:"busy"`
	// MaxWait is the longest call of Acquire or TryAcquire, whatever its
	// outcome (the last one may have been cut short by the run's end), and
	// MaxRelease the longest Release, in milliseconds.
	MaxWait    int64  `json:"max_wait_ms"`
	MaxRelease int64  `json:"max_release_ms"`
	MaxFence   uint64 `json:"max_fence"`
	Violations int64  `json:"violations"`
	Lost       int64  `json:"lost"`
	Errors     int64  `json:"errors"`
}

// config is the command line.
type config struct {
	addrs    []string
	check    string
	key      string
	keys     int
	duration time.Duration
	fair     bool
	role     string
	id       string
	prefix   string
	workers  int
	hold     time.Duration
	try      float64
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetcheck:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetcheck:", err)
		os.Exit(2)
	}
	fmt.Printf("fleetcheck %s (%s, %s, %d master(s)): %d acquisitions (%d by TryAcquire), %d busy, longest acquire call %dms, longest Release %dms, highest fence %d, %d violations, %d lost, %d errors\n",
		sum.ID, sum.Role, sum.Mode, sum.Masters, sum.Acquired, sum.Tried, sum.Busy, sum.MaxWait, sum.MaxRelease, sum.MaxFence, sum.Violations, sum.Lost, sum.Errors)
	line, _ := json.Marshal(sum)
	fmt.Printf("SUMMARY %s\n", line)
	if sum.Violations > 0 {
		os.Exit(1)
	}
}

// parseFlags reads the command line.
func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("fleetcheck", flag.ContinueOnError)
	addrs := fs.String("addrs", "127.0.0.1:6379", "Redis address; several, comma-separated, for Redlock over that many masters")
	check := fs.String("check", "", "Redis address of the check's guard, fence and stats keys (default the first of -addrs)")
	key := fs.String("key", "fleet", "lock key (with -keys n > 1: KEY-0 … KEY-n-1, picked at random)")
	keys := fs.Int("keys", 1, "how many keys to contend for")
	duration := fs.Duration("duration", 60*time.Second, "how long to keep acquiring")
	mode := fs.String("mode", "default", "acquisition mode: default or fair (lockmw.Fair)")
	role := fs.String("role", "", "this build's role, counted in hand-overs (e.g. old, new); required")
	id := fs.String("id", "", "this process's name in messages (default ROLE-PID)")
	prefix := fs.String("prefix", "", "lockmw.WithPrefix (default: the library's own prefix)")
	workers := fs.Int("workers", 2, "goroutines acquiring through the one Locker")
	hold := fs.Duration("hold", time.Millisecond, "longest time a lease is held (each hold is random in [0, hold])")
	try := fs.Float64("try", 0.2, "share of attempts made with TryAcquire rather than Acquire")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	cfg := config{
		check: *check, key: *key, keys: *keys, duration: *duration, role: *role, id: *id,
		prefix: *prefix, workers: *workers, hold: *hold, try: *try,
	}
	for a := range strings.SplitSeq(*addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			cfg.addrs = append(cfg.addrs, a)
		}
	}
	switch {
	case len(cfg.addrs) == 0:
		return config{}, errors.New("-addrs: no address")
	case cfg.role == "" || strings.ContainsAny(cfg.role, ">{}"):
		return config{}, fmt.Errorf("-role %q: give a name without '>', '{' or '}'", cfg.role)
	case cfg.keys < 1 || cfg.workers < 1 || cfg.duration <= 0 || cfg.hold < 0 || cfg.try < 0 || cfg.try > 1:
		return config{}, errors.New("-keys and -workers must be at least 1, -duration positive, -hold not negative, -try in [0, 1]")
	}
	switch *mode {
	case "default":
	case "fair":
		cfg.fair = true
	default:
		return config{}, fmt.Errorf("-mode %q: want default or fair", *mode)
	}
	if cfg.check == "" {
		cfg.check = cfg.addrs[0]
	}
	if cfg.id == "" {
		cfg.id = cfg.role + "-" + strconv.Itoa(os.Getpid())
	}
	return cfg, nil
}

// member is one running fleetcheck process.
type member struct {
	cfg    config
	locker *lockmw.Locker
	check  *redis.Client
	opts   []lockmw.AcquireOption

	acquired, tried, busy, violations, lost, errs atomic.Int64
	maxFence, maxWait, maxRelease                 atomic.Uint64
	printed                                       atomic.Int64

	stop     context.CancelFunc // ends every worker
	fatalMu  sync.Mutex
	fatalErr error // set by fail
}

// fail ends the run with err.
func (m *member) fail(err error) {
	m.fatalMu.Lock()
	if m.fatalErr == nil {
		m.fatalErr = err
	}
	m.fatalMu.Unlock()
	m.stop()
}

// run builds the Locker and runs the workers until cfg.duration has passed
// or ctx ends.
func run(ctx context.Context, cfg config) (Summary, error) {
	var opts []lockmw.Option
	if cfg.prefix != "" {
		opts = append(opts, lockmw.WithPrefix(cfg.prefix))
	}
	opts = append(opts, lockmw.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("id", cfg.id)))
	clients := make([]redis.UniversalClient, len(cfg.addrs))
	for i, a := range cfg.addrs {
		// The client settings the README's Quickstart gives, with some room
		// for a machine that runs the whole fleet.
		clients[i] = redis.NewClient(&redis.Options{
			Addr: a, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
			MaxRetries: -1, ContextTimeoutEnabled: true,
		})
	}
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	var (
		locker *lockmw.Locker
		err    error
	)
	if len(clients) == 1 {
		locker, err = lockmw.New(clients[0], opts...)
	} else {
		locker, err = lockmw.NewRedlock(clients, opts...)
	}
	if err != nil {
		return Summary{}, err
	}
	check := redis.NewClient(&redis.Options{Addr: cfg.check})
	defer func() { _ = check.Close() }()

	m := &member{cfg: cfg, locker: locker, check: check}
	mode := "default"
	if cfg.fair {
		mode = "fair"
		m.opts = append(m.opts, lockmw.Fair())
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	m.stop = cancel
	var wg sync.WaitGroup
	for w := range cfg.workers {
		wg.Go(func() { m.work(ctx, rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(w)))) })
	}
	wg.Wait()
	if err := locker.Close(); err != nil {
		m.errorf("Close: %v", err)
	}
	if m.fatalErr != nil {
		return Summary{}, m.fatalErr
	}
	return Summary{
		ID: cfg.id, Role: cfg.role, Mode: mode, Masters: len(cfg.addrs),
		Acquired: m.acquired.Load(), Tried: m.tried.Load(), Busy: m.busy.Load(),
		MaxWait: int64(m.maxWait.Load()), MaxRelease: int64(m.maxRelease.Load()), MaxFence: m.maxFence.Load(), Violations: m.violations.Load(), Lost: m.lost.Load(), Errors: m.errs.Load(),
	}, nil
}

// work acquires, checks and releases until ctx ends.
func (m *member) work(ctx context.Context, rng *rand.Rand) {
	for ctx.Err() == nil {
		key := m.cfg.key
		if m.cfg.keys > 1 {
			key += "-" + strconv.Itoa(rng.IntN(m.cfg.keys))
		}
		try := rng.Float64() < m.cfg.try
		var (
			lease *lockmw.Lease
			err   error
		)
		start := time.Now()
		if try {
			lease, err = m.locker.TryAcquire(ctx, key, m.opts...)
		} else {
			lease, err = m.locker.Acquire(ctx, key, m.opts...)
		}
		raise(&m.maxWait, uint64(time.Since(start).Milliseconds()))
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return
		case errors.Is(err, lockmw.ErrNotAcquired):
			m.busy.Add(1)
			if try {
				// Let the others have a turn rather than spin on Redis.
				time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond)
			}
			continue
		case errors.Is(err, lockmw.ErrInvalidOption):
			// No later attempt can succeed (Fair on a Redlock Locker).
			m.fail(err)
			return
		default:
			m.errorf("acquire %s: %v", key, err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		m.acquired.Add(1)
		if try {
			m.tried.Add(1)
		}
		m.hold(key, lease, rng)
	}
}

// hold checks exclusion and the fence on entry, holds the lease for a
// random time, checks exclusion at exit and releases.
func (m *member) hold(key string, lease *lockmw.Lease, rng *rand.Rand) {
	fence := lease.Fence()
	raise(&m.maxFence, fence)
	base := "fleetcheck:{" + key + "}:"
	guard, stats := base+"guard", base+"stats"
	// The checks talk to Redis with their own deadline: the run's ctx may
	// end while a lease is held, and the guard must still come down.
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := enterScript.Run(cctx, m.check,
		[]string{guard, base + "fence", base + "last", stats},
		fmt.Sprintf("%020d", fence), m.cfg.role, checkTTL.Milliseconds()).Slice()
	if err != nil {
		// Exclusion cannot be shown: stop rather than guess.
		m.violationf("%s: the entry check failed (%v); the guard is left as it is", key, err)
		_ = lease.Release(cctx)
		return
	}
	g, _ := res[0].(int64)
	high, _ := res[1].(string)
	prev, _ := res[2].(string)
	if g != 1 {
		m.violationf("%s: fence %d entered while %d other holder(s) were inside (last holder: %s)", key, fence, g-1, prev)
	}
	if h, _ := strconv.ParseUint(high, 10, 64); high != "" && fence <= h {
		m.violationf("%s: fence %d is not above the highest fence seen, %d (last holder: %s)", key, fence, h, prev)
	}
	if m.cfg.hold > 0 {
		time.Sleep(time.Duration(rng.Int64N(int64(m.cfg.hold) + 1)))
	}
	// Lease.Context, not Lease.Valid: this program builds against every
	// release a fleet may still run, and Valid came later (fbd48ab).
	valid := lease.Context().Err() == nil
	g, err = exitScript.Run(cctx, m.check, []string{guard, stats}).Int64()
	switch {
	case err != nil:
		m.violationf("%s: the exit check failed: %v", key, err)
	case g != 0:
		m.violationf("%s: fence %d left while %d other holder(s) were inside", key, fence, g)
	}
	start := time.Now()
	err = lease.Release(cctx)
	raise(&m.maxRelease, uint64(time.Since(start).Milliseconds()))
	switch {
	case !valid || errors.Is(err, lockmw.ErrLost):
		m.lost.Add(1)
		m.printf("lost", "%s: fence %d: lease lost while held (valid at exit: %v, Release: %v)", key, fence, valid, err)
	case err != nil:
		m.errorf("%s: release of fence %d: %v", key, fence, err)
	}
}

// raise sets a to v if v is higher.
func raise(a *atomic.Uint64, v uint64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// violationf counts and prints a violation.
func (m *member) violationf(format string, args ...any) {
	m.violations.Add(1)
	m.printf("VIOLATION", format, args...)
}

// errorf counts and prints an error that is not a violation.
func (m *member) errorf(format string, args ...any) {
	m.errs.Add(1)
	m.printf("error", format, args...)
}

// printf prints a message to standard error, at most maxPrinted of them.
func (m *member) printf(kind, format string, args ...any) {
	if n := m.printed.Add(1); n <= maxPrinted {
		fmt.Fprintf(os.Stderr, "%s %s: %s\n", m.cfg.id, kind, fmt.Sprintf(format, args...))
	} else if n == maxPrinted+1 {
		fmt.Fprintf(os.Stderr, "%s: more messages left out (see the summary)\n", m.cfg.id)
	}
}
