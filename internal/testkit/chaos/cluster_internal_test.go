package chaos

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

// fakeMember records its calls.
type fakeMember struct {
	name string
	log  *[]string
}

func (m fakeMember) Pause(testing.TB)  { *m.log = append(*m.log, "pause "+m.name) }
func (m fakeMember) Resume(testing.TB) { *m.log = append(*m.log, "resume "+m.name) }
func (m fakeMember) Kill(testing.TB)   { *m.log = append(*m.log, "kill "+m.name) }

// The cluster faults draw from the fault's Rand in the order the etcd and
// ZooKeeper checkers drew before they shared them, so that a seed replays
// the same schedule: pick (link, whole slot), pause (how many, first,
// hold), restart (down, victim, all). The seeds run at once: a restart
// keeps its victims down up to 3s.
func TestClusterFaultsDrawInOrder(t *testing.T) {
	var wg sync.WaitGroup
	for seed := range int64(64) {
		wg.Go(func() { clusterFaultsDrawInOrder(t, seed) })
	}
	wg.Wait()
}

func clusterFaultsDrawInOrder(t *testing.T, seed int64) {
	var log []string
	members := []fakeMember{{"m0", &log}, {"m1", &log}, {"m2", &log}}
	names := []string{"m0", "m1", "m2"}
	links := []Link{{Slot: 0, Server: "m0", Proxy: &redistest.Proxy{}}, {Slot: 0, Server: "m1", Proxy: &redistest.Proxy{}}, {Slot: 2, Server: "m0", Proxy: &redistest.Proxy{}}}
	env := &FaultEnv{T: t, Rand: newRand(seed, 1), Sleep: func(time.Duration) bool { return true }, Note: func(string, ...any) {}}
	var restarted []fakeMember
	ps := PickSlotLinks(links)(env)
	PauseMembers(members, names).Run(env)
	restart := RestartMembers(members, names, func(_ *FaultEnv, v []fakeMember) { restarted = v })
	if restart.Name != "restart" || !restart.Exclusive || restart.Weight != 2 {
		t.Errorf("restart fault %+v", restart)
	}
	restart.Run(&FaultEnv{T: t, Rand: env.Rand, Sleep: env.Sleep, Note: env.Note})

	// The same draws, as the checkers made them.
	r := newRand(seed, 1)
	var wantLog []string
	l := links[r.IntN(len(links))]
	wantPicked := 1
	if r.IntN(3) == 0 {
		wantPicked = 0
		for _, o := range links {
			if o.Slot == l.Slot {
				wantPicked++
			}
		}
	}
	k := 1 + r.IntN(2)
	first := r.IntN(3)
	_ = r.Duration(20*time.Millisecond, 3*time.Second)
	for i := range k {
		wantLog = append(wantLog, "pause "+names[(first+i)%3])
	}
	for i := range k {
		wantLog = append(wantLog, "resume "+names[(first+i)%3])
	}
	_ = r.Duration(0, 3*time.Second)
	victims := []fakeMember{members[r.IntN(3)]}
	if r.IntN(4) == 0 {
		victims = members
	}
	for _, v := range victims {
		wantLog = append(wantLog, "kill "+v.name)
	}
	if len(ps) != wantPicked || !slices.Equal(log, wantLog) || fmt.Sprint(restarted) != fmt.Sprint(victims) {
		t.Errorf("seed %d: picked %d links, calls %v, restarted %v; want %d, %v, %v", seed, len(ps), log, restarted, wantPicked, wantLog, victims)
	}
}

// PauseMembersLimited makes the draws PauseMembers makes, asks limit about
// the members drawn, and holds them paused no longer than it says; a
// limit of zero, or above the drawn hold, leaves the hold as drawn.
func TestPauseMembersLimitedCutsTheHold(t *testing.T) {
	names := []string{"m0", "m1", "m2"}
	for seed := range int64(64) {
		for _, most := range []time.Duration{0, 100 * time.Millisecond, time.Hour} {
			var log []string
			members := []fakeMember{{"m0", &log}, {"m1", &log}, {"m2", &log}}
			var slept time.Duration
			var asked []int
			env := &FaultEnv{T: t, Rand: newRand(seed, 1), Sleep: func(d time.Duration) bool { slept = d; return true }, Note: func(string, ...any) {}}
			PauseMembersLimited(members, names, func(_ *FaultEnv, victims []int) (time.Duration, string) {
				asked = slices.Clone(victims)
				return most, "test"
			}).Run(env)

			r := newRand(seed, 1)
			k := 1 + r.IntN(2)
			first := r.IntN(3)
			hold := r.Duration(20*time.Millisecond, 3*time.Second)
			var want []int
			var wantLog []string
			for i := range k {
				want = append(want, (first+i)%3)
				wantLog = append(wantLog, "pause "+names[(first+i)%3])
			}
			for i := range k {
				wantLog = append(wantLog, "resume "+names[(first+i)%3])
			}
			wantHold := hold
			if most > 0 && most < hold {
				wantHold = most
			}
			if !slices.Equal(asked, want) || slept != wantHold || !slices.Equal(log, wantLog) {
				t.Errorf("seed %d, limit %v: asked about %v, held %v, calls %v; want %v, %v, %v", seed, most, asked, slept, log, want, wantHold, wantLog)
			}
		}
	}
}
