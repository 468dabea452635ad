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
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

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
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
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

	fmt.Println("== Act 1: two instances take turns, in arrival order")
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i, l := range lockers {
		wg.Go(func() {
			for range 3 {
				err := l.Do(ctx, "report:daily", func(ctx context.Context) error {
					lease := ctx // the lease context: it ends if the lock is lost
					fmt.Printf("instance-%c holds report:daily\n", 'a'+i)
					select {
					case <-time.After(50 * time.Millisecond):
						return nil
					case <-lease.Done():
						return context.Cause(lease)
					}
				}, lockmw.Fair(), lockmw.WithWait(30*time.Second))
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}

	fmt.Println()
	fmt.Println("== Act 2: a lease without renewal expires, and its holder notices first")
	a, b := lockers[0], lockers[1]
	lease, err := a.Acquire(ctx, "payment:7", lockmw.WithLeaseTTL(2*time.Second), lockmw.WithoutWatchdog())
	if err != nil {
		return err
	}
	fmt.Printf("instance-a holds payment:7 (fence %d, 2s lease, no watchdog)\n", lease.Fence())
	next, err := b.Acquire(ctx, "payment:7", lockmw.WithWait(30*time.Second))
	if err != nil {
		return err
	}
	defer next.Release(ctx)
	select {
	case <-lease.Context().Done():
		fmt.Printf("instance-a's lease context ended before instance-b got the lock: %v\n", context.Cause(lease.Context()))
	default:
		return errors.New("instance-b got the lock while instance-a's lease was live")
	}
	fmt.Printf("instance-b holds payment:7 with fence %d > %d: a store fencing writes rejects instance-a's\n", next.Fence(), lease.Fence())
	if err := lease.Release(ctx); errors.Is(err, lockmw.ErrLost) {
		fmt.Println("instance-a's Release says:", err)
	}
	return nil
}
