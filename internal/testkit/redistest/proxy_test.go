//go:build unix

package redistest_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

// proxiedClient is a client through p that gives up after 200ms.
func proxiedClient(t *testing.T, p *redistest.Proxy) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: p.Addr(), DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond,
		MaxRetries: -1,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// healed waits until commands through c work again.
func healed(t *testing.T, c *redis.Client) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("PING through the healed proxy still fails: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Latency beyond the client's ReadTimeout, a cut link and reset
// connections each break commands through the proxy in their own way, while
// the server stays reachable directly; Heal restores the link.
func TestProxyFaults(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		inject func(*redistest.Proxy, testing.TB)
		check  func(error) bool
	}{
		{"latency", func(p *redistest.Proxy, t testing.TB) { p.AddLatency(t, time.Second) }, isTimeout},
		{"cut", (*redistest.Proxy).Cut, isTimeout},
		{"reset", (*redistest.Proxy).ResetConnections, func(err error) bool { return err != nil && !isTimeout(err) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := redistest.StartProxy(t, srv.Addr())
			c := proxiedClient(t, p)
			if err := c.Set(ctx, "k", tc.name, 0).Err(); err != nil {
				t.Fatalf("SET through the proxy: %v", err)
			}
			tc.inject(p, t)
			err := c.Get(ctx, "k").Err()
			if !tc.check(err) {
				t.Fatalf("GET through the %s proxy: %v", tc.name, err)
			}
			if v, err := direct.Get(ctx, "k").Result(); err != nil || v != tc.name {
				t.Fatalf("GET on the server directly = %q, %v", v, err)
			}
			p.Heal(t)
			healed(t, c)
			if v, err := c.Get(ctx, "k").Result(); err != nil || v != tc.name {
				t.Fatalf("GET through the healed proxy = %q, %v", v, err)
			}
		})
	}
}
