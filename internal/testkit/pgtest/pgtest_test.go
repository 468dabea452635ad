package pgtest_test

import (
	"os"
	"strings"
	"testing"

	"github.com/lockmw/lockmw/internal/testkit/pgtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Cleanup()
	os.Exit(code)
}

// TestServer starts a server, writes, kills and restarts it (the write
// survives crash recovery), pauses it (a query then times out), resumes it
// and kills a backend.
func TestServer(t *testing.T) {
	s := pgtest.Start(t)
	if got := s.Exec(t, "SELECT current_setting('fsync')"); got != "off" {
		t.Fatalf("fsync = %q, want off", got)
	}
	s.Exec(t, "CREATE TABLE t (v int); INSERT INTO t VALUES (7)")
	s.Kill(t)
	if _, err := s.TryExec("SELECT 1"); err == nil {
		t.Fatal("a killed server answered")
	}
	s.Restart(t)
	if got := s.Exec(t, "SELECT v FROM t"); got != "7" {
		t.Fatalf("after restart: %q, want 7", got)
	}
	s.Pause(t)
	done := make(chan error, 1)
	go func() { _, err := s.TryExec("SELECT 2"); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("a paused server answered (%v)", err)
	default:
	}
	s.Resume(t)
	if err := <-done; err != nil {
		t.Fatalf("after resume: %v", err)
	}
	if n := s.TerminateBackends(t, "nobody-uses-this"); n != 0 {
		t.Fatalf("terminated %d backends of no one", n)
	}
	if !strings.HasPrefix(s.URL(), "postgres://postgres@127.0.0.1:") {
		t.Fatalf("URL %q", s.URL())
	}
}
