//go:build unix

package redistest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

// keysOnEachMaster returns, for each master index, a key whose slot that
// master serves.
func keysOnEachMaster(t *testing.T, c *redistest.Cluster) []string {
	t.Helper()
	keys := make([]string, len(c.Masters()))
	found := 0
	for i := 0; found < len(keys); i++ {
		k := fmt.Sprintf("key:%d", i)
		if o := c.Owner(c.Slot(t, k)); keys[o] == "" {
			keys[o] = k
			found++
		}
	}
	return keys
}

// The cluster serves every slot, each key lives on the master Owner names,
// and the other masters redirect with MOVED to it.
func TestClusterStartsHealthyAndShardsKeys(t *testing.T) {
	c := redistest.StartCluster(t)
	ctx := context.Background()
	rc := c.Client(t)
	keys := keysOnEachMaster(t, c)
	for _, k := range keys {
		if err := rc.Set(ctx, k, "v:"+k, 0).Err(); err != nil {
			t.Fatalf("SET %s through the cluster client: %v", k, err)
		}
	}
	for i, srv := range c.Masters() {
		node := srv.Client(t)
		info, err := node.ClusterInfo(ctx).Result()
		if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_assigned:16384") {
			t.Fatalf("master %d CLUSTER INFO: %v\n%s", i, err, info)
		}
		for owner, k := range keys {
			v, err := node.Get(ctx, k).Result()
			switch {
			case owner == i && (err != nil || v != "v:"+k):
				t.Errorf("master %d, which serves %s: GET = %q, %v", i, k, v, err)
			case owner != i && !strings.HasPrefix(fmt.Sprint(err), "MOVED"):
				t.Errorf("master %d, which does not serve %s: GET = %q, %v; want a MOVED redirection", i, k, v, err)
			}
		}
		if id := c.NodeID(i); len(id) != 40 {
			t.Errorf("NodeID(%d) = %q, want a 40-character node id", i, id)
		}
	}
}

// A slot migration moves the slot's keys and ownership; the cluster client
// follows the ASK and MOVED redirections at every step.
func TestClusterMigrateSlotStepByStep(t *testing.T) {
	c := redistest.StartCluster(t)
	ctx := context.Background()
	rc := c.Client(t)
	const key = "{migrating}:a"
	if err := rc.Set(ctx, key, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	slot := c.Slot(t, key)
	from := c.Owner(slot)
	to := (from + 1) % 3
	src, dst := c.Masters()[from].Client(t), c.Masters()[to].Client(t)

	m := c.BeginMigration(t, slot, to)
	// A new key of a migrating slot goes to the target (ASK).
	if err := rc.Set(ctx, "{migrating}:b", "2", 0).Err(); err != nil {
		t.Fatalf("SET of a new key during the migration: %v", err)
	}
	if n := m.MoveKeys(t); n != 1 {
		t.Errorf("MoveKeys moved %d keys, want 1 (the key on the source)", n)
	}
	if n, _ := src.Exists(ctx, key).Result(); n != 0 {
		t.Errorf("the source still has %s after MoveKeys", key)
	}
	if v, err := rc.Get(ctx, key).Result(); err != nil || v != "1" {
		t.Fatalf("GET %s between MoveKeys and Finish = %q, %v", key, v, err)
	}
	m.Finish(t)
	if got := c.Owner(slot); got != to {
		t.Fatalf("Owner(%d) = %d after Finish, want %d", slot, got, to)
	}
	if err := src.Get(ctx, key).Err(); !strings.HasPrefix(fmt.Sprint(err), "MOVED") {
		t.Errorf("GET on the source after Finish: %v, want MOVED", err)
	}
	for k, want := range map[string]string{key: "1", "{migrating}:b": "2"} {
		if v, err := dst.Get(ctx, k).Result(); err != nil || v != want {
			t.Errorf("GET %s on the target after Finish = %q, %v; want %q", k, v, err, want)
		}
		if v, err := rc.Get(ctx, k).Result(); err != nil || v != want {
			t.Errorf("GET %s through the cluster client after Finish = %q, %v; want %q", k, v, err, want)
		}
	}
}

// A restarted master keeps its node id and slots, loses its keys, and
// serves again once WaitHealthy returns.
func TestClusterRestartedMasterRejoins(t *testing.T) {
	c := redistest.StartCluster(t)
	ctx := context.Background()
	rc := c.Client(t, func(o *redis.ClusterOptions) { o.MaxRedirects = 8 })
	keys := keysOnEachMaster(t, c)
	for _, k := range keys {
		if err := rc.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	id := c.NodeID(1)
	c.Masters()[1].Restart(t)
	c.WaitHealthy(t)
	if got, err := c.Masters()[1].Client(t).ClusterMyID(ctx).Result(); err != nil || got != id {
		t.Fatalf("restarted master's id = %q, %v; want %q", got, err, id)
	}
	for i, k := range keys {
		n, err := rc.Exists(ctx, k).Result()
		if err != nil {
			t.Fatalf("EXISTS %s: %v", k, err)
		}
		if want := map[bool]int64{true: 0, false: 1}[i == 1]; n != want {
			t.Errorf("EXISTS %s (master %d) = %d after restarting master 1, want %d", k, i, n, want)
		}
	}
	if err := rc.Set(ctx, keys[1], "again", 0).Err(); err != nil {
		t.Errorf("SET on the restarted master's slot: %v", err)
	}
}

// With WithClusterReplicas each master has a replica in sync: a write that
// WAIT reports acknowledged can be read on that master's replica.
func TestClusterWithReplicas(t *testing.T) {
	c := redistest.StartCluster(t, redistest.WithClusterReplicas(1))
	ctx := context.Background()
	for i, k := range keysOnEachMaster(t, c) {
		master := c.Masters()[i].Client(t)
		if err := master.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatalf("SET %s on master %d: %v", k, i, err)
		}
		if n, err := master.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
			t.Fatalf("WAIT 1 on master %d = %d, %v", i, n, err)
		}
		if len(c.Replicas(i)) != 1 {
			t.Fatalf("master %d has %d replicas, want 1", i, len(c.Replicas(i)))
		}
		replica := c.Replicas(i)[0].Client(t, func(o *redis.Options) {
			o.OnConnect = func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() }
		})
		if v, err := replica.Get(ctx, k).Result(); err != nil || v != "v" {
			t.Errorf("GET %s on master %d's replica = %q, %v", k, i, v, err)
		}
	}
}
