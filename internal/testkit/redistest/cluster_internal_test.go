package redistest

import (
	"context"
	"net"
	"sync"
	"testing"
)

// A node whose cluster bus port is taken starts on new ports: the bus port
// is chosen again with the client port on every attempt.
func TestClusterRetriesATakenBusPort(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port

	var mu sync.Mutex
	handed := 0
	pickBus := func() (int, error) {
		mu.Lock()
		defer mu.Unlock()
		if handed == 0 {
			handed++
			return taken, nil
		}
		return freePort()
	}
	c := StartCluster(t, func(c *config) { c.pickBusPort = pickBus })
	if err := c.Client(t).Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET on the cluster: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if handed != 1 {
		t.Fatalf("the taken bus port was handed out %d times, want 1", handed)
	}
	for _, m := range c.Masters() {
		if m.Addr() == l.Addr().String() {
			t.Fatalf("a node claims the taken port %s", m.Addr())
		}
	}
}
