package zookeeper

import (
	"context"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/zktest"
	"github.com/lockmw/lockmw/lockmw"
)

// claimsOn returns a Locker's store on servers, with ClaimRetention, and
// its claims.
func claimsOn(t *testing.T, servers []string, retention time.Duration) (*zkStore, *claims) {
	t.Helper()
	cfg := Config{Servers: servers, TickTime: zktest.TickTime, ConnectTimeout: 20 * time.Second, ClaimRetention: retention}
	l, s, err := newLocker(cfg, []lockmw.Option{lockmw.WithTTL(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return s, s.FireClaims(lockmw.DefaultPrefix, time.Second, lockmw.DefaultRetention).(*claims)
}

// On servers with TTL nodes, a job's claim and run records are TTL nodes:
// refused claims while they live, gone once unwritten for ClaimRetention.
func TestClaimRecordsExpireOnTTLNodes(t *testing.T) {
	t.Parallel()
	e := zktest.StartWith(t, 1, zktest.Options{ExtendedTypes: true})
	adm := adminConn(t, e.Addrs()...)
	s, c := claimsOn(t, e.Addrs(), 2*time.Second)
	ctx := context.Background()
	at := time.Now().Truncate(time.Millisecond)
	if cl, err := c.Claim(ctx, "ttl-job", at, "a"); err != nil || !cl.Won {
		t.Fatalf("first claim: %+v, %v", cl, err)
	}
	if err := c.Running(ctx, "ttl-job", at, "a"); err != nil {
		t.Fatal(err)
	}
	if cl, err := c.Claim(ctx, "ttl-job", at, "b"); err != nil || cl.Won {
		t.Fatalf("second claim of the fire: %+v, %v; want refused", cl, err)
	}
	paths := []string{c.claimPath("ttl-job"), c.runPath("ttl-job")}
	for _, p := range paths {
		// The stat does not tell a TTL node (its owner reads 0): the
		// wait below does.
		if ok, _, err := adm.Exists(p); err != nil || !ok {
			t.Fatalf("record %s: exists %v, %v", p, ok, err)
		}
	}
	waitUntil(t, 60*time.Second, "the job's records gone after the retention", func() bool {
		for _, p := range paths {
			if ok, _, err := adm.Exists(p); err != nil || ok {
				return false
			}
		}
		return true
	})
	s.mu.Lock()
	noTTL := s.noTTL
	s.mu.Unlock()
	if noTTL {
		t.Fatal("the store took the servers for ones without TTL nodes")
	}
}

// On servers without TTL nodes (ZooKeeper's default), the records are
// persistent nodes, and claims work as before.
func TestClaimRecordsPersistWithoutTTLNodes(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	adm := adminConn(t, srv.Addr())
	s, c := claimsOn(t, []string{srv.Addr()}, 0)
	ctx := context.Background()
	at := time.Now().Truncate(time.Millisecond)
	if cl, err := c.Claim(ctx, "plain-job", at, "a"); err != nil || !cl.Won {
		t.Fatalf("first claim: %+v, %v", cl, err)
	}
	if cl, err := c.Claim(ctx, "plain-job", at, "b"); err != nil || cl.Won {
		t.Fatalf("second claim of the fire: %+v, %v; want refused", cl, err)
	}
	ok, st, err := adm.Exists(c.claimPath("plain-job"))
	if err != nil || !ok || st.EphemeralOwner != 0 {
		t.Fatalf("claim record: exists %v, %v; want a persistent node", ok, err)
	}
	s.mu.Lock()
	noTTL := s.noTTL
	s.mu.Unlock()
	if !noTTL {
		t.Fatal("the store did not notice the servers have no TTL nodes")
	}
}
