package zktest_test

import (
	"testing"

	"github.com/lockmw/lockmw/internal/testkit/zktest"
)

func TestStartSingle(t *testing.T) {
	s := zktest.Start(t)
	if m, err := s.Mode(); err != nil || m != "standalone" {
		t.Fatalf("mode %q, %v", m, err)
	}
}

func TestEnsembleLeaderKill(t *testing.T) {
	e := zktest.StartEnsemble(t, 3)
	l := e.Leader(t)
	l.Kill(t)
	if n := e.Leader(t); n == l {
		t.Fatal("killed server still leads")
	}
	l.Restart(t, true)
	if m, err := l.Mode(); err != nil || m != "follower" {
		t.Fatalf("restarted leader: mode %q, %v", m, err)
	}
}

// A paused server answers nothing until Resume: Pause returns once the JVM
// has stopped, not when SIGSTOP is queued.
func TestPauseMeansStopped(t *testing.T) {
	s := zktest.Start(t)
	s.Pause(t)
	if out, err := s.FourLetter("ruok"); err == nil && out != "" {
		t.Fatalf("the paused server answered ruok: %q", out)
	}
	s.Resume(t)
	if out, err := s.FourLetter("ruok"); err != nil || out != "imok\n" {
		t.Fatalf("after Resume: ruok answered %q, %v", out, err)
	}
}
