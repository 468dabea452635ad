package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd"
	"github.com/lockmw/lockmw/lockmw/etcd/internal/etcdtest"
)

// This file checks what the conformance suite cannot see of Inspect and
// Locks on etcd: whose holder description they show, and how much a page
// of the listing reads.

// A holder description is shown only for the key that holds: the one of
// lowest create revision in the lock's directory, not the first in key
// order. A described Fair waiter whose key sorts before a plain holder's
// is counted as a waiter, and its description is not shown; once the lock
// passes to it, its description is.
func TestInspectShowsOnlyTheHoldersDescription(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	ctx := bg(t)
	const key, info = "desc", "waiter host-b pid 7"
	reader := newLocker(t, cli)
	holder, err := newLocker(t, cli).Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	holderKey := entries(t, cli, key)[0].key

	// Queue described Fair waiters, one at a time, until one's key sorts
	// before the holder's (each Locker's keys carry a random id).
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	got := make(chan *lockmw.Lease, 40)
	before := false
	waiters := 0
	for !before {
		if waiters == 40 {
			t.Fatalf("no waiter's key of %d sorted before the holder's %q", waiters, holderKey)
		}
		w := newLocker(t, cli, lockmw.WithHolderInfo(info))
		wg.Go(func() {
			if lease, err := w.Acquire(wctx, key, lockmw.Fair()); err == nil {
				got <- lease
			} else if !errors.Is(err, context.Canceled) {
				t.Errorf("a described Fair waiter: %v", err)
			}
		})
		waiters++
		for deadline := time.Now().Add(10 * time.Second); len(entries(t, cli, key)) != waiters+1; {
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d did not queue: the lock's keys are %v", waiters, entries(t, cli, key))
			}
			time.Sleep(10 * time.Millisecond)
		}
		es := entries(t, cli, key)
		before = es[len(es)-1].key < holderKey
	}

	check := func(what string, in lockmw.LockInfo, fence uint64, holder string) {
		t.Helper()
		if !in.Held || in.Fence != (lockmw.Reading[uint64]{Value: fence, Is: lockmw.Exact}) {
			t.Fatalf("%s: %+v, want held with fence %d", what, in, fence)
		}
		if holder == "" && in.Holder.Known() {
			t.Fatalf("%s: holder %q (%v), but the holding Locker gave no description", what, in.Holder.Value, in.Holder.Is)
		}
		if holder != "" && in.Holder != (lockmw.Reading[string]{Value: holder, Is: lockmw.Exact}) {
			t.Fatalf("%s: holder %+v, want %q", what, in.Holder, holder)
		}
	}
	listed := func() lockmw.LockInfo {
		t.Helper()
		page, next, err := reader.Locks(ctx, "", lockmw.MaxListLimit)
		for _, in := range page {
			if in.Key == key {
				return in
			}
		}
		t.Fatalf("Locks: %+v, next %q, %v: %q not listed", page, next, err, key)
		return lockmw.LockInfo{}
	}

	in, err := reader.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	check("plain holder, described waiters", in, holder.Fence(), "")
	if in.Waiters != (lockmw.Reading[int]{Value: waiters, Is: lockmw.Exact}) {
		t.Fatalf("Inspect counts waiters %+v, want %d exactly", in.Waiters, waiters)
	}
	check("listed: plain holder, described waiters", listed(), holder.Fence(), "")

	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var next *lockmw.Lease // the first waiter: its key went in through Enqueue
	select {
	case next = <-got:
	case <-time.After(10 * time.Second):
		t.Fatalf("no waiter took the released lock: its keys are %v", entries(t, cli, key))
	}
	if in, err = reader.Inspect(ctx, key); err != nil {
		t.Fatal(err)
	}
	check("described holder (queued first)", in, next.Fence(), info)
	check("listed: described holder", listed(), next.Fence(), info)
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	wg.Wait()
	close(got)
	for lease := range got {
		_ = lease.Release(ctx)
	}
}

// rangeReads counts, through a client interceptor, the key-values of
// each range read a client receives.
type rangeReads struct {
	mu  sync.Mutex
	kvs []int // per read, in order
}

func (r *rangeReads) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoke(ctx, method, req, reply, cc, opts...)
	if rr, ok := reply.(*pb.RangeResponse); ok && err == nil {
		r.mu.Lock()
		r.kvs = append(r.kvs, len(rr.Kvs))
		r.mu.Unlock()
	}
	return err
}

