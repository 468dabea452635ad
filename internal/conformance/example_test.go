package conformance_test

import (
	"testing"

	"github.com/lockmw/lockmw/internal/conformance"
	"github.com/lockmw/lockmw/internal/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// This example is compiled but not run: it needs the *testing.T of a real
// test, here a placeholder. A store's test describes its deployment and
// runs the suite; hooks left nil skip the subtests that need them.
func ExampleRun() {
	var t *testing.T // in a real test: func TestConformanceX(t *testing.T) { ... }
	srv := redistest.Start(t)
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
			// List the lock, queue entries and subscriptions kept for key.
			return nil
		},
		Notifies: true,
	})
}
