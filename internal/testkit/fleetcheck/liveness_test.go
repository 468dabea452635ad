//go:build unix

package main

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestJudgeLiveness checks the mixed-fleet check's liveness verdict
// (judgeLiveness, weakerOf) on the figures of runs that stalled, kept up,
// or were only as slow as the old release alone. It runs in make test; the
// fleet itself (TestFleet) is opt-in.
func TestJudgeLiveness(t *testing.T) {
	newAlone := liveness{rate: 260, maxWait: 70 * time.Millisecond}
	for _, c := range []struct {
		name  string
		mixed liveness
		ref   liveness
		want  []string // substrings, one per expected problem
	}{
		{"keeps up", liveness{rate: 240, maxWait: 120 * time.Millisecond}, newAlone, nil},
		{"noise within the slack", liveness{rate: 200, maxWait: 300 * time.Millisecond}, newAlone, nil},
		{"waiters sleep a TTL", liveness{rate: 48, maxWait: 10107 * time.Millisecond}, newAlone,
			[]string{"longest acquire call 10.107s, more than 320ms", "48.0 acquisitions/s, fewer than 130.0"}},
		{"slow but not stalled", liveness{rate: 100, maxWait: 90 * time.Millisecond}, newAlone,
			[]string{"100.0 acquisitions/s, fewer than 130.0"}},
		{"stalled, but the old release alone stalls as long",
			liveness{rate: 48, maxWait: 10107 * time.Millisecond},
			weakerOf(newAlone, liveness{rate: 17, maxWait: 10118 * time.Millisecond}), nil},
		{"worse than either release alone",
			liveness{rate: 5, maxWait: 30 * time.Second},
			weakerOf(newAlone, liveness{rate: 17, maxWait: 10118 * time.Millisecond}),
			[]string{"longest acquire call 30s", "5.0 acquisitions/s, fewer than 8.5"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := judgeLiveness(c.mixed, c.ref)
			if len(got) != len(c.want) {
				t.Fatalf("judgeLiveness(%+v, %+v) = %q, want %d problem(s) %q", c.mixed, c.ref, got, len(c.want), c.want)
			}
			for i, w := range c.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

// oldestRelease is the first commit of main whose public API main.go
// builds against (Redlock merged; Fair and the rest came before it). An
// upgrade from any commit since can be checked with make fleet.
const oldestRelease = "6aaaf71"

// TestBuildsAgainstOldestRelease builds main.go against oldestRelease, as
// make fleet OLD=6aaaf71 would, so that main.go keeps to the API every
// release since has (Lease.Valid, say, came later).
func TestBuildsAgainstOldestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds lockmw at an old commit: not in -short")
	}
	if err := exec.Command("git", "cat-file", "-e", oldestRelease+"^{commit}").Run(); err != nil {
		t.Skipf("this checkout lacks commit %s (a shallow clone?): %v", oldestRelease, err)
	}
	build(t, "oldest", oldestRelease)
}