// take returns the reads since the last take.
func (r *rangeReads) take() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	kvs := r.kvs
	r.kvs = nil
	return kvs
}

// A page of Locks reads a bounded number of keys however many the prefix
// holds: one range read with a limit (twice the page's), and, for a
// directory longer than that (a long queue), a read of its first key
// alone. Every lock is listed once across the pages, its waiters counted.
func TestLocksReadsBoundedPages(t *testing.T) {
	srv := etcdtest.Start(t)
	admin := srv.Client(t)
	reads := &rangeReads{}
	cli := srv.Client(t, func(c *clientv3.Config) {
		c.DialOptions = append(c.DialOptions, grpc.WithChainUnaryInterceptor(reads.intercept))
	})
	ctx := bg(t)
	const prefix, locks, queue = "many:", 2000, 9
	l := newLocker(t, cli, lockmw.WithPrefix(prefix))

	// Keys as Lockers write them, under one etcd lease, put by 128.
	grant, err := admin.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Revoke(context.Background(), grant.ID) })
	var ops []clientv3.Op
	put := func(name string, n int) {
		for i := range n {
			ops = append(ops, clientv3.OpPut(etcd.LockDir(prefix, name)+fmt.Sprintf("%016x.%d", i, i), "", clientv3.WithLease(grant.ID)))
			if len(ops) == 128 {
				if _, err := admin.Txn(ctx).Then(ops...).Commit(); err != nil {
					t.Fatal(err)
				}
				ops = ops[:0]
			}
		}
	}
	put("a-long-queue", 1+queue)
	for i := range locks {
		put(fmt.Sprintf("lock:%05d", i), 1)
	}
	put("z/with%slash", 2)
	if _, err := admin.Txn(ctx).Then(ops...).Commit(); err != nil {
		t.Fatal(err)
	}
	// cronlock's records under the prefix are no locks.
	if _, err := admin.Put(ctx, prefix+"%cronfire%job", "{}"); err != nil {
		t.Fatal(err)
	}

	for _, limit := range []int{2, 100} {
		listed := map[string]lockmw.LockInfo{}
		cursor, pages := "", 0
		reads.take()
		for {
			page, next, err := l.Locks(ctx, cursor, limit)
			if err != nil {
				t.Fatalf("limit %d: Locks(%q) after %d pages: %v", limit, cursor, pages, err)
			}
			pages++
			for i, n := range reads.take() {
				if n > 2*limit {
					t.Fatalf("limit %d: page %d's read %d returned %d keys, over twice the page's limit", limit, pages, i, n)
				}
			}
			if len(page) > limit {
				t.Fatalf("limit %d: page %d holds %d locks", limit, pages, len(page))
			}
			for _, in := range page {
				if _, twice := listed[in.Key]; twice {
					t.Fatalf("limit %d: %q listed twice", limit, in.Key)
				}
				listed[in.Key] = in
			}
			if next == "" {
				break
			}
			if pages > 2*locks {
				t.Fatalf("limit %d: no end after %d pages", limit, pages)
			}
			cursor = next
		}
		if len(listed) != locks+2 {
			t.Fatalf("limit %d: listed %d locks in %d pages, want %d", limit, len(listed), pages, locks+2)
		}
		for name, waiters := range map[string]int{"a-long-queue": queue, "lock:01234": 0, "z/with%slash": 1} {
			in := listed[name]
			if !in.Held || in.Waiters != (lockmw.Reading[int]{Value: waiters, Is: lockmw.Exact}) || in.TTL.Is != lockmw.AtMost || in.TTL.Value <= 0 {
				t.Fatalf("limit %d: %q listed as %+v, want held, TTL at most some seconds, %d waiters", limit, name, in, waiters)
			}
		}
	}

	// Cursors: only the listing's own, of this prefix.
	_, next, err := l.Locks(ctx, "", 2)
	if err != nil || next == "" {
		t.Fatalf("Locks: next %q, %v", next, err)
	}
	other := newLocker(t, cli, lockmw.WithPrefix("other:"))
	if _, _, err := other.Locks(ctx, next, 2); !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Fatalf("Locks with another prefix's cursor: %v, want ErrInvalidOption", err)
	}
	i := len(next) - 3
	flip := "A"
	if next[i] == 'A' {
		flip = "B"
	}
	if _, _, err := l.Locks(ctx, next[:i]+flip+next[i+1:], 2); !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Fatalf("Locks with a cursor whose character %d changed: %v, want ErrInvalidOption", i, err)
	}
}
