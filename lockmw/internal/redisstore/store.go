package redisstore

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/lockmw/internal/errs"
	"github.com/lockmw/lockmw/lockmw/internal/store"
	"github.com/redis/go-redis/v9"
)

// This file is the Redis store's side of the store boundary
// (lockmw/internal/store): what every store does, done on one Redis
// deployment. Its hand-overs and fair queues are its granter
// (granter.go); its policy is grantPolicy (grantpolicy.go).

var (
	_ store.Store        = (*Store)(nil)
	_ store.Named        = (*Store)(nil)
	_ store.LeftNothing  = (*Store)(nil)
	_ store.FireClaimer  = (*Store)(nil)
	_ granter            = (*Store)(nil)
	_ store.ClientCloser = (*Store)(nil)
	_ store.FenceRaiser  = (*Store)(nil)
)

// Store keeps locks on one Redis deployment: a standalone server, a
// Sentinel-managed primary, or a Cluster (every lock's keys share one slot).
// It notifies releases on pub/sub (sharded pub/sub on Cluster) and keeps
// the fair queues.
type Store struct {
	client  redis.UniversalClient
	self    string // the Locker's id: names its grant channel
	publish string // PUBLISH, or SPUBLISH on Cluster
	numsub  string // NUMSUB, or SHARDNUMSUB on Cluster
	subs    *subscriber
	batch   *batcher // acquisitions and releases of concurrent callers share round trips
	// waitReplicas and waitTimeout are WithWaitReplicas' arguments; 0
	// replicas: no WAIT.
	waitReplicas int
	waitTimeout  time.Duration
	// plainAcquire: acquire with plain commands instead of the script (one
	// server; on Cluster a slot migration could run them out of order).
	plainAcquire bool
	// expiry is the Locker's, for the counter and queue keys.
	expiry keyExpiry
	// prefix is the Locker's key prefix; events what the subscriber
	// hears goes to (route).
	prefix string
	// names names the locks: Cluster names on a Cluster (naming).
	names  naming
	events Events
	// holderInfo is WithHolderInfo's description ("": none), kept beside
	// each lock the Locker takes (inspect.go).
	holderInfo string
}

// New returns the store of client; lockmw.New binds it to its Locker
// (Bind) before the Locker's first request.
func New(client redis.UniversalClient) *Store {
	b := &Store{client: client, publish: "PUBLISH", numsub: "NUMSUB", names: clusterNaming(client)}
	if _, ok := client.(*redis.ClusterClient); ok {
		b.publish, b.numsub = "SPUBLISH", "SHARDNUMSUB"
	}
	_, b.plainAcquire = client.(*redis.Client)
	b.subs = newSubscriber(client)
	b.batch = newBatcher(client)
	return b
}

// Config is what a Redis store takes from its Locker, given once by
// Bind, before the Locker's first request: the Locker's options. (What the
// store hears goes to its policy, Policy.)
type Config struct {
	// Self is the Locker's id: it names the Locker's grant and wake
	// channels.
	Self string
	// Prefix is the Locker's key prefix.
	Prefix string
	// Retention is the Locker's retention: how long an idle lock's fence
	// counter and queue are kept (unless PermanentFences), and a fire
	// claim record after a claim.
	Retention       time.Duration
	PermanentFences bool
	// TTL is the Locker's lease TTL, which the client's timeouts are
	// checked against (warnSlowClient).
	TTL time.Duration
	// Logger gets the warnings about the clients' settings, and under
	// Redlock about locks that could not be given back.
	Logger *slog.Logger
	// Closing is closed when the Locker's Close begins.
	Closing <-chan struct{}

	// WaitReplicas and WaitTimeout are WithWaitReplicas' arguments (New's
	// store only).
	WaitReplicas int
	WaitTimeout  time.Duration

	// GiveBack hands the Locker's cleaner a lock that a failed
	// acquisition may have taken on some Redlock masters (until: when it
	// has expired; try: one attempt to give it back); it never blocks,
	// and reports false once the cleaner is closed (NewRedlock's store
	// only).
	GiveBack func(key string, until time.Time, try func(context.Context) error) bool
}

