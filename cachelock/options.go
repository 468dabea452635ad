package cachelock

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockmw/lockmw/internal/adapt"
	"github.com/lockmw/lockmw/lockmw"
)

// Defaults.
const (
	// DefaultPrefix is prepended to every cache key, for the Redis entry, and
	// to every Update resource, for its lock key.
	DefaultPrefix = "cachelock:"
	// DefaultFillLease is how long the caller that won a miss may take to
	// load and install the value before another caller may fill instead.
	DefaultFillLease = 5 * time.Second
	// MaxKeyLen is the longest cache key or Update resource accepted, in bytes.
	MaxKeyLen = 256
	// MaxPrefixLen is the longest key prefix accepted, in bytes.
	MaxPrefixLen = 128
)

// Polling bounds for callers waiting for another caller's fill.
const (
	pollMin = 2 * time.Millisecond
	pollMax = 50 * time.Millisecond
)

// maxRefills is how many times a Fetch loads again after an invalidation
// revoked its fill, before it returns what it loaded without caching it.
const maxRefills = 3

// invalidateTimeout bounds Update's invalidation after the write, which runs
// even if the caller's context has ended: the write may have committed.
const invalidateTimeout = 5 * time.Second

// config is the Cache configuration built from Options.
type config struct {
	prefix          string
	fillLease       time.Duration
	staleFor        time.Duration
	staleSet        bool // WithStaleReads was given
	negativeTTL     time.Duration
	negativeSet     bool // WithNegativeCaching was given
	jitter          float64
	loadOnFailure   bool
	invalidateRetry func(ctx context.Context, keys []string) error
	lockOpts        []lockmw.AcquireOption
	tp              trace.TracerProvider
	mp              metric.MeterProvider
	logger          *slog.Logger
}

// newConfig applies opts over the defaults, skipping nil ones, and
// validates the result: the mistakes found are returned, matching
// lockmw.ErrInvalidOption.
func newConfig(opts []Option) (config, error) {
	c := config{prefix: DefaultPrefix, fillLease: DefaultFillLease, logger: slog.Default()}
	adapt.Apply(opts, func(o Option) { o.apply(&c) })
	var misuse adapt.Misuse
	if len(c.prefix) > MaxPrefixLen {
		misuse.Addf("cachelock.WithPrefix", "prefix is %d bytes, the limit is %d", len(c.prefix), MaxPrefixLen)
	}
	if c.fillLease < time.Millisecond {
		misuse.Addf("cachelock.WithFillLease", "lease %v is shorter than 1ms", c.fillLease)
	}
	if c.staleSet && c.staleFor < time.Millisecond {
		misuse.Addf("cachelock.WithStaleReads", "window %v is shorter than 1ms", c.staleFor)
	}
	if c.negativeSet && c.negativeTTL < time.Millisecond {
		misuse.Addf("cachelock.WithNegativeCaching", "TTL %v is shorter than 1ms", c.negativeTTL)
	}
	if c.jitter < 0 || c.jitter >= 1 {
		misuse.Addf("cachelock.WithTTLJitter", "fraction %v is outside [0, 1)", c.jitter)
	}
	return c, misuse.Err()
}

// Option configures a Cache in New.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithPrefix sets the prefix of the Redis entry of every key and of the lock
// key of every Update resource (default "cachelock:"). Caches that share
// entries need the same prefix. New refuses a prefix longer than
// MaxPrefixLen.
func WithPrefix(p string) Option {
	return optionFunc(func(c *config) { c.prefix = p })
}

// WithFillLease sets how long the caller that wins a miss may take to load
// and install the value (default 5s, at least 1ms). Until the lease expires
// no other caller loads the key; a load that outlasts its lease is not
// installed. Set it above your slowest load.
func WithFillLease(d time.Duration) Option {
	return optionFunc(func(c *config) { c.fillLease = d })
}

// WithStaleReads lets Fetch serve stale values: Invalidate keeps an entry's
// old value for window, marked stale, and while another caller is filling
// the key, Fetch returns that old value at once instead of waiting. The
// window starts at the first invalidation of the value and is never
// extended: further invalidations (steady writes) revoke fills but do not
// move its end, so no Fetch gets a value more than window after the first
// invalidation that followed its replacement. After the window, callers
// wait for the fill as without this option. The caller that wins the fill
// lease still loads and returns a fresh value, and so do the callers in its
// process, which share its fill. Get never returns stale values.
// Without this option (the default), Invalidate drops the value and callers
// wait for the fill.
func WithStaleReads(window time.Duration) Option {
	return optionFunc(func(c *config) { c.staleFor, c.staleSet = window, true })
}

