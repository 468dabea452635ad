package lockmw

import (
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Limits and defaults.
const (
	// DefaultTTL is the lease TTL when neither WithTTL nor WithLeaseTTL is given.
	DefaultTTL = 10 * time.Second
	// MinTTL is the shortest lease TTL accepted: the validity left after
	// drift must stay positive.
	MinTTL = 10 * time.Millisecond
	// DefaultPrefix is prepended to the name of everything lockmw writes in
	// its store (keys, nodes, table rows).
	DefaultPrefix = "lockmw:"
	// DefaultDriftFactor is the share of the TTL assumed lost to clock drift
	// between this process and the store; 2ms more are always subtracted.
	DefaultDriftFactor = 0.01
	// MaxKeyLen is the longest lock key accepted, in bytes. A key may hold
	// any bytes; every store locks every key of 1 to MaxKeyLen bytes.
	MaxKeyLen = 512
	// MaxPrefixLen is the longest key prefix accepted, in bytes.
	MaxPrefixLen = 128
)

// driftFloor is always subtracted from a lease's validity, on top of the
// drift factor: timer slack and the store's expiry granularity.
const driftFloor = 2 * time.Millisecond

// config is the Locker configuration built from Options.
type config struct {
	ttl         time.Duration
	prefix      string
	driftFactor float64
	tp          trace.TracerProvider
	mp          metric.MeterProvider
	logger      *slog.Logger
	// waitReplicas and waitTimeout are WithWaitReplicas' arguments.
	waitReplicas int
	waitTimeout  time.Duration
	// retention (0: DefaultRetention) and permanentFences: see
	// WithRetention, WithPermanentFences (retention.go).
	retention       time.Duration
	permanentFences bool
	// holderInfo is WithHolderInfo's description (inspect.go).
	holderInfo string
	errs       []error
}

// Option configures a Locker in New.
type Option interface{ applyLocker(*config) }

type optionFunc func(*config)

func (f optionFunc) applyLocker(c *config) { f(c) }

// WithTTL sets the default lease TTL (default 10s, at least MinTTL). The
// watchdog renews a lease at a third of its TTL; a lease without watchdog
// expires after it.
func WithTTL(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if err := checkTTL("WithTTL", d); err != nil {
			c.errs = append(c.errs, err)
			return
		}
		c.ttl = d
	})
}

// WithPrefix sets the prefix of the name of everything lockmw writes in
// its store (default "lockmw:"). Lockers that must exclude each other need
// the same prefix. A store may refuse a prefix it cannot name its objects
// with (New on a Cluster: see New).
func WithPrefix(p string) Option {
	return optionFunc(func(c *config) {
		if len(p) > MaxPrefixLen {
			c.errs = append(c.errs, fmt.Errorf("%w: WithPrefix: prefix is %d bytes, the limit is %d", ErrInvalidOption, len(p), MaxPrefixLen))
			return
		}
		c.prefix = p
	})
}

// WithDriftFactor sets the share of the TTL assumed lost to clock drift
// (default 0.01, in [0, 0.5)). A lease's validity is TTL − TTL×f − 2ms
// from the moment its last confirmed acquisition or renewal was sent.
func WithDriftFactor(f float64) Option {
	return optionFunc(func(c *config) {
		if !(f >= 0 && f < 0.5) {
			c.errs = append(c.errs, fmt.Errorf("%w: WithDriftFactor(%v): must be in [0, 0.5)", ErrInvalidOption, f))
			return
		}
		c.driftFactor = f
	})
}

// WithTracerProvider sets the OpenTelemetry tracer provider. Without it the
// global provider is used; while that is not set, tracing costs nothing.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tp = tp })
}

// WithMeterProvider sets the OpenTelemetry meter provider. Without it the
// global provider is used; while that is not set, metrics cost nothing.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// WithLogger sets the logger for lost leases and failed renewals (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l != nil {
			c.logger = l
		}
	})
}

// WithWaitReplicas makes every acquisition wait until at least n replicas
// of the lock's master have acknowledged it, for at most timeout: the
// acquire script and WAIT n timeout go in one pipeline on one connection
// (on Cluster, to the master serving the lock's slot). If fewer than n
// replicas acknowledge in time, the lock is released again and the attempt
// fails with an error matching both ErrNotReplicated and ErrUnavailable;
// Acquire does not retry it. n = 0 turns the wait off. n must not be
// negative, timeout must be positive and shorter than the client's
// ReadTimeout (WAIT's reply is read under it), else New fails with
// ErrInvalidOption.
//
// WAIT narrows, but does not close, the window in which a failover to a
// replica that never saw the lock hands it to a second owner: Redis
// replication stays asynchronous, an acknowledged write can still be lost
// (for example when the master and the acknowledging replicas fail
// together, or a replica that acknowledged is not the one promoted), and
// renewals are not waited for. Fencing tokens, not WAIT, are what protect
// the data. Only New's Redis store uses it, and only for acquisitions by the
// acquire script: a lock handed straight from its holder to a waiter (Fair
// queues, or a waiter of the same Locker) is not waited for.
func WithWaitReplicas(n int, timeout time.Duration) Option {
	return optionFunc(func(c *config) {
		if n < 0 || timeout <= 0 {
			c.errs = append(c.errs, fmt.Errorf("%w: WithWaitReplicas(%d, %v): want n >= 0 replicas and a positive timeout, e.g. WithWaitReplicas(1, 100*time.Millisecond)", ErrInvalidOption, n, timeout))
			return
		}
		c.waitReplicas, c.waitTimeout = n, timeout
	})
}