// Bind binds b to its Locker (c): before the Locker's first request, once.
// It fails when the client's ReadTimeout would cut WAIT short, or on a
// Cluster when the prefix's hash tag is empty (checkPrefix), and starts
// the checks of the client's settings, which only warn.
func (b *Store) Bind(c Config) error {
	b.self, b.prefix = c.Self, c.Prefix
	b.subs.deliver = b.route
	b.waitReplicas, b.waitTimeout = c.WaitReplicas, c.WaitTimeout
	b.expiry = newKeyExpiry(c.Retention, c.PermanentFences)
	if err := b.names.checkPrefix(c.Prefix); err != nil {
		return err
	}
	if err := b.checkWaitTimeout(); err != nil {
		return err
	}
	warnEviction(c.Logger, []redis.UniversalClient{b.client}, c.Closing)
	warnSlowClient(c.Logger, []redis.UniversalClient{b.client}, c.TTL)
	return nil
}

// Name names the deployment in messages: "Redis" or "Redis Cluster".
func (b *Store) Name() string { return redisName(b.client) }

// ClientClosed reports whether err says that the client was closed
// (store.ClientCloser).
func (b *Store) ClientClosed(err error) bool { return errors.Is(err, redis.ErrClosed) }

// CheckTTL accepts every TTL: Redis keeps a key for whole milliseconds,
// rounded up (millis), never shorter than asked.
func (b *Store) CheckTTL(time.Duration) error { return nil }

// Acquire makes one acquisition attempt (runAcquire). The lease's validity
// counts from the moment before the request leaves (safety.go, "How a
// lease becomes live": Acquisition). renewed changes nothing: each Redis lock expires on its
// own.
func (b *Store) Acquire(ctx context.Context, k store.Key, token string, ttl time.Duration, _ bool) (store.Reply, error) {
	sentAt := time.Now()
	r := b.names.ref(k)
	reply, err := b.runAcquire(ctx, r, token, ttl)
	reply.ValidFrom = sentAt
	if err == nil && reply.Acquired && b.holderInfo != "" {
		_ = describe(ctx, b.client, r.lock, token, b.holderInfo) // never read for safety
	}
	return reply, err
}

// Release deletes the lock if token holds it, handing it to the first
// live fair waiter if one is queued, and notifies waiting Lockers.
func (b *Store) Release(ctx context.Context, k store.Key, token string) (store.Ownership, error) {
	h, err := b.ReleaseHandoff(ctx, k, token, "", 0, false)
	return h.Ownership, err
}

// Renew extends each request's lock if its token still holds it, in one
// round trip (two when a node lost its scripts).
func (b *Store) Renew(ctx context.Context, reqs []store.RenewRequest) []store.RenewResult {
	cmds := make([]*redis.Cmd, len(reqs))
	locks := make([]string, len(reqs))
	pipe := b.client.Pipeline()
	for i, r := range reqs {
		locks[i] = b.names.lockKey(r.Key)
		cmds[i] = renewScript.EvalSha(ctx, pipe, []string{locks[i]}, r.Token, millis(r.TTL))
		if b.holderInfo != "" {
			// The holder info expires with the lock (describe.lua); one
			// of another holder is shown only for its own token.
			pipe.PExpire(ctx, infoKey(locks[i]), r.TTL)
		}
	}
	_, _ = pipe.Exec(ctx) // per-command errors are read below

	// A node that restarted or failed over has no scripts cached: resend
	// those in full, again in one round trip.
	rs := resend{ctx: ctx, client: b.client, retry: true}
	for i, c := range cmds {
		if noScript(c.Err()) {
			r := reqs[i]
			cmds[i] = rs.eval(renewScript, []string{locks[i]}, r.Token, millis(r.TTL))
		}
	}
	rs.send()

	results := make([]store.RenewResult, len(reqs))
	for i, c := range cmds {
		v, err := c.Int64()
		if err != nil {
			results[i].Err = err
			continue
		}
		results[i].Ownership = ownershipOf(v)
	}
	return results
}

// LeftNothing reports that a failed request took nothing: Redis answered
// it with an error, or it never had a connection (mayHaveRun).
func (b *Store) LeftNothing(err error) bool { return !mayHaveRun(err) }

// Close stops the store's subscriber.
func (b *Store) Close() error {
	b.subs.close()
	return nil
}

// FireClaims keeps cronlock's fire claims on this deployment: the same
// record a Scheduler given this client keeps, kept for the Locker's
// retention after each claim (keep).
func (b *Store) FireClaims(prefix string, _, keep time.Duration) fireclaim.Claims {
	return fireclaim.NewRedis(b.client, prefix).WithKeep(keep)
}

