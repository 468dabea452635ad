package cachelock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"reflect"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/lockmw"
)

// A Cache is a cache-aside helper on Redis whose fills and updates cannot
// leave stale data behind: a value loaded before an invalidation completes
// is never installed after it. Create one per process and share it; it is
// safe for concurrent use. Caches in different processes cooperate when they
// use the same Redis, the same prefix, and Lockers that exclude each other.
type Cache struct {
	rdb    redis.UniversalClient
	locker *lockmw.Locker
	cfg    config
	tel    *telemetry
	flight flight
}

// New returns a Cache keeping its entries in rdb and serializing Update's
// writers with locker. It does not own either: close them after the Cache is
// no longer used. New fails with an error matching lockmw.ErrNilClient or
// ErrNilLocker for nil arguments (also a nil pointer in a non-nil
// interface, such as a nil *redis.Client), and lockmw.ErrInvalidOption for a
// bad option. It sends nothing to Redis.
//
// rdb and locker need not reach the same Redis deployment, and New cannot
// check whether they do (a Locker does not expose its clients): the fill
// leases and entries live only in rdb, and the lock only serializes writers
// and issues the fence the database checks, so each works on its own. A
// Locker from lockmw.NewRedlock, over several masters, is as good as one on
// rdb. What every process sharing the cache must agree on is the deployment
// behind rdb, the prefix (WithPrefix) and a Locker deployment whose locks
// exclude each other; a process with another rdb or Locker deployment
// neither sees the others' invalidations nor waits for their writers.
// New does not detect a closed rdb or locker either: calls then fail with
// errors matching redis.ErrClosed (and lockmw.ErrUnavailable) or
// lockmw.ErrClosed.
func New(rdb redis.UniversalClient, locker *lockmw.Locker, opts ...Option) (*Cache, error) {
	if isNil(rdb) {
		return nil, fmt.Errorf("cachelock.New: %w: pass the Redis client that keeps the cache entries", lockmw.ErrNilClient)
	}
	if locker == nil {
		return nil, fmt.Errorf("cachelock.New: %w: pass the lockmw.Locker that Update locks keys with", ErrNilLocker)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	// Store-wide fences: an Update's write wins over every write fenced
	// before it, under any resource (see Update).
	cfg.lockOpts = append([]lockmw.AcquireOption{lockmw.WithName("cachelock.update"), lockmw.StoreWideFence()}, cfg.lockOpts...)
	tel, err := newTelemetry(cfg.tp, cfg.mp)
	if err != nil {
		return nil, fmt.Errorf("cachelock.New: creating metrics: %w", err)
	}
	return &Cache{rdb: rdb, locker: locker, cfg: cfg, tel: tel}, nil
}

// isNil reports whether v is nil or a nil pointer in an interface.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Pointer && r.IsNil()
}

// entryKey is the Redis key of key's cache entry.
func (c *Cache) entryKey(key string) string { return c.cfg.prefix + key }

func checkKey(op, key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("cachelock: %s: %w: key %q: want 1 to %d bytes", op, lockmw.ErrInvalidKey, truncate(key), MaxKeyLen)
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}

// unavailable wraps a Redis error so that it matches lockmw.ErrUnavailable,
// unless ctx has ended, in which case the context's error is returned.
func unavailable(ctx context.Context, op, key string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("cachelock: %s %q: %w", op, key, context.Cause(ctx))
	}
	return fmt.Errorf("cachelock: %s %q: %w: %w", op, key, lockmw.ErrUnavailable, err)
}

