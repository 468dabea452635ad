package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/lockmw/lockmw/examples/internal/demo"
	"github.com/lockmw/lockmw/lockmw"
)

// runDemo makes lock state on an embedded Redis and prints it: a held
// lock whose holder describes itself, a lock two Fair waiters queue for,
// and a lease without renewal, which expires between the two tables.
func runDemo(ctx context.Context, w io.Writer) error {
	addr, stop := demo.RedisAddr()
	defer stop()
	locker := func(info string) (*lockmw.Locker, error) {
		return lockmw.New(demo.RedisClient(addr), lockmw.WithHolderInfo(info), lockmw.WithLogger(demo.Logger()))
	}
	orders, err := locker("orders-7d9f host-a pid 42")
	if err != nil {
		return err
	}
	defer orders.Close()
	if _, err := orders.Acquire(ctx, "order:42"); err != nil {
		return err
	}
	if _, err := orders.Acquire(ctx, "report:daily", lockmw.WithLeaseTTL(time.Second), lockmw.WithoutWatchdog()); err != nil {
		return err
	}
	sale, err := locker("flashsale-1 host-b pid 7")
	if err != nil {
		return err
	}
	defer sale.Close()
	if _, err := sale.Acquire(ctx, "item:7", lockmw.Fair()); err != nil {
		return err
	}
	// Two other instances queue for item:7.
	waitCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel() // the waiters give up before their Lockers close
		wg.Wait()
	}()
	for i := range 2 {
		w, err := locker(fmt.Sprintf("flashsale-%d host-c", i+2))
		if err != nil {
			return err
		}
		wg.Go(func() {
			defer w.Close()
			if _, err := w.Acquire(waitCtx, "item:7", lockmw.Fair()); err != nil && !errors.Is(err, context.Canceled) {
				fmt.Println("waiter:", err)
			}
		})
	}
	if err := waitFor(ctx, orders, "item:7", func(info lockmw.LockInfo) bool { return info.Waiters.Value == 2 }); err != nil {
		return err
	}
	fmt.Fprintln(w, "== order:42 and item:7 are held (item:7 with two waiters); report:daily's 1s lease is not renewed")
	if err := printLocks(ctx, w, orders, 100); err != nil {
		return err
	}
	if err := waitFor(ctx, orders, "report:daily", func(info lockmw.LockInfo) bool { return !info.Held }); err != nil {
		return err
	}
	fmt.Fprintln(w, "\n== report:daily expired; the others are still held")
	return printLocks(ctx, w, orders, 100)
}

// waitFor waits until l's Inspect of key satisfies ok, for up to 5s.
func waitFor(ctx context.Context, l *lockmw.Locker, key string, ok func(lockmw.LockInfo) bool) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := l.Inspect(ctx, key)
		if err != nil {
			return err
		}
		if ok(info) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: still %+v after 5s", key, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
