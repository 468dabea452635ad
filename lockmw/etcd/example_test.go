package etcd_test

import (
	"context"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd"
)

// A Locker on etcd: the lease's Context ends if the lock is lost, and its
// Fence rises from one holder to the next.
func ExampleNew() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"localhost:2379"}, DialTimeout: 3 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	// etcd lease TTLs are whole seconds, at least etcd.MinTTL.
	locker, err := etcd.New(cli, lockmw.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	lease, err := locker.Acquire(ctx, "report:daily", lockmw.Fair(), lockmw.WithWait(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	fmt.Println("holding report:daily with fence", lease.Fence())
	// Work under lease.Context(): it ends (cause lockmw.ErrLost) if the
	// lock is lost, before another holder can get it.
	<-time.After(time.Second)
	if err := lease.Context().Err(); err != nil {
		log.Print("lost: ", context.Cause(lease.Context()))
	}
}