// Fetch returns the value of key: from the cache when it holds one, otherwise
// from load, which is called by one caller at a time per key across all
// processes sharing the cache, and by at most one goroutine per process.
//
// On a miss, the caller that wins the key's fill lease calls load and
// installs its value with TTL ttl, if, and only if, its lease is still valid
// and no Invalidate revoked it in the meantime. After a revocation the value
// may predate a write, so the caller fills again (up to 3 times, then it
// returns its last load uncached). Other callers wait for the fill (polling
// Redis with a short backoff, bounded by ctx), or, with WithStaleReads, get
// the key's invalidated value at once. If the lease expires before its
// holder installs (it crashed, or load is slower than WithFillLease), the
// next caller takes over; the late holder returns its value uncached.
//
// load gets a context that is cancelled only when every caller waiting for
// it has given up. When load returns an error, nothing is cached (except
// ErrNotFound under WithNegativeCaching) and the error is returned. load
// says "not found" only by returning an error matching ErrNotFound; a nil
// slice with a nil error is refused with an error matching ErrNilValue and
// not cached, while a non-nil empty slice is an empty value, cached as any
// other. A value loaded after every caller gave up is still installed if
// the fill lease allows it (the load was paid for), with no warning logged:
// giving up is the callers' own choice, not a failure.
//
// load must not be nil, also when the key may be cached: use Get to read
// only what the cache holds.
//
// If Redis cannot be reached, Fetch returns an error matching
// lockmw.ErrUnavailable, or, with WithLoadOnUnavailable, calls load directly.
// The returned slice belongs to the caller.
func (c *Cache) Fetch(ctx context.Context, key string, ttl time.Duration, load func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	if err := checkKey("Fetch", key); err != nil {
		return nil, err
	}
	if ttl < time.Millisecond {
		return nil, fmt.Errorf("cachelock: Fetch %q: %w: ttl %v is shorter than 1ms", key, lockmw.ErrInvalidOption, ttl)
	}
	if load == nil {
		return nil, c.nilLoad(key)
	}
	ctx, span := c.tel.start(ctx, spanFetch)
	res, err := c.flight.do(ctx, key, func(ctx context.Context) (fillResult, error) {
		return c.fill(ctx, key, ttl, load)
	})
	outcome := res.outcome
	if err != nil && outcome == "" {
		outcome = outcomeError
	}
	c.tel.recordFetch(ctx, outcome)
	end(span, outcome, err, ErrNotFound)
	if err != nil {
		return nil, err
	}
	return res.value, nil
}

func (c *Cache) nilLoad(key string) error {
	return fmt.Errorf("cachelock: Fetch %q: %w: load is nil", key, lockmw.ErrInvalidOption)
}

// fill is the shared part of Fetch: read the entry, and load on a miss.
func (c *Cache) fill(ctx context.Context, key string, ttl time.Duration, load func(ctx context.Context) ([]byte, error)) (fillResult, error) {
	entry := c.entryKey(key)
	waited := false
	backoff := pollMin
	refills := 0
	for {
		token := newToken()
		r, err := runFetch(ctx, c.rdb, entry, token, c.cfg.fillLease, c.cfg.staleFor > 0)
		if err != nil {
			err = unavailable(ctx, "Fetch", key, err)
			if ctx.Err() != nil || !c.cfg.loadOnFailure {
				return fillResult{outcome: outcomeError}, err
			}
			c.cfg.logger.WarnContext(ctx, "cachelock: Redis unavailable, loading without the cache", "key", key, "err", err)
			v, lerr := c.callLoad(ctx, load, outcomeFallback)
			return fillResult{value: v, outcome: outcomeFallback}, lerr
		}
		switch r.kind {
		case replyHit:
			if waited {
				return fillResult{value: r.value, outcome: outcomeFilled}, nil
			}
			return fillResult{value: r.value, outcome: outcomeHit}, nil
		case replyNeg:
			return fillResult{outcome: outcomeNegative}, fmt.Errorf("cachelock: Fetch %q: %w (cached)", key, ErrNotFound)
		case replyStale:
			return fillResult{value: r.value, outcome: outcomeStale}, nil
		case replyFill:
			res, outcome, err := c.loadAndInstall(ctx, key, entry, token, ttl, load)
			if outcome == revoked && (err == nil || errors.Is(err, ErrNotFound)) && refills < maxRefills {
				// An invalidation overtook the load: what it read may
				// predate the write, and callers that joined this fill
				// after the invalidation must not get it. Fill again.
				refills++
				continue
			}
			return res, err
		case replyWait:
			waited = true
			d := min(backoff+mrand.N(backoff/2+1), r.wait+time.Millisecond)
			backoff = min(2*backoff, pollMax)
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return fillResult{outcome: outcomeError}, fmt.Errorf("cachelock: Fetch %q: waiting for another caller's fill: %w", key, context.Cause(ctx))
			case <-t.C:
			}
		}
	}
}

