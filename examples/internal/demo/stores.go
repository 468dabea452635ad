// The demonstration shared by the examples of lockmw on a store other than
// Redis (examples/etcd, examples/zookeeper): each makes two Lockers on
// clients of their own, as two processes would have, and calls Run.

package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/lockmw/lockmw/lockmw"
)

// out is where Run writes (a test reads it).
var out io.Writer = os.Stdout

// Logger is the Lockers' logger: errors only, so that the demo's output
// stays its own.
func Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// Run plays the demo on two Lockers of one store: they take turns on one
// lock in arrival order (Fair), each holding with a fence that rises from
// one holder to the next; then a holder whose lease is not renewed learns
// through its lease context that the lock expired, before the other
// instance takes over.
func Run(ctx context.Context, a, b *lockmw.Locker) error {
	fmt.Fprintln(out, "== Act 1: two instances take turns, in arrival order, each with a higher fence")
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		last uint64 // the fence of the last holder
	)
	errs := make(chan error, 2)
	hold := func(i int, l *lockmw.Locker) error {
		lease, err := l.Acquire(ctx, "report:daily", lockmw.Fair(), lockmw.WithWait(30*time.Second))
		if err != nil {
			return err
		}
		defer lease.Release(ctx)
		mu.Lock()
		prev := last
		last = lease.Fence()
		mu.Unlock()
		if lease.Fence() <= prev {
			return fmt.Errorf("instance-%c's fence %d is not above the last holder's %d", 'a'+i, lease.Fence(), prev)
		}
		fmt.Fprintf(out, "instance-%c holds report:daily with fence %d\n", 'a'+i, lease.Fence())
		select {
		case <-time.After(50 * time.Millisecond):
			return nil
		case <-lease.Context().Done(): // ends if the lock is lost
			return context.Cause(lease.Context())
		}
	}
	for i, l := range []*lockmw.Locker{a, b} {
		wg.Go(func() {
			for range 3 {
				if err := hold(i, l); err != nil {
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

	fmt.Fprintln(out)
	fmt.Fprintln(out, "== Act 2: a lease without renewal expires, and its holder notices first")
	lease, err := a.Acquire(ctx, "payment:7", lockmw.WithLeaseTTL(2*time.Second), lockmw.WithoutWatchdog())
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "instance-a holds payment:7 (fence %d, 2s lease, no watchdog)\n", lease.Fence())
	next, err := b.Acquire(ctx, "payment:7", lockmw.WithWait(30*time.Second))
	if err != nil {
		return err
	}
	defer next.Release(ctx)
	select {
	case <-lease.Context().Done():
		fmt.Fprintf(out, "instance-a's lease context ended before instance-b got the lock: %v\n", context.Cause(lease.Context()))
	default:
		return errors.New("instance-b got the lock while instance-a's lease was live")
	}
	fmt.Fprintf(out, "instance-b holds payment:7 with fence %d > %d: a store fencing writes rejects instance-a's\n", next.Fence(), lease.Fence())
	if err := lease.Release(ctx); errors.Is(err, lockmw.ErrLost) {
		fmt.Fprintln(out, "instance-a's Release says:", err)
	}
	return nil
}
