package chaos

import (
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

// A Server is a single store server the test kit supervises (pgtest,
// mariatest): it can be paused (SIGSTOP), resumed, killed (SIGKILL) and
// restarted on its data.
type Server interface {
	Pause(t testing.TB)
	Resume(t testing.TB)
	Kill(t testing.TB)
	Restart(t testing.TB)
}

// ServerFaults returns the faults of a store on one server (named name in
// the history) whose Lockers reach it directly or through proxies:
//
//   - latency, cut, reset: LinkFault on the links pick chooses;
//   - pause: SIGSTOP the server for up to 3s;
//   - restart (exclusive, weight 2): SIGKILL the server, keep it down up
//     to 3s, restart it (crash recovery keeps every committed row). The
//     restart is not cut short when the run ends: the server must run
//     again for the checks after it.
//
// A store adds its own faults (a killed connection, a terminated backend)
// to these.
func ServerFaults(name string, srv Server, pick func(env *FaultEnv) []*redistest.Proxy) []Fault {
	return []Fault{
		LinkFault("latency", 200*time.Millisecond, 3*time.Second, pick),
		LinkFault("cut", 50*time.Millisecond, 4*time.Second, pick),
		LinkFault("reset", 10*time.Millisecond, 500*time.Millisecond, pick),
		{Name: "pause", Run: func(env *FaultEnv) {
			hold := env.Rand.Duration(20*time.Millisecond, 3*time.Second)
			env.Note("SIGSTOP %s for %v", name, hold)
			srv.Pause(env.T)
			env.Sleep(hold)
			srv.Resume(env.T)
		}},
		{Name: "restart", Weight: 2, Exclusive: true, Run: func(env *FaultEnv) {
			down := env.Rand.Duration(0, 3*time.Second)
			env.Note("SIGKILL %s, down for %v", name, down)
			srv.Kill(env.T)
			time.Sleep(down)
			srv.Restart(env.T)
		}},
	}
}
