package chaos

import (
	"fmt"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

// LinkFault returns the link fault name ("latency", "cut" or "reset") of a
// store whose Lockers reach it through proxies: each run picks links with
// pick (which notes them), makes them slow (replies delayed 5–400ms),
// cut off or reset for a hold drawn between min and max (cut short when
// the run ends), then heals them.
func LinkFault(name string, min, max time.Duration, pick func(env *FaultEnv) []*redistest.Proxy) Fault {
	var inject func(p *redistest.Proxy, env *FaultEnv)
	switch name {
	case "latency":
		inject = func(p *redistest.Proxy, env *FaultEnv) {
			lat := env.Rand.Duration(5*time.Millisecond, 400*time.Millisecond)
			env.Note("+%v", lat)
			p.AddLatency(env.T, lat)
		}
	case "cut":
		inject = func(p *redistest.Proxy, env *FaultEnv) { p.Cut(env.T) }
	case "reset":
		inject = func(p *redistest.Proxy, env *FaultEnv) { p.ResetConnections(env.T) }
	default:
		panic(fmt.Sprintf("chaos.LinkFault: unknown link fault %q (latency, cut or reset)", name))
	}
	return Fault{Name: name, Run: func(env *FaultEnv) {
		ps := pick(env)
		hold := env.Rand.Duration(min, max)
		env.Note("for %v", hold)
		for _, p := range ps {
			inject(p, env)
		}
		env.Sleep(hold)
		for _, p := range ps {
			p.Heal(env.T)
		}
	}}
}

// Proxied reports whether Locker slot reaches its store through proxies:
// every other slot does (the even ones), the rest talk to it directly, so
// that a link fault leaves some slots untouched.
func Proxied(slot int) bool { return slot%2 == 0 }

// DescribeSlot says how slot reaches its store ("proxied" or "direct"),
// as a Deployment's Describe.
func DescribeSlot(slot int) string {
	if Proxied(slot) {
		return "proxied"
	}
	return "direct"
}
