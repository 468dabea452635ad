//go:build linux

package servertest

import (
	"strings"
	"testing"
)

// Controls run Process's methods and fail the test, naming the kit, the
// call and the server and quoting its output, when they report an error;
// on a running server they pass.
func TestControlsFailWithTheServersOutput(t *testing.T) {
	t.Parallel()
	p := shell(t, "echo ready; echo something it said; exec sleep 600")
	c := NewControls("shtest", p, nil)
	if msg := FatalMessage(t, c.Pause); !strings.Contains(msg, "shtest: Pause sh: ") || !strings.Contains(msg, ErrNotRunning.Error()) {
		t.Fatalf("Pause before Start: Fatalf(%q), want the kit, call, server and ErrNotRunning", msg)
	}
	if _, err := p.Start(); err != nil {
		t.Fatal(err)
	}
	for _, call := range []struct {
		name string
		run  func(testing.TB)
	}{{"Pause", c.Pause}, {"Resume", c.Resume}, {"Restart", c.Restart}, {"Kill", c.Kill}} {
		if msg := FatalMessage(t, call.run); msg != "" {
			t.Fatalf("%s of a running server: Fatalf(%q)", call.name, msg)
		}
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	msg := FatalMessage(t, c.Restart)
	if !strings.Contains(msg, "shtest: Restart sh: ") || !strings.Contains(msg, "something it said") {
		t.Fatalf("Restart after Stop: Fatalf(%q), want the kit, call, server and its output", msg)
	}
}
