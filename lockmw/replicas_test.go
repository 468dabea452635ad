package lockmw_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// With WithWaitReplicas, an acquisition returns only once the replica has
// the lock; with the replica paused it fails with ErrNotReplicated (also
// ErrUnavailable, never ErrNotAcquired) and leaves no lock behind.
func TestWaitReplicas(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.Start(t, redistest.WithReplicaOf(master))
	l := newLocker(t, master, lockmw.WithWaitReplicas(1, time.Second))
	plain := newLocker(t, master)
	ctx := context.Background()
	onMaster, onReplica := master.Client(t), replica.Client(t)

	lease, err := l.TryAcquire(ctx, "acked")
	if err != nil {
		t.Fatalf("TryAcquire with a live replica: %v", err)
	}
	// WAIT returned: the replica has already applied the write.
	if n, err := onReplica.Exists(ctx, lockKey("acked")).Result(); err != nil || n != 1 {
		t.Fatalf("lock not on the replica when Acquire returned: EXISTS = %d, %v", n, err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	replica.Pause(t)
	for name, call := range map[string]func() (*lockmw.Lease, error){
		"TryAcquire": func() (*lockmw.Lease, error) { return l.TryAcquire(ctx, "unacked") },
		"Acquire":    func() (*lockmw.Lease, error) { return l.Acquire(ctx, "unacked") },
	} {
		var lease *lockmw.Lease
		err := within(t, 10*time.Second, func() (err error) { lease, err = call(); return err })
		if err == nil {
			_ = lease.Release(ctx)
			t.Fatalf("%s succeeded with the only replica paused", name)
		}
		if !errors.Is(err, lockmw.ErrNotReplicated) || !errors.Is(err, lockmw.ErrUnavailable) || errors.Is(err, lockmw.ErrNotAcquired) {
			t.Fatalf("%s with the replica paused: %v; want ErrNotReplicated and ErrUnavailable", name, err)
		}
		t.Logf("%s: %v", name, err)
		if n, err := onMaster.Exists(ctx, lockKey("unacked")).Result(); err != nil || n != 0 {
			t.Fatalf("%s: unacknowledged lock left on the master: EXISTS = %d, %v", name, n, err)
		}
	}
	other, err := plain.TryAcquire(ctx, "unacked")
	if err != nil {
		t.Fatalf("lock not free after the rolled-back acquisitions: %v", err)
	}
	_ = other.Release(ctx)

	replica.Resume(t)
	eventually(t, 10*time.Second, func() error {
		lease, err := l.TryAcquire(ctx, "unacked")
		if err == nil {
			err = lease.Release(ctx)
		}
		return err
	})
}

func TestWaitReplicasRejectsBadArguments(t *testing.T) {
	srv := redistest.Start(t)
	for name, opt := range map[string]lockmw.Option{
		"negative replicas":        lockmw.WithWaitReplicas(-1, time.Second),
		"zero timeout":             lockmw.WithWaitReplicas(1, 0),
		"timeout over ReadTimeout": lockmw.WithWaitReplicas(1, 5*time.Second), // go-redis default ReadTimeout: 3s
	} {
		l, err := lockmw.New(srv.Client(t), opt)
		if err == nil {
			_ = l.Close()
			t.Errorf("%s: New succeeded", name)
			continue
		}
		if !errors.Is(err, lockmw.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
	l, err := lockmw.New(srv.Client(t), lockmw.WithWaitReplicas(0, time.Second))
	if err != nil {
		t.Fatalf("WithWaitReplicas(0, ...) turns the wait off: %v", err)
	}
	_ = l.Close()
}
