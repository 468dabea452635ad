package zktest

import (
	"net"
	"strings"
	"testing"

	"github.com/lockmw/lockmw/internal/testkit/servertest"
)

// Without java, or without the jar, the error says how to install
// ZooKeeper (the Debian package zookeeper, not zookeeperd).
func TestMissingZooKeeperSaysHowToInstall(t *testing.T) {
	t.Run("jar", func(t *testing.T) {
		t.Setenv("LOCKMW_ZOOKEEPER_JAR", t.TempDir()+"/missing.jar")
		_, err := findJar()
		if err == nil || !strings.Contains(err.Error(), "apt-get install zookeeper;") {
			t.Fatalf("findJar with a missing jar: %v, want the install advice", err)
		}
	})
	t.Run("java", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		_, err := findJar()
		if err == nil || !strings.Contains(err.Error(), "java not found") || !strings.Contains(err.Error(), "apt-get install zookeeper;") {
			t.Fatalf("findJar without java: %v, want the install advice", err)
		}
	})
}

// A first start whose client port another process took picks new ports and
// starts again; the taken port is quoted from the server's own log.
func TestFirstStartRetriesWhenAPortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	picks := 0
	e := StartWith(t, 1, Options{pickPorts: func(n int) ([]int, error) {
		picks++
		ports, err := servertest.FreePorts(n)
		if err == nil && picks == 1 {
			ports[0] = takenPort // the client port
		}
		return ports, err
	}})
	s := e.servers[0]
	if picks != 2 {
		t.Errorf("ports picked %d times, want 2 (the first pick's client port was taken)", picks)
	}
	if s.clientPort == takenPort {
		t.Fatalf("the server kept the taken port %d", takenPort)
	}
	if m, err := s.Mode(); err != nil || m != "standalone" {
		t.Fatalf("after the retry: mode %q, %v", m, err)
	}
	if out := s.Output(); !strings.Contains(out, "Address already in use") || !strings.Contains(out, "retrying on new ports") {
		t.Errorf("the server's output does not say the port was taken and a retry followed:\n%s", out)
	}
}
