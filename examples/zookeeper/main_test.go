package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/lockmw/lockmw/internal/testkit/zktest"
)

// TestMain runs the example itself when the test binary is started by
// TestExample with LOCKMW_EXAMPLE_MAIN=1.
func TestMain(m *testing.M) {
	if os.Getenv("LOCKMW_EXAMPLE_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestExample runs the example on a fresh ZooKeeper server (zktest, on
// Debian's zookeeper package: make zookeeper), and without ZK_SERVERS (it
// must say what to set and fail).
func TestExample(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LOCKMW_EXAMPLE_MAIN=1", "ZK_SERVERS=")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "ZK_SERVERS is not set") {
		t.Fatalf("without ZK_SERVERS: %v\n%s", err, out)
	}

	addr := zktest.Start(t).Addr()
	cmd = exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LOCKMW_EXAMPLE_MAIN=1", "ZK_SERVERS="+addr)
	out, err = cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil || !strings.Contains(string(out), "holds report:daily with fence") || !strings.Contains(string(out), "instance-a's lease context ended before instance-b got the lock") {
		t.Fatalf("the example failed: %v", err)
	}
}
