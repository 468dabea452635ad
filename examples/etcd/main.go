// Command etcd shows lockmw on etcd: two instances (separate clients, as
// two processes would have) take turns on one lock in arrival order
// (Fair), each holding with a fence that rises from one holder to the
// next; then a holder whose lease is not renewed learns through its lease
// context that the lock expired, before the other instance takes over.
//
// It needs a running etcd, named by ETCD_ENDPOINTS (comma-separated):
//
//	etcd --data-dir /tmp/lockmw-etcd &    # Debian: apt-get install etcd-server
//	ETCD_ENDPOINTS=localhost:2379 go run ./examples/etcd
//
// The example is a module of its own, listed in the repository's go.work,
// so that the lockmw module does not depend on the etcd client.
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

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd"
)

func main() {
	eps := os.Getenv("ETCD_ENDPOINTS")
	if eps == "" {
		fmt.Fprint(os.Stderr, `ETCD_ENDPOINTS is not set: this example needs a running etcd.
Start one (Debian: apt-get install etcd-server; or a release from
https://github.com/etcd-io/etcd/releases), for example:

	etcd --data-dir /tmp/lockmw-etcd &
	ETCD_ENDPOINTS=localhost:2379 go run ./examples/etcd
`)
		os.Exit(2)
	}
	if err := run(strings.Split(eps, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "examples/etcd:", err)
		os.Exit(1)
	}
}

func run(endpoints []string) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	ctx := context.Background()
	var lockers []*lockmw.Locker
	for range 2 {
		cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer cli.Close()
		l, err := etcd.New(cli, lockmw.WithTTL(5*time.Second), lockmw.WithLogger(logger))
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