// acquireConfig is one acquisition's configuration.
type acquireConfig struct {
	ttl      time.Duration // 0: the Locker's TTL
	wait     time.Duration
	hasWait  bool
	watchdog bool
	fair     bool
	name     string
	errs     []error
	// storeWide: StoreWideFence.
	storeWide bool
}

// AcquireOption configures one Acquire, TryAcquire or Do call.
type AcquireOption interface{ applyAcquire(*acquireConfig) }

type acquireOptionFunc func(*acquireConfig)

func (f acquireOptionFunc) applyAcquire(c *acquireConfig) { f(c) }

// WithWait bounds how long Acquire waits for a busy lock: after d it gives
// up with ErrNotAcquired. The default is to wait until ctx ends. WithWait(0)
// makes a single attempt, like TryAcquire.
func WithWait(d time.Duration) AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) {
		if d < 0 {
			c.errs = append(c.errs, fmt.Errorf("%w: WithWait(%v): wait must not be negative", ErrInvalidOption, d))
			return
		}
		c.wait, c.hasWait = d, true
	})
}

// WithLeaseTTL sets this lease's TTL (at least MinTTL), overriding the
// Locker's WithTTL.
func WithLeaseTTL(d time.Duration) AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) {
		if err := checkTTL("WithLeaseTTL", d); err != nil {
			c.errs = append(c.errs, err)
			return
		}
		c.ttl = d
	})
}

// WithoutWatchdog turns renewal off for this lease: the lock simply expires
// after its TTL, and the lease context is cancelled with ErrLost just before.
func WithoutWatchdog() AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) { c.watchdog = false })
}

// Fair makes this acquisition wait in arrival order: waiters of every
// process that use Fair on the key join one queue in the store, and a release
// hands the lock straight to the first waiter still alive, waking only it. A
// waiter whose process dies is skipped at hand-off; one that gives up
// (context ended, WithWait ran out) leaves the queue at once.
//
// A Fair waiter is never overtaken by a waiter that arrived after it,
// whatever that waiter's mode or Locker: waiters of other Lockers
// (processes) queue in the same line whether or not they use Fair, and a
// release hands the lock to a waiter of its own Locker ahead of the queue
// only when that waiter arrived before every queued one (see the package
// documentation, Waiting); a lock that is free while others are queued (its
// holder's key expired) goes to the first of them still alive, whatever the
// mode of the attempt that finds it. Fair adds arrival order within a
// Locker. TryAcquire with Fair takes a free lock only when nobody is queued
// for it.
func Fair() AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) { c.fair = true })
}

// StoreWideFence makes this lease's fence higher than every fence the
// Locker's store drew before the acquisition began, for any key, not only
// for this one.
//
// Fences rise per key. A storage row checked against the fences of two keys
// (a mistake, but an easy one: the row updated under two names) compares two
// sequences, and on the stores of New and NewRedlock, whose counters are
// kept per key and seeded from the server clock, a key used for the first
// time draws a higher fence than a key used for a while: the old key's
// writes are then refused until its counter catches up, which can take days.
// With StoreWideFence those stores first raise the key's counter to the
// server's clock in microseconds (one more round trip; under Redlock on a
// quorum of masters, and only as exact as the masters' clocks agree), which
// no counter runs ahead of, so a write with the fence wins over every write
// fenced before the acquisition, under any key. The other stores draw fences
// from one sequence for all keys (etcd's revision, ZooKeeper's zxid, the SQL
// stores' sequence): theirs are store-wide already. The counter is never
// lowered, so the key's fences keep rising. cachelock's Update uses it.
func StoreWideFence() AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) { c.storeWide = true })
}

// WithName sets the low-cardinality name this lock is reported under in
// spans and metrics (attribute lock.name), such as the template "order:{id}"
// for the key "order:42". The default is the key itself, which suits fixed
// keys ("nightly-report") but not keys that embed ids.
func WithName(name string) AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) { c.name = name })
}

func checkTTL(opt string, d time.Duration) error {
	if d < MinTTL {
		return fmt.Errorf("%w: %s(%v): TTL must be at least %v", ErrInvalidOption, opt, d, MinTTL)
	}
	return nil
}

// drift is the part of ttl that a lease's validity gives up for clock drift.
func (c *config) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*c.driftFactor) + driftFloor
}

// checkKey checks a lock key: 1 to MaxKeyLen bytes.
func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: the key is empty: name the resource to lock, e.g. \"order:42\"", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: the key is %d bytes, the limit is %d: hash long keys before locking", ErrInvalidKey, len(key), MaxKeyLen)
	}
	return nil
}
