package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/lockmw/lockmw/internal/testkit/pgtest"
)

// TestMain runs the example itself when the test binary is started by
// TestExample with LOCKMW_EXAMPLE_MAIN=1.
func TestMain(m *testing.M) {
	if os.Getenv("LOCKMW_EXAMPLE_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	code := m.Run()
	pgtest.Cleanup()
	os.Exit(code)
}

// TestExample runs the example on a fresh PostgreSQL server, and without
// DATABASE_URL (it must say what to set and fail).
func TestExample(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LOCKMW_EXAMPLE_MAIN=1", "DATABASE_URL=")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "DATABASE_URL is not set") {
		t.Fatalf("without DATABASE_URL: %v\n%s", err, out)
	}

	srv := pgtest.Start(t)
	cmd = exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LOCKMW_EXAMPLE_MAIN=1", "DATABASE_URL="+srv.URL(), "REDIS_ADDR=")
	out, err = cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil || !strings.Contains(string(out), "cache equals database: true") || !strings.Contains(string(out), "fenced=true") {
		t.Fatalf("the example failed: %v", err)
	}
}