// lockKeyOf is the Redis key of k's lock (newLockKeys' first name).
func lockKeyOf(k store.Key) string { return k.Prefix + "{" + k.Name + "}" }

// redisName names a Redis deployment in messages.
func redisName(client redis.UniversalClient) string {
	if _, ok := client.(*redis.ClusterClient); ok {
		return "Redis Cluster"
	}
	return "Redis"
}

// Watch subscribes to k's release notifications (grants false), or to
// the grants for this Locker's fair waiters (grants true; the channel
// lingers, see subscriptionLinger).
func (b *Store) Watch(ctx context.Context, k store.Key, grants bool) error {
	return b.subs.watch(ctx, b.channel(k, grants), grants)
}

func (b *Store) Unwatch(k store.Key, grants bool) { b.subs.unwatch(b.channel(k, grants)) }

// channel names k's release channel, or its grant channel for this Locker.
func (b *Store) channel(k store.Key, grants bool) string {
	if grants {
		return b.names.lockKey(k) + ":g:" + b.self
	}
	return b.names.lockKey(k) + ":n"
}

// route hands a message of the subscriber to the Locker's events: a
// release notification, or a grant ("<token> <fence> <reserved> <entry of
// the waiter next in line>", release.lua and grant.lua).
func (b *Store) route(channel, payload string) {
	if base, ok := strings.CutSuffix(channel, ":n"); ok {
		if k, ok := b.names.keyOf(b.prefix, base); ok {
			b.events.Released(k)
		}
		return
	}
	base, ok := strings.CutSuffix(channel, ":g:"+b.self)
	if !ok {
		return
	}
	k, ok := b.names.keyOf(b.prefix, base)
	if !ok {
		return
	}
	parts := strings.SplitN(payload, " ", 4)
	var g Grant
	var err error
	if len(parts) == 4 {
		g.Token, g.Next = parts[0], parts[3]
		g.Fence, err = strconv.ParseUint(parts[1], 10, 64)
		if err == nil {
			g.Reserved, err = strconv.ParseUint(parts[2], 10, 64)
		}
	}
	b.events.Granted(k, g, len(parts) == 4 && err == nil)
}

// mayHaveRun reports whether a lock-taking request that failed with err
// may run in Redis all the same: it failed without Redis' answer. An error
// reply from Redis (MOVED, TRYAGAIN, READONLY, OOM, ...) means it did not
// run, and a closed client sent nothing. Nor did a request that never had
// a connection: a failed dial or no connection free in the pool (lockmw's
// writes are never re-sent by the client, so the error is that of the only
// attempt, see noretry.go).
// errs.ErrNotReplicated means the lock was taken, and the rollback may not have
// reached Redis.
func mayHaveRun(err error) bool {
	if errors.Is(err, errs.ErrNotReplicated) {
		return true
	}
	var reply redis.Error
	if errors.As(err, &reply) || errors.Is(err, redis.ErrClosed) || errors.Is(err, errs.ErrClosed) {
		return false
	}
	return !neverSent(err)
}

// neverSent reports whether err says that the request found no connection
// to send it on: no connection free in the pool, or a failed dial (Redis
// down: the connection was refused or could not be made); or that the
// batcher failed it unsent, behind an earlier request that timed out
// (notSentError). go-redis (v9)
// also fails every command of a pool at once with the pool's last dial
// error, without dialing, once as many dials as the pool has connections
// have failed, until a probe of its own (once a second) gets through: that
// is a failed dial too, and nothing was sent either.
func neverSent(err error) bool {
	var notSent *notSentError
	return errors.As(err, &notSent) || dialFailed(err) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted)
}

// dialFailed reports whether err is a failed dial, or go-redis replaying
// one (see neverSent).
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// RaiseFence raises k's fence counter to the server's clock in
// microseconds (clock_fence.lua), above every fence drawn before on this
// deployment (store.FenceRaiser). A raise that runs twice raises no more,
// so the client may retry it.
func (b *Store) RaiseFence(ctx context.Context, k store.Key) error {
	r := newLockRef(k.Prefix, k.Name)
	return b.whileSlotMoves(ctx, reshardPatience, func() error {
		return clockFenceScript.Run(ctx, b.client, []string{r.lock, r.fence}, b.expiry.counter).Err()
	})
}
