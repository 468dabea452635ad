//go:build unix

package servertest

import (
	"strings"
	"testing"
)

// Controls are a launcher's test calls on its server's Process: Pause,
// Resume, Kill and Restart, each as Process's method of that name, failing
// the test with the server's output when the Process reports an error. A
// launcher's Server embeds Controls (NewControls), so that tests call
// srv.Pause(t) and the like; what a launcher's Restart waits for is its
// Config's Ready check.
type Controls struct {
	proc *Process
	kit  string
	tail func() string
}

// NewControls returns the Controls of p for the launcher named kit
// ("redistest"), which prefixes the failures. tail, when not nil, is the
// output quoted in failures instead of p's Tail (for a member of a
// cluster: every member's).
func NewControls(kit string, p *Process, tail func() string) Controls {
	if tail == nil {
		tail = p.Tail
	}
	return Controls{proc: p, kit: kit, tail: tail}
}

// Pause stops the server (Process.Pause) and returns once every thread of
// it has stopped: it keeps its sockets, so clients can still connect and
// write, but nothing is answered until Resume. Pause fails the test if the
// server is not running, or has not stopped within 20 seconds.
func (c Controls) Pause(t testing.TB) {
	t.Helper()
	c.must(t, "Pause", c.proc.Pause())
}

// Resume undoes Pause (SIGCONT): what clients sent meanwhile is then
// served. Resume fails the test if the server is not running.
func (c Controls) Resume(t testing.TB) {
	t.Helper()
	c.must(t, "Resume", c.proc.Resume())
}

// Kill sends SIGKILL to the server and returns once it has exited, so
// that its ports are closed. Killing a server that is not running does
// nothing.
func (c Controls) Kill(t testing.TB) {
	t.Helper()
	c.must(t, "Kill", c.proc.Kill())
}

// Restart starts the server again with the same Config (killing it first
// if it runs or is paused) and returns once its Ready check passes. It
// fails the test, with the server's output, if that does not happen within
// the Config's ReadyTimeout.
func (c Controls) Restart(t testing.TB) {
	t.Helper()
	_, err := c.proc.Restart()
	c.must(t, "Restart", err)
}

func (c Controls) must(t testing.TB, op string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %s %s: %v\n%s", c.kit, op, c.proc.Name(), err, c.tail())
	}
}

// Tails quotes the latest output of every process of procs (the servers
// of a cluster), one after the other, for a failure about all of them.
func Tails(procs ...*Process) string {
	var b strings.Builder
	for _, p := range procs {
		b.WriteString(p.Tail())
		b.WriteByte('\n')
	}
	return b.String()
}
