package chaos

import (
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

// A Link is a proxied link of a Locker slot to one server of a store of
// several (an etcd member, a ZooKeeper server, a Redlock master), named
// in the notes by Server.
type Link struct {
	Slot   int
	Server string
	Proxy  *redistest.Proxy
}

// PickSlotLinks returns a pick for LinkFault over links: one link, or one
// time in three every link of that link's slot (the slot is cut off from
// the store). It notes which.
func PickSlotLinks(links []Link) func(env *FaultEnv) []*redistest.Proxy {
	return func(env *FaultEnv) []*redistest.Proxy {
		l := links[env.Rand.IntN(len(links))]
		if env.Rand.IntN(3) == 0 {
			env.Note("every link of slot %d", l.Slot)
			var ps []*redistest.Proxy
			for _, o := range links {
				if o.Slot == l.Slot {
					ps = append(ps, o.Proxy)
				}
			}
			return ps
		}
		env.Note("link of slot %d to %s", l.Slot, l.Server)
		return []*redistest.Proxy{l.Proxy}
	}
}

// A Member is one server of a store of several, as its test kit
// supervises it.
type Member interface {
	Pause(t testing.TB)
	Resume(t testing.TB)
	Kill(t testing.TB)
}

// PauseMembers returns the "pause" fault of a store of several servers
// (names: theirs, in the notes): SIGSTOP one or two consecutive members
// (with three: a quorum stays, or none does) for 20ms to 3s, cut short
// when the run ends.
func PauseMembers[M Member](members []M, names []string) Fault {
	return PauseMembersLimited(members, names, nil)
}

// PauseMembersLimited is PauseMembers whose pause is cut to at most the
// duration limit returns for the members drawn (their indexes in
// members), when it returns one above zero; why says why, in the notes.
// A store whose server misbehaves after a stall of some members (etcd:
// a leader stalled past an election) limits those stalls, and only those.
func PauseMembersLimited[M Member](members []M, names []string, limit func(env *FaultEnv, victims []int) (max time.Duration, why string)) Fault {
	return Fault{Name: "pause", Run: func(env *FaultEnv) {
		k := 1 + env.Rand.IntN(2)
		first := env.Rand.IntN(len(members))
		hold := env.Rand.Duration(20*time.Millisecond, 3*time.Second)
		var victims []int
		for i := range k {
			victims = append(victims, (first+i)%len(members))
		}
		if limit != nil {
			if most, why := limit(env, victims); most > 0 && hold > most {
				env.Note("%v cut to %v: %s", hold, most, why)
				hold = most
			}
		}
		var paused []string
		for _, i := range victims {
			paused = append(paused, names[i])
		}
		env.Note("SIGSTOP %v for %v", paused, hold)
		for _, i := range victims {
			members[i].Pause(env.T)
		}
		env.Sleep(hold)
		for _, i := range victims {
			members[i].Resume(env.T)
		}
	}}
}

// RestartMembers returns the "restart" fault (exclusive, weight 2) of a
// store of several servers (names: theirs, in the notes): SIGKILL one
// member, or one time in four all of them, keep them down up to 3s, then
// call restart with them. The wait is not cut short when the run ends: the
// members must run again for the checks after it.
func RestartMembers[M Member](members []M, names []string, restart func(env *FaultEnv, victims []M)) Fault {
	return Fault{Name: "restart", Weight: 2, Exclusive: true, Run: func(env *FaultEnv) {
		down := env.Rand.Duration(0, 3*time.Second)
		i := env.Rand.IntN(len(members))
		victims, killed := []M{members[i]}, []string{names[i]}
		if env.Rand.IntN(4) == 0 {
			victims, killed = members, names
		}
		env.Note("SIGKILL %v, down for %v", killed, down)
		for _, m := range victims {
			m.Kill(env.T)
		}
		time.Sleep(down)
		restart(env, victims)
	}}
}