// Get returns key's value if the cache holds a current one, and never
// loads: it returns an error matching ErrMiss when the entry is missing,
// invalidated (also with WithStaleReads: Get serves no stale values) or
// being filled, and one matching ErrNotFound for a cached "not found". Use
// it where a hit is useful but a miss should not reach the database; use
// Fetch to fill on a miss. If Redis cannot be reached, it returns an error
// matching lockmw.ErrUnavailable. The returned slice belongs to the caller.
func (c *Cache) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey("Get", key); err != nil {
		return nil, err
	}
	ctx, span := c.tel.start(ctx, spanGet)
	vals, err := c.rdb.HMGet(ctx, c.entryKey(key), "s", "v").Result()
	if err != nil {
		err = unavailable(ctx, "Get", key, err)
		end(span, outcomeError, err)
		return nil, err
	}
	state, _ := vals[0].(string)
	switch state {
	case stateValue:
		v, _ := vals[1].(string)
		c.tel.recordFetch(ctx, outcomeHit)
		end(span, outcomeHit, nil)
		return []byte(v), nil
	case stateNegative:
		c.tel.recordFetch(ctx, outcomeNegative)
		end(span, outcomeNegative, nil)
		return nil, fmt.Errorf("cachelock: Get %q: %w (cached)", key, ErrNotFound)
	}
	c.tel.recordFetch(ctx, outcomeMiss)
	end(span, outcomeMiss, nil)
	return nil, fmt.Errorf("cachelock: Get %q: %w", key, ErrMiss)
}

// callLoad calls load and counts it.
func (c *Cache) callLoad(ctx context.Context, load func(ctx context.Context) ([]byte, error), mode string) ([]byte, error) {
	v, err := load(ctx)
	outcome := outcomeOK
	switch {
	case mode == outcomeFallback:
		outcome = outcomeFallback
	case err != nil:
		outcome = outcomeError
	}
	c.tel.loads.Add(ctx, 1, outcomeAttr(outcome))
	return v, err
}

// loadAndInstall runs load under the fill lease token holds, and installs
// the value if the lease is still valid and unrevoked. It reports what
// install.lua answered (installed, revoked or expired; installed also when
// the install could not be attempted).
func (c *Cache) loadAndInstall(ctx context.Context, key, entry, token string, ttl time.Duration, load func(ctx context.Context) ([]byte, error)) (fillResult, int, error) {
	v, err := c.callLoad(ctx, load, outcomeLoaded)
	if err == nil && v == nil {
		err = fmt.Errorf("cachelock: Fetch %q: %w: return cachelock.ErrNotFound for a missing value, []byte{} for an empty one", key, ErrNilValue)
	}
	state := stateValue
	if err != nil {
		if !errors.Is(err, ErrNotFound) || c.cfg.negativeTTL == 0 {
			// Let the next caller fill at once rather than when the lease
			// expires. Best effort: the lease expires anyway.
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), invalidateTimeout)
			defer cancel()
			if aerr := runAbandon(actx, c.rdb, entry, token); aerr != nil {
				c.cfg.logger.DebugContext(ctx, "cachelock: could not give up a fill lease; it expires by itself", "key", key, "err", aerr)
			}
			return fillResult{outcome: outcomeLoaded}, installed, err
		}
		state, ttl, v = stateNegative, c.cfg.negativeTTL, nil
	}
	// Install even if every caller has given up meanwhile: the value is
	// loaded, and the script still checks the lease.
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), invalidateTimeout)
	result, ierr := runInstall(ictx, c.rdb, entry, token, state, v, c.jittered(ttl))
	cancel()
	switch {
	case ierr != nil:
		// The caller still gets what it loaded; the entry stays empty and
		// its lease expires.
		c.cfg.logger.WarnContext(ctx, "cachelock: could not install a loaded value", "key", key, "err", ierr)
		result = installed
	case result == revoked:
		c.tel.revokedFills.Add(ctx, 1)
		c.cfg.logger.DebugContext(ctx, "cachelock: fill revoked by an invalidation; value not cached", "key", key)
	case result == expired:
		c.tel.revokedFills.Add(ctx, 1)
		c.cfg.logger.WarnContext(ctx, "cachelock: load outlasted its fill lease; value not cached (raise WithFillLease)", "key", key, "lease", c.cfg.fillLease)
	}
	return fillResult{value: v, outcome: outcomeLoaded}, result, err
}

func (c *Cache) jittered(ttl time.Duration) time.Duration {
	if c.cfg.jitter == 0 {
		return ttl
	}
	return ttl - time.Duration(mrand.Float64()*c.cfg.jitter*float64(ttl))
}

// Invalidate marks the entries of keys deleted and revokes their outstanding
// fill leases: once it returns nil, no value loaded before the call is
// installed. With WithStaleReads the old values stay readable as stale for
// the configured window; otherwise they are dropped. An error matching
// lockmw.ErrUnavailable means some keys may not have been invalidated; the
// call can be retried, it is idempotent.
func (c *Cache) Invalidate(ctx context.Context, keys ...string) error {
	for _, key := range keys {
		if err := checkKey("Invalidate", key); err != nil {
			return err
		}
	}
	ctx, span := c.tel.start(ctx, spanInvalidate, attrKeys.Int(len(keys)))
	var errs []error
	for _, key := range keys {
		if err := runInvalidate(ctx, c.rdb, c.entryKey(key), c.cfg.staleFor); err != nil {
			errs = append(errs, unavailable(ctx, "Invalidate", key, err))
			c.tel.invalidations.Add(ctx, 1, outcomeAttr(outcomeError))
			continue
		}
		c.tel.invalidations.Add(ctx, 1, outcomeAttr(outcomeOK))
	}
	err := errors.Join(errs...)
	if err != nil {
		end(span, outcomeError, err)
	} else {
		end(span, outcomeOK, nil)
	}
	return err
}

