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

// Who holds a lock, for how long yet, and how many wait: Inspect reads it
// from etcd. The holding Locker's description (WithHolderInfo) is the value
// of its key; the TTL is a bound (etcd counts whole seconds), and etcd
// keeps no acquisition time, so Since is unknown.
func ExampleNew_inspect() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"localhost:2379"}, DialTimeout: 3 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	locker, err := etcd.New(cli, lockmw.WithHolderInfo("orders-7d9f host-a pid 42"))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	in, err := locker.Inspect(ctx, "order:42")
	if err != nil {
		log.Fatal(err)
	}
	if in.Held {
		fmt.Printf("order:42 held by %q, fence %d, %v left (%v), %d waiting\n",
			in.Holder.Value, in.Fence.Value, in.TTL.Value, in.TTL.Is, in.Waiters.Value)
	}
	// Every held lock under the prefix, 100 at a time.
	for cursor := ""; ; {
		page, next, err := locker.Locks(ctx, cursor, 100)
		if err != nil {
			log.Fatal(err)
		}
		for _, l := range page {
			fmt.Println(l.Key, l.Holder.Value, l.TTL.Value)
		}
		if next == "" {
			break
		}
		cursor = next
	}
}
