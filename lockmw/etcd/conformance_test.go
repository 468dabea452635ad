package etcd_test

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockmw/lockmw/internal/testkit/conformance"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd"
	"github.com/lockmw/lockmw/lockmw/etcd/internal/etcdtest"
)

// The conformance suite (internal/testkit/conformance) against a single etcd
// member and a three-member cluster.

func TestConformanceEtcd(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	runConformance(t, "etcd", srv.Cluster())
}

func TestConformanceEtcdCluster(t *testing.T) {
	t.Parallel()
	runConformance(t, "etcd-cluster", etcdtest.StartCluster(t, 3))
}

func runConformance(t *testing.T, name string, c *etcdtest.Cluster) {
	admin := c.Client(t)
	each := func(do func(*etcdtest.Server, testing.TB)) func(testing.TB) {
		return func(t testing.TB) {
			for _, m := range c.Members() {
				do(m, t)
			}
		}
	}
	conformance.Run(t, conformance.Store{
		Name: name,
		NewLocker: func(t testing.TB, opts ...lockmw.Option) (*lockmw.Locker, error) {
			return etcd.New(c.Client(t), opts...)
		},
		NewCuttableLocker: func(t testing.TB, opts ...lockmw.Option) (*lockmw.Locker, func(testing.TB), func(testing.TB), error) {
			var proxies []*etcdtest.Proxy
			var eps []string
			for _, m := range c.Members() {
				p := etcdtest.StartProxy(t, m)
				proxies = append(proxies, p)
				eps = append(eps, p.Addr())
			}
			all := func(do func(*etcdtest.Proxy, testing.TB)) func(testing.TB) {
				return func(t testing.TB) {
					for _, p := range proxies {
						do(p, t)
					}
				}
			}
			l, err := etcd.New(c.Client(t, func(cfg *clientv3.Config) { cfg.Endpoints = eps }), opts...)
			return l, all((*etcdtest.Proxy).Cut), all((*etcdtest.Proxy).Heal), err
		},
		Pause:  each((*etcdtest.Server).Pause),
		Resume: each((*etcdtest.Server).Resume),
		Kill:   each((*etcdtest.Server).Kill),
		// Members restart together: one alone has no quorum, and
		// Restart waits for it to answer.
		Restart: func(t testing.TB) {
			var wg sync.WaitGroup
			for _, m := range c.Members() {
				wg.Go(func() { m.Restart(t) })
			}
			wg.Wait()
		},
		Leftovers: func(t testing.TB, key string) []string {
			var out []string
			for _, e := range entries(t, admin, key) {
				out = append(out, e.key)
			}
			return out
		},
		Fair:                 true,
		QueuesDefaultWaiters: true,
		Queued:               func(t testing.TB, key string) int { return max(len(entries(t, admin, key))-1, 0) },
		Notifies:             true,
		Requests: func(t testing.TB) int64 {
			var n int64
			for _, m := range c.Members() {
				n += served(t, m)
			}
			return n
		},
		MinTTL: etcd.MinTTL,
		// etcd keeps no time (Since), nor the mode of a queue entry
		// (FairWaiters); TimeToLive cuts the TTL to whole seconds, so the
		// store reports the bound above it (package doc, "Inspecting").
		Inspects: &conformance.Inspects{
			TTL:     lockmw.AtMost,
			Fence:   lockmw.Exact,
			Holder:  lockmw.Exact,
			Waiters: lockmw.Exact,
		},
	})
}

// served is how many gRPC messages member m has received (unary requests,
// watch creations and cancellations, lease keepalives), from its /metrics.
func served(t testing.TB, m *etcdtest.Server) int64 {
	t.Helper()
	var n int64
	for _, v := range received(t, m) {
		n += v
	}
	return n
}

// servedBesidesRenewals is served without lease keepalives, which the
// Lockers send by the clock (a third of the TTL), however slowly a loaded
// machine runs a test: what a test that counts the requests of hand-overs
// counts.
func servedBesidesRenewals(t testing.TB, m *etcdtest.Server) int64 {
	t.Helper()
	var n int64
	for method, v := range received(t, m) {
		if method != "LeaseKeepAlive" {
			n += v
		}
	}
	return n
}

// received is how many gRPC messages member m has received, by method
// ("Range", "Txn", "Watch", "LeaseKeepAlive"...), from its /metrics.
func received(t testing.TB, m *etcdtest.Server) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, m.Endpoint()+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("reading %s's metrics: %v", m.Name(), err)
	}
	defer resp.Body.Close()
	n := make(map[string]int64)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		labels, ok := strings.CutPrefix(line, "grpc_server_msg_received_total{")
		if !ok {
			continue
		}
		_, method, _ := strings.Cut(labels, `grpc_method="`)
		method, _, _ = strings.Cut(method, `"`)
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			n[method] += int64(v)
		}
	}
	return n
}
