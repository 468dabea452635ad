package conformance_test

import (
	"context"
	"testing"

	"github.com/lockmw/lockmw/internal/testkit/conformance"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// This example is compiled but not run: it needs the *testing.T of a real
// test, here a placeholder. A store's test describes its deployment and
// runs the suite; hooks left nil skip the subtests that need them.
func ExampleRun() {
	var t *testing.T // in a real test: func TestConformanceX(t *testing.T) { ... }
	srv := redistest.Start(t)
	admin := srv.Client(t)
	conformance.Run(t, conformance.Store{
		Name: "redis",
		NewLocker: func(t testing.TB, opts ...lockmw.Option) (*lockmw.Locker, error) {
			return lockmw.New(srv.Client(t), opts...)
		},
		Pause:   srv.Pause,
		Resume:  srv.Resume,
		Kill:    srv.Kill,
		Restart: srv.Restart,
		// Redis without persistence forgets the fence counters.
		KillLosesData: true,
		Leftovers: func(t testing.TB, key string) []string {
			// The lock and the fair queue; a full listing also names the
			// subscriptions to the key's channels (PUBSUB CHANNELS).
			lock := lockmw.DefaultPrefix + "{" + key + "}"
			var out []string
			for _, k := range []string{lock, lock + ":q"} {
				if n, err := admin.Exists(context.Background(), k).Result(); err != nil {
					t.Fatal(err)
				} else if n > 0 {
					out = append(out, k)
				}
			}
			return out
		},
		Notifies: true,
		// What Inspect reports on Redis, and how exactly.
		Inspects: &conformance.Inspects{
			TTL: lockmw.Exact, Fence: lockmw.AtMost, Holder: lockmw.Exact,
			SinceWithInfo: lockmw.Exact, Waiters: lockmw.Exact,
		},
	})
}
