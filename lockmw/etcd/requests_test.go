package etcd_test

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd/internal/etcdtest"
)

// This file counts what a lock nobody waits on costs etcd.

// Taking and freeing a free lock sends what concurrency.Mutex sends: one
// transaction (create the key if D is empty, read D) and one delete (the
// key's name is its own, so no transaction compares its revision), and
// nothing else while the Locker's etcd lease is fresh (no grant, no
// renewal on the way).
func TestFreeLockCostsOneTxnAndOneDelete(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := bg(t)
	for _, fair := range []bool{false, true} {
		var opts []lockmw.AcquireOption
		if fair {
			opts = append(opts, lockmw.Fair())
		}
		l := newLocker(t, srv.Client(t), lockmw.WithTTL(quietTTL))
		warm, err := l.Acquire(ctx, "free", opts...) // grants the Locker's etcd lease
		if err != nil {
			t.Fatal(err)
		}
		if err := warm.Release(ctx); err != nil {
			t.Fatal(err)
		}
		before := received(t, srv)
		const n = 50
		for range n {
			lease, err := l.Acquire(ctx, "free", opts...)
			if err != nil {
				t.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		after := received(t, srv)
		for method, v := range after {
			want := int64(0)
			if method == "Txn" || method == "DeleteRange" {
				want = n
			}
			if got := v - before[method]; got != want {
				t.Errorf("fair %v: %d lock+unlock sent %d %s, want %d", fair, n, got, method, want)
			}
		}
	}
}

// A free lock's transaction reads no range but its compare's: it creates
// the key only if the lock's directory is empty, and reads nothing else
// (concurrency.Mutex's reads its owner key too). Before, a default or Fair
// acquisition's first transaction created the key if it was missing and
// read the directory's keys in the same step: two ranges.
func TestFreeLockReadsOnlyItsCompare(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := bg(t)
	for _, fair := range []bool{false, true} {
		var opts []lockmw.AcquireOption
		if fair {
			opts = append(opts, lockmw.Fair())
		}
		l := newLocker(t, srv.Client(t), lockmw.WithTTL(quietTTL))
		warm, err := l.Acquire(ctx, "free-ranges", opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := warm.Release(ctx); err != nil {
			t.Fatal(err)
		}
		before := ranges(t, srv)
		const n = 20
		for range n {
			lease, err := l.Acquire(ctx, "free-ranges", opts...)
			if err != nil {
				t.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if got := ranges(t, srv) - before; got != n {
			t.Errorf("fair %v: %d lock+unlock read %d ranges in etcd, want %d (one compare each)", fair, n, got, n)
		}
	}
}

// ranges returns etcd's count of the ranges its transactions read
// (etcd_mvcc_range_total: reads, and the compares of transactions).
func ranges(t testing.TB, m *etcdtest.Server) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, m.Endpoint()+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("reading %s's metrics: %v", m.Name(), err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "etcd_mvcc_range_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("etcd_mvcc_range_total %q: %v", v, err)
			}
			return int64(f)
		}
	}
	t.Fatalf("%s's metrics have no etcd_mvcc_range_total", m.Name())
	return 0
}
