package lockmw_test

import (
	"context"
	"testing"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// With StoreWideFence an acquisition's fence is above every fence drawn
// before, for any key: a key used for a while draws above a key used for
// the first time since (whose counter starts at the Redis clock), and its
// own fences keep rising. On one Redis and under Redlock.
func TestStoreWideFence(t *testing.T) {
	srvs := redistest.StartN(t, 3)
	for _, tc := range []struct {
		name string
		l    *lockmw.Locker
	}{
		{"New", lockmwtest.NewLocker(t, srvs[0])},
		{"NewRedlock", newRedlock(t, srvs)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			fence := func(key string, opts ...lockmw.AcquireOption) uint64 {
				t.Helper()
				lease, err := tc.l.TryAcquire(ctx, key, opts...)
				if err != nil {
					t.Fatalf("TryAcquire(%s): %v", key, err)
				}
				releaseOK(t, lease)
				return lease.Fence()
			}
			var old []uint64
			for range 3 {
				old = append(old, fence("old-"+tc.name))
			}
			fresh := fence("fresh-" + tc.name) // its counter starts at the clock, above old's
			if fresh <= old[2] {
				t.Logf("a fresh key's fence %d is not above an old key's %d: the per-key counters did not show the case", fresh, old[2])
			}
			wide := fence("old-"+tc.name, lockmw.StoreWideFence())
			if wide <= fresh {
				t.Errorf("StoreWideFence: fence %d of the old key, not above %d, drawn before for another key", wide, fresh)
			}
			if wide <= old[2] {
				t.Errorf("StoreWideFence: fence %d of the old key, not above its previous one %d", wide, old[2])
			}
			if next := fence("old-" + tc.name); next <= wide {
				t.Errorf("fence %d after the store-wide one %d: not rising", next, wide)
			}
		})
	}
}
