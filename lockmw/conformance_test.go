package lockmw_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/conformance"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// The conformance suite (internal/testkit/conformance) against the three Redis
// deployments New and NewRedlock support. Each store runs on servers of
// its own, so the three run in parallel.

func TestConformanceRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	conformance.Run(t, conformance.Store{
		Name:     "redis",
		Inspects: &redisInspects,
		NewLocker: func(t testing.TB, opts ...lockmw.Option) (*lockmw.Locker, error) {
			return lockmw.New(srv.Client(t, fastFailing, dialOnce, roomy), opts...)
		},
		NewCuttableLocker: func(t testing.TB, opts ...lockmw.Option) (*lockmw.Locker, func(testing.TB), func(testing.TB), error) {
			p := redistest.StartProxy(t, srv.Addr())
			l, err := lockmw.New(proxiedClient(t, p), opts...)
			return l, p.Cut, p.Heal, err
		},
		Pause:         srv.Pause,
		Resume:        srv.Resume,
		Kill:          srv.Kill,
		Restart:       srv.Restart,
		KillLosesData: true,
		// Counters lost in the restart are seeded from the server clock.
		FencesRiseAfterDataLoss: true,
		Leftovers: func(t testing.TB, key string) []string {
			return redisLeftovers(t, admin, []*redis.Client{admin}, key, false)
		},
		Fair:                 true,
		Queued:               func(t testing.TB, key string) int { return queued(t, admin, key) },
		QueuesDefaultWaiters: true,
		Notifies:             true,
		Requests:             func(t testing.TB) int64 { return requests(t, admin) },
	})
}

func TestConformanceRedisCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	admin := cl.Client(t)
	var masters []*redis.Client
	for _, m := range cl.Masters() {
		masters = append(masters, m.Client(t))
	}
	each := func(do func(*redistest.Server, testing.TB)) func(testing.TB) {
		return func(t testing.TB) {
			for _, m := range cl.Masters() {
				do(m, t)
			}
		}
	}
	conformance.Run(t, conformance.Store{
		Name:     "redis-cluster",
		Inspects: &redisInspects,
		NewLocker: func(t testing.TB, opts ...lockmw.Option) (*lockmw.Locker, error) {
			return lockmw.New(cl.Client(t, fastFailingCluster, roomyCluster), opts...)
		},
		NewCuttableLocker: func(t testing.TB, opts ...lockmw.Option) (*lockmw.Locker, func(testing.TB), func(testing.TB), error) {
			// Every node address the cluster client learns is dialed
			// through a proxy of this Locker's own.
			proxies := map[string]*redistest.Proxy{}
			for _, addr := range cl.Addrs() {
				proxies[addr] = redistest.StartProxy(t, addr)
			}
			c := cl.Client(t, fastFailingCluster, roomyCluster, func(o *redis.ClusterOptions) {
				var d net.Dialer
				o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
					if p, ok := proxies[addr]; ok {
						addr = p.Addr()
					}
					return d.DialContext(ctx, network, addr)
				}
			})
			all := func(do func(*redistest.Proxy, testing.TB)) func(testing.TB) {
				return func(t testing.TB) {
					for _, p := range proxies {
						do(p, t)
					}
				}
			}
			l, err := lockmw.New(c, opts...)
			return l, all((*redistest.Proxy).Cut), all((*redistest.Proxy).Heal), err
		},
		Pause:  each((*redistest.Server).Pause),
		Resume: each((*redistest.Server).Resume),
		Kill:   each((*redistest.Server).Kill),
		Restart: func(t testing.TB) {
			each((*redistest.Server).Restart)(t)
			cl.WaitHealthy(t)
		},
		KillLosesData: true,
		// Counters lost in the restart are seeded from the server clock.
		FencesRiseAfterDataLoss: true,
		Leftovers: func(t testing.TB, key string) []string {
			return redisLeftovers(t, admin, masters, key, true)
		},
		Fair: true,
		Queued: func(t testing.TB, key string) int {
			n, err := admin.LLen(context.Background(), clusterLockKey(key)+":q").Result()
			if err != nil {
				t.Fatalf("LLEN of the queue of %q: %v", key, err)
			}
			return int(n)
		},
		QueuesDefaultWaiters: true,
		Notifies:             true,
		Requests: func(t testing.TB) int64 {
			var n int64
			for _, m := range masters {
				n += requests(t, m)
			}
			return n
		},
	})
}