// WithNegativeCaching caches "not found" for ttl: when a load returns an
// error matching ErrNotFound, Fetch stores that answer, and later Fetches
// return an error matching ErrNotFound without loading, until ttl passes or
// the key is invalidated.
func WithNegativeCaching(ttl time.Duration) Option {
	return optionFunc(func(c *config) { c.negativeTTL, c.negativeSet = ttl, true })
}

// WithTTLJitter shortens every TTL Fetch installs by a random share of up to
// frac (in [0, 1)), so that entries filled together do not expire together.
func WithTTLJitter(frac float64) Option {
	return optionFunc(func(c *config) { c.jitter = frac })
}

// WithLoadOnUnavailable makes Fetch call load directly, without caching,
// when Redis cannot be reached. The database then takes the whole read load,
// and callers in one process still share one load per key. Without it, Fetch
// returns an error matching lockmw.ErrUnavailable.
func WithLoadOnUnavailable() Option {
	return optionFunc(func(c *config) { c.loadOnFailure = true })
}

// WithInvalidateRetry sets a hook that Update calls with its cache keys when
// invalidation after a write fails. The hook may retry (for
// example by calling Cache.Invalidate with backoff) or hand the keys to a
// durable queue; if it returns nil, Update reports success, otherwise Update
// returns an error matching ErrStale. ctx is not cancelled with the caller's
// context.
func WithInvalidateRetry(hook func(ctx context.Context, keys []string) error) Option {
	return optionFunc(func(c *config) { c.invalidateRetry = hook })
}

// WithLockOptions sets the options of the lock Update takes on a resource, such as
// lockmw.WithWait or lockmw.WithLeaseTTL. By default the lock waits until the
// caller's context ends and is reported under the name "cachelock.update".
func WithLockOptions(opts ...lockmw.AcquireOption) Option {
	return optionFunc(func(c *config) { c.lockOpts = append(c.lockOpts, opts...) })
}

// WithTracerProvider sets the OpenTelemetry tracer provider. Without it the
// global provider is used.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tp = tp })
}

// WithMeterProvider sets the OpenTelemetry meter provider. Without it the
// global provider is used.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// WithLogger sets the logger for revoked fills, failed invalidations and
// Redis fallbacks (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l != nil {
			c.logger = l
		}
	})
}

// An UpdateOption configures one Update call.
type UpdateOption interface{ applyUpdate(*updateConfig) }

type updateConfig struct {
	invalidating [][]string // the keys of each Invalidating
}

type updateOptionFunc func(*updateConfig)

func (f updateOptionFunc) applyUpdate(c *updateConfig) { f(c) }

// newUpdateConfig applies opts, skipping nil ones, and returns the cache
// keys to invalidate (nil: the resource's own), or the mistakes found.
func newUpdateConfig(opts []UpdateOption) ([]string, error) {
	var c updateConfig
	adapt.Apply(opts, func(o UpdateOption) { o.applyUpdate(&c) })
	var keys []string
	var misuse adapt.Misuse
	var badKeys []error // lockmw.ErrInvalidKey, not a misuse of the option
	for _, set := range c.invalidating {
		if len(set) == 0 {
			misuse.Addf("cachelock.Invalidating", "no cache keys given: name the keys the write makes stale")
			continue
		}
		for _, k := range set {
			if err := checkKey("Invalidating", k); err != nil {
				badKeys = append(badKeys, err)
				break
			}
		}
		keys = append(keys, set...)
	}
	return keys, errors.Join(append([]error{misuse.Err()}, badKeys...)...)
}

// Invalidating names the cache keys an Update invalidates after its write,
// instead of the key named like the resource: all the keys the changed row
// is cached under, for example "product:42", "product-sku:ABC" and the list
// pages that show it. Repeated, the keys add up. Each key must be a valid
// cache key (lockmw.ErrInvalidKey otherwise), and at least one must be
// given (lockmw.ErrInvalidOption otherwise): Update checks them before it
// locks anything.
func Invalidating(keys ...string) UpdateOption {
	keys = slices.Clone(keys)
	return updateOptionFunc(func(c *updateConfig) { c.invalidating = append(c.invalidating, keys) })
}
