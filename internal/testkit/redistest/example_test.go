//go:build unix

package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// This example is compiled but not run: it needs the *testing.T of a real
// test, here a placeholder.
func ExampleStart() {
	var t *testing.T // in a real test: func TestX(t *testing.T) { ... }
	ctx := context.Background()

	srv := redistest.Start(t, redistest.WithArgs("--maxmemory", "10mb"))
	rdb := srv.Client(t, func(o *redis.Options) {
		o.ReadTimeout = 200 * time.Millisecond
		o.MaxRetries = -1
	})
	if err := rdb.Set(ctx, "lock", "owner-1", time.Second).Err(); err != nil {
		t.Fatal(err)
	}

	// A paused server keeps its sockets but answers nothing: the client
	// sees a read timeout, not a connection error.
	srv.Pause(t)
	if err := rdb.Get(ctx, "lock").Err(); err == nil {
		t.Fatal("GET on a paused server succeeded")
	}
	srv.Resume(t)

	// A killed server loses everything; after Restart it is empty again,
	// on the same address.
	srv.Kill(t)
	srv.Restart(t)
	if n := rdb.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("DBSIZE after restart = %d", n)
	}
	t.Log(srv.Info(t, "stats")["total_commands_processed"])
}

// StartN gives independent servers, e.g. for a Redlock-style quorum.
func ExampleStartN() {
	var t *testing.T // in a real test: func TestX(t *testing.T) { ... }
	servers := redistest.StartN(t, 3)
	clients := make([]*redis.Client, len(servers))
	for i, s := range servers {
		clients[i] = s.Client(t)
	}
	_ = clients
}

// A master, a replica in sync with it, and three Sentinels that know each
// other: killing the master makes them promote the replica.
func ExampleStartSentinels() {
	var t *testing.T // in a real test: func TestX(t *testing.T) { ... }
	master := redistest.Start(t)
	replica := redistest.Start(t, redistest.WithReplicaOf(master))
	sentinels := redistest.StartSentinels(t, 3, "mymaster", master, 2)
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "mymaster",
		SentinelAddrs: []string{sentinels[0].Addr(), sentinels[1].Addr(), sentinels[2].Addr()},
	})
	defer rdb.Close()

	master.Kill(t)
	deadline := time.Now().Add(15 * time.Second)
	for sentinels[0].MasterAddr(t) != replica.Addr() {
		if time.Now().After(deadline) {
			t.Fatal("no failover")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// rdb now reaches the promoted replica (after go-redis switches).
}

// A three-master Redis Cluster; moving the slot of a key while a client
// uses it, and restarting a master.
func ExampleStartCluster() {
	var t *testing.T // in a real test: func TestX(t *testing.T) { ... }
	ctx := context.Background()
	cluster := redistest.StartCluster(t)
	rdb := cluster.Client(t) // a *redis.ClusterClient seeded with cluster.Addrs()
	if err := rdb.Set(ctx, "{user:1}:name", "ada", 0).Err(); err != nil {
		t.Fatal(err)
	}

	slot := cluster.Slot(t, "{user:1}:name")
	m := cluster.BeginMigration(t, slot, (cluster.Owner(slot)+1)%3)
	m.MoveKeys(t) // the client now follows ASK redirections
	m.Finish(t)   // ... and then MOVED

	cluster.Masters()[0].Restart(t)
	cluster.WaitHealthy(t)
}

// A proxy between a client and its server cuts the link while the server
// keeps running.
func ExampleStartProxy() {
	var t *testing.T // in a real test: func TestX(t *testing.T) { ... }
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 200 * time.Millisecond})
	defer rdb.Close()

	proxy.AddLatency(t, 50*time.Millisecond) // every reply 50ms late
	proxy.Cut(t)                             // nothing gets through: timeouts
	proxy.Heal(t)                            // back to normal
}