func TestConformanceRedlock(t *testing.T) {
	t.Parallel()
	masters := redistest.StartN(t, 3)
	var admins []*redis.Client
	for _, m := range masters {
		admins = append(admins, m.Client(t))
	}
	each := func(do func(*redistest.Server, testing.TB)) func(testing.TB) {
		return func(t testing.TB) {
			for _, m := range masters {
				do(m, t)
			}
		}
	}
	conformance.Run(t, conformance.Store{
		Name:     "redlock",
		Inspects: &redisInspects,
		NewLocker: func(t testing.TB, opts ...lockmw.Option) (*lockmw.Locker, error) {
			return lockmw.NewRedlock(redlockClients(t, masters, fastFailing, dialOnce, roomy), opts...)
		},
		NewCuttableLocker: func(t testing.TB, opts ...lockmw.Option) (*lockmw.Locker, func(testing.TB), func(testing.TB), error) {
			var proxies []*redistest.Proxy
			var clients []redis.UniversalClient
			for _, m := range masters {
				p := redistest.StartProxy(t, m.Addr())
				proxies = append(proxies, p)
				clients = append(clients, proxiedClient(t, p))
			}
			all := func(do func(*redistest.Proxy, testing.TB)) func(testing.TB) {
				return func(t testing.TB) {
					for _, p := range proxies {
						do(p, t)
					}
				}
			}
			l, err := lockmw.NewRedlock(clients, opts...)
			return l, all((*redistest.Proxy).Cut), all((*redistest.Proxy).Heal), err
		},
		Pause:         each((*redistest.Server).Pause),
		Resume:        each((*redistest.Server).Resume),
		Kill:          each((*redistest.Server).Kill),
		Restart:       each((*redistest.Server).Restart),
		KillLosesData: true,
		// Counters lost in the restart are seeded from the server clock.
		FencesRiseAfterDataLoss: true,
		Notifies:                true,
		Leftovers: func(t testing.TB, key string) []string {
			var out []string
			for i, a := range admins {
				for _, l := range redisLeftovers(t, a, nil, key, false) {
					out = append(out, "master "+strconv.Itoa(i)+": "+l)
				}
			}
			return out
		},
		Requests: func(t testing.TB) int64 {
			var n int64
			for _, a := range admins {
				n += requests(t, a)
			}
			return n
		},
	})
}

// proxiedClient returns a fast-failing client to Redis through p, closed at
// cleanup.
func proxiedClient(t testing.TB, p *redistest.Proxy) *redis.Client {
	o := &redis.Options{Addr: p.Addr()}
	fastFailing(o)
	dialOnce(o)
	roomy(o)
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roomy gives the conformance Lockers' clients 600 ms timeouts instead of
// fastFailing's 200 ms: still under a third of the lost-lock subtests' 2 s
// TTL, so a dead or frozen server fails a call quickly, but room for a
// loaded machine, where 200 ms dials timed out in subtests without any
// fault (Exclusion on the cluster: ErrUnavailable, "dial tcp: i/o timeout").
func roomy(o *redis.Options) {
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 600*time.Millisecond, 600*time.Millisecond, 600*time.Millisecond
}

// roomyCluster is roomy for a cluster client.
func roomyCluster(o *redis.ClusterOptions) {
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 600*time.Millisecond, 600*time.Millisecond, 600*time.Millisecond
}

// fastFailingCluster makes a cluster client give up quickly on a dead or
// frozen node, as fastFailing does for one server.
func fastFailingCluster(o *redis.ClusterOptions) {
	o.DialTimeout = 200 * time.Millisecond
	o.ReadTimeout = 200 * time.Millisecond
	o.WriteTimeout = 200 * time.Millisecond
	o.MaxRetries = -1
	o.DialerRetries = 1
}

// redisLeftovers lists what c (through which key's commands are routed)
// keeps for lock key under the default prefix: the lock, the fair queue,
// and subscriptions to the key's channels on subs (sharded ones, and a
// Cluster's names, when sharded). The fence counter is not a leftover.
func redisLeftovers(t testing.TB, c redis.Cmdable, subs []*redis.Client, key string, sharded bool) []string {
	t.Helper()
	ctx := context.Background()
	lk := lockKey(key)
	if sharded {
		lk = clusterLockKey(key)
	}
	var out []string
	for _, k := range []string{lk, lk + ":q"} {
		n, err := c.Exists(ctx, k).Result()
		if err != nil {
			t.Fatalf("EXISTS %s: %v", k, err)
		}
		if n > 0 {
			out = append(out, "key "+k)
		}
	}
	pattern := globEscape(lk) + ":*"
	for _, s := range subs {
		var chans []string
		var err error
		if sharded {
			chans, err = s.PubSubShardChannels(ctx, pattern).Result()
		} else {
			chans, err = s.PubSubChannels(ctx, pattern).Result()
		}
		if err != nil {
			t.Fatalf("PUBSUB CHANNELS %s: %v", pattern, err)
		}
		for _, ch := range chans {
			out = append(out, "subscription "+ch)
		}
	}
	return out
}

// globEscape escapes the characters Redis glob patterns treat specially.
func globEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`).Replace(s)
}

// queued returns how many Fair waiters are queued for key.
func queued(t testing.TB, c redis.Cmdable, key string) int {
	t.Helper()
	n, err := c.LLen(context.Background(), queueKey(key)).Result()
	if err != nil {
		t.Fatalf("LLEN %s: %v", queueKey(key), err)
	}
	return int(n)
}

// requests returns how many commands c's server has processed.
func requests(t testing.TB, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatalf("INFO stats: %v", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("total_commands_processed %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatal("INFO stats has no total_commands_processed")
	return 0
}

// redisInspects is what Inspect reports on every Redis deployment
// (lockmw/internal/redisstore/inspect.go): the fence counter, which a
// grant may move one past the holder's fence (AtMost); holder info and
// the time it was written, from the server's clock; the queue's entries.
var redisInspects = conformance.Inspects{
	TTL: lockmw.Exact, Fence: lockmw.AtMost, Holder: lockmw.Exact,
	Since: lockmw.Unknown, SinceWithInfo: lockmw.Exact,
	Waiters: lockmw.Exact, FairWaiters: lockmw.Unknown,
}
