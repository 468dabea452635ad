// Command etcd shows lockmw on etcd: two instances (separate clients, as
// two processes would have) take turns on one lock in arrival order
// (Fair), each holding with a fence that rises from one holder to the
// next; then a holder whose lease is not renewed learns through its lease
// context that the lock expired, before the other instance takes over.
//
// It needs a running etcd, named by ETCD_ENDPOINTS (comma-separated):
//
//	make etcd                              # builds etcd 3.6 into .bin/etcd
//	.bin/etcd --data-dir /tmp/lockmw-etcd &
//	ETCD_ENDPOINTS=localhost:2379 go run ./examples/etcd
//
// Use etcd 3.5 or 3.6 (`make etcd`, or a release from
// https://github.com/etcd-io/etcd/releases), not Debian's etcd-server
// package: its 3.4.23 has etcd issue 15247 (a deposed leader can revoke a
// lease early), which lockmw's validity argument does not survive.
//
// The example is a module of its own, listed in the repository's go.work,
// so that the lockmw module does not depend on the etcd client.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lockmw/lockmw/examples/internal/demo"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd"
)

func main() {
	eps := os.Getenv("ETCD_ENDPOINTS")
	if eps == "" {
		fmt.Fprint(os.Stderr, `ETCD_ENDPOINTS is not set: this example needs a running etcd.
Start etcd 3.5 or 3.6: in this repository, make etcd builds 3.6 into
.bin/etcd (or take a release from https://github.com/etcd-io/etcd/releases;
not Debian's etcd-server package, whose 3.4.23 has etcd issue 15247, a
lease revoked early). For example:

	make etcd
	.bin/etcd --data-dir /tmp/lockmw-etcd &
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
	logger := demo.Logger()
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
	return demo.Run(ctx, lockers[0], lockers[1])
}