// Update changes a resource in the database and then in the cache: it
// takes the lockmw lock on resource (so writers of one resource are
// serialized across processes), runs write with the lease's context and
// fencing token, invalidates the cache keys, and releases the lock.
//
// resource names what write changes and what its lock serializes,
// typically the row ("products/42"), so every Update of a row must name
// the same resource, whichever cache keys it touches. The cache keys to
// invalidate are given with Invalidating: one row is often cached under
// several keys (by id, by SKU, in a list page). Without Invalidating,
// Update invalidates the cache key named resource, as when the row is
// cached under one key only; the resource is then that cache key, so
// Updates of one row through two of its cache keys (each without
// Invalidating) take two locks, which do not serialize them. Name the row
// and list its keys:
//
//	c.Update(ctx, "products/42", write, cachelock.Invalidating("product:42", "product-sku:ABC"))
//
// Fences are store-wide (lockmw.StoreWideFence): an Update's fence is
// above every fence drawn before its lock was asked for, under any
// resource, so each write wins over every write fenced before it. An
// Update under a wrong resource (the row updated once under another name)
// therefore wins once: its write lands, and the row's next Update under its
// own resource lands after it, as do all later ones; the row's correct
// Updates are never locked out. Only writes whose Updates overlap in time
// under two resources can fence each other out (the later fence wins).
//
// write should run the database transaction, and make the store reject it
// if a newer writer got there first, by checking fence (see FencedExec).
// Its context is cancelled if the lock is lost; if that happens, Update
// returns an error matching lockmw.ErrLost, also when write returned nil.
// Update checks the lease's deadline itself (lockmw.Lease.Valid), not only
// the timer that ends its context, which can fire late: before write (a
// lease already past its deadline is not written under; Update returns an
// error matching lockmw.ErrLost and write is not called) and once write
// returns (a write that outlasted the lease is reported lost).
//
// The keys are invalidated after every write, successful or not (a write
// that failed may still have committed), even if ctx has ended by then. If
// invalidation fails, the hook set by WithInvalidateRetry is called; unless
// it returns nil, Update returns an error matching ErrStale (joined with the
// write's error, if any): the entries may then serve the old value until
// they expire, at most the TTL they were filled with (plus the
// WithStaleReads window).
//
// If the lock cannot be taken, Update returns the lockmw error (for example
// matching lockmw.ErrNotAcquired or lockmw.ErrUnavailable) and write is not
// called. A bad resource or key is refused with an error matching
// lockmw.ErrInvalidKey, a nil write or an empty Invalidating with one
// matching lockmw.ErrInvalidOption, before anything is locked.
func (c *Cache) Update(ctx context.Context, resource string, write func(ctx context.Context, fence uint64) error, opts ...UpdateOption) error {
	if err := checkKey("Update", resource); err != nil {
		return err
	}
	if write == nil {
		return fmt.Errorf("cachelock: Update %q: %w: write is nil", resource, lockmw.ErrInvalidOption)
	}
	keys, err := newUpdateConfig(opts)
	if err != nil {
		return fmt.Errorf("cachelock: Update %q: %w", resource, err)
	}
	keyAsResource := keys == nil
	if keyAsResource {
		keys = []string{resource}
	}
	ctx, span := c.tel.start(ctx, spanUpdate, attrKeys.Int(len(keys)))
	lease, err := c.locker.Acquire(ctx, c.entryKey(resource), c.cfg.lockOpts...)
	if err != nil {
		err = fmt.Errorf("cachelock: Update %q: taking the lock: %w", resource, err)
		end(span, outcomeError, err)
		return err
	}
	span.SetAttributes(attrFence.Int64(int64(lease.Fence())))

	if !lease.Valid() {
		// Past its deadline before write could start (a stalled goroutine,
		// a late timer): Valid ended the lease as lost. write is not run,
		// so nothing needs invalidating.
		cause := context.Cause(lease.Context())
		_ = lease.Release(context.WithoutCancel(ctx))
		err = fmt.Errorf("cachelock: Update %q: the lock was lost before the write (fence %d), which was not run: %w", resource, lease.Fence(), cause)
		end(span, "lost", err)
		return err
	}
	var errs []error
	if werr := write(lease.Context(), lease.Fence()); werr != nil {
		if errors.Is(werr, ErrFenced) && context.Cause(lease.Context()) == nil && lease.Valid() {
			werr = fencedWhileHeld(werr, resource, lease.Fence(), keyAsResource)
		}
		errs = append(errs, fmt.Errorf("cachelock: Update %q: write: %w", resource, werr))
	}
	lostCause := context.Cause(lease.Context())
	if lostCause == nil && !lease.Valid() {
		// Past its deadline, though the watchdog's timer that ends the
		// context has not fired (it can be late): Valid ended the lease as
		// lost, and a write that outlasted it is reported as such.
		lostCause = context.Cause(lease.Context())
	}
	bg := context.WithoutCancel(ctx)
	if ierr := c.invalidateAfterWrite(bg, resource, keys); ierr != nil {
		errs = append(errs, ierr)
	}
	rerr := lease.Release(bg)
	switch {
	case errors.Is(lostCause, lockmw.ErrLost):
		errs = append(errs, fmt.Errorf("cachelock: Update %q: the lock was lost during the write (fence %d): %w", resource, lease.Fence(), lostCause))
	case errors.Is(rerr, lockmw.ErrLost):
		errs = append(errs, fmt.Errorf("cachelock: Update %q: the lock was lost before release (fence %d): %w", resource, lease.Fence(), rerr))
	case rerr != nil:
		// The write is done and the entries invalidated; the lock expires
		// by itself after its TTL.
		c.cfg.logger.WarnContext(ctx, "cachelock: could not release the update lock; it expires after its TTL", "resource", resource, "err", rerr)
	}
	err = errors.Join(errs...)
	switch {
	case err == nil:
		end(span, outcomeOK, nil)
	case errors.Is(err, lockmw.ErrLost):
		end(span, "lost", err)
	default:
		end(span, outcomeError, err)
	}
	return err
}

