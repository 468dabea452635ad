// Command zookeeper shows lockmw on ZooKeeper: two instances (separate clients, as
// two processes would have) take turns on one lock in arrival order
// (Fair), each holding with a fence that rises from one holder to the
// next; then a holder whose lease is not renewed learns through its lease
// context that the lock expired, before the other instance takes over.
//
// It needs a running ZooKeeper, named by ZK_SERVERS (comma-separated):
//
//	# Debian: apt-get install zookeeper (zookeeperd runs it as a service)
//	printf 'tickTime=2000\ndataDir=/tmp/lockmw-zk\nclientPort=2181\nadmin.enableServer=false\n' > /tmp/zoo.cfg
//	java -cp /usr/share/java/zookeeper.jar org.apache.zookeeper.server.quorum.QuorumPeerMain /tmp/zoo.cfg &
//	ZK_SERVERS=localhost:2181 go run ./examples/zookeeper
//
// The example is a module of its own, listed in the repository's go.work,
// so that the lockmw module does not depend on go-zookeeper.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/lockmw/lockmw/examples/internal/demo"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/zookeeper"
)

func main() {
	servers := os.Getenv("ZK_SERVERS")
	if servers == "" {
		fmt.Fprint(os.Stderr, `ZK_SERVERS is not set: this example needs a running ZooKeeper.
Start one (Debian: apt-get install zookeeper), for example:

	printf 'tickTime=2000\ndataDir=/tmp/lockmw-zk\nclientPort=2181\nadmin.enableServer=false\n' > /tmp/zoo.cfg
	java -cp /usr/share/java/zookeeper.jar org.apache.zookeeper.server.quorum.QuorumPeerMain /tmp/zoo.cfg &
	ZK_SERVERS=localhost:2181 go run ./examples/zookeeper
`)
		os.Exit(2)
	}
	if err := run(strings.Split(servers, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "examples/zookeeper:", err)
		os.Exit(1)
	}
}

func run(servers []string) error {
	logger := demo.Logger()
	ctx := context.Background()
	var lockers []*lockmw.Locker
	for range 2 {
		// Each Locker dials its own session, as a separate process would.
		l, err := zookeeper.New(zookeeper.Config{Servers: servers}, lockmw.WithTTL(5*time.Second), lockmw.WithLogger(logger))
		if err != nil {
			return err
		}
		defer l.Close()
		lockers = append(lockers, l)
	}
	return demo.Run(ctx, lockers[0], lockers[1])
}