// fencedWhileHeld explains werr, a write refused with ErrFenced (no row
// changed) while Update's lock was held: a FencedExec run with another
// fence than fence, Update's; otherwise, as fence is store-wide, above
// every fence drawn before the lock was asked for, and no writer of the
// same resource came after it: so the row does not exist, unless a writer
// under another resource (or another Locker's store) took a fence meanwhile
// and wrote the row first.
func fencedWhileHeld(werr error, resource string, fence uint64, keyAsResource bool) error {
	if fe := (*fencedError)(nil); errors.As(werr, &fe) && fe.fence != fence {
		return fmt.Errorf("%w: write ran FencedExec with fence %d, not this Update's fence %d: pass write's fence argument", werr, fe.fence, fence)
	}
	other := "a writer under another resource"
	if keyAsResource {
		other = fmt.Sprintf("a writer under another resource (Update was given no Invalidating, so its resource is the cache key %q: "+
			"if the row is also updated through another cache key, name the row as the resource and its cache keys with Invalidating, "+
			"so that its writers are serialized)", resource)
	}
	return fmt.Errorf("%w: the row does not exist (fence %d, held, is above every fence drawn before this Update under any resource, "+
		"so no earlier write can have fenced it out); or, only if it does exist, %s took a higher fence while this Update ran and wrote it first",
		werr, fence, other)
}

// invalidateAfterWrite invalidates key after a write, calling the retry hook
// if that fails, and returns an error matching ErrStale if the entry may
// still hold the old value.
func (c *Cache) invalidateAfterWrite(ctx context.Context, resource string, keys []string) error {
	ictx, cancel := context.WithTimeout(ctx, invalidateTimeout)
	err := c.Invalidate(ictx, keys...)
	cancel()
	if err == nil {
		return nil
	}
	if c.cfg.invalidateRetry != nil {
		herr := c.cfg.invalidateRetry(ctx, slices.Clone(keys))
		if herr == nil {
			c.cfg.logger.InfoContext(ctx, "cachelock: invalidation after write failed; the retry hook took over", "resource", resource, "keys", keys, "err", err)
			return nil
		}
		err = errors.Join(err, fmt.Errorf("retry hook: %w", herr))
	}
	c.cfg.logger.ErrorContext(ctx, "cachelock: cache may be stale: invalidation after write failed", "resource", resource, "keys", keys, "err", err)
	return fmt.Errorf("cachelock: Update %q: %w: %w", resource, ErrStale, err)
}

// newToken returns a random 128-bit fill token.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
