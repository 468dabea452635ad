package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/servertest"
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

// TestExample runs the example on a fresh ZooKeeper server (Debian's
// zookeeper package: make zookeeper), and without ZK_SERVERS (it must say
// what to set and fail).
func TestExample(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LOCKMW_EXAMPLE_MAIN=1", "ZK_SERVERS=")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "ZK_SERVERS is not set") {
		t.Fatalf("without ZK_SERVERS: %v\n%s", err, out)
	}

	addr := startZooKeeper(t)
	cmd = exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LOCKMW_EXAMPLE_MAIN=1", "ZK_SERVERS="+addr)
	out, err = cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil || !strings.Contains(string(out), "holds report:daily with fence") || !strings.Contains(string(out), "instance-a's lease context ended before instance-b got the lock") {
		t.Fatalf("the example failed: %v", err)
	}
}

// startZooKeeper starts one ZooKeeper server in the foreground on a free
// port, stopped at cleanup, and returns its client address.
func startZooKeeper(t *testing.T) string {
	t.Helper()
	jar := os.Getenv("LOCKMW_ZOOKEEPER_JAR")
	if jar == "" {
		jar = "/usr/share/java/zookeeper.jar"
	}
	hint := "install Debian's zookeeper package (make zookeeper), or set LOCKMW_ZOOKEEPER_JAR"
	if _, err := os.Stat(jar); err != nil {
		t.Fatalf("%v: %s", err, hint)
	}
	java, err := servertest.Binary{Name: "java", Hint: hint}.Path()
	if err != nil {
		t.Fatal(err)
	}
	port, err := servertest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf("tickTime=2000\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=ruok\n", dir, port)
	if err := os.WriteFile(filepath.Join(dir, "zoo.cfg"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p := servertest.New(servertest.Config{
		Name: "zookeeper",
		Command: func() (servertest.Command, error) {
			return servertest.Command{Path: java, Args: []string{"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
				"-cp", jar, "org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(dir, "zoo.cfg")}}, nil
		},
		Ready: func(ctx context.Context, _ *servertest.Run) error {
			return servertest.Poll(ctx, 100*time.Millisecond, func(context.Context) error { return ruok(addr) })
		},
		ReadyTimeout: time.Minute,
	})
	t.Cleanup(func() { _ = p.Stop() })
	if _, err := p.Start(); err != nil {
		t.Fatalf("starting ZooKeeper: %v\n%s", err, p.Tail())
	}
	return addr
}

// ruok asks the server at addr whether it serves.
func ruok(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("ruok")); err != nil {
		return err
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	if !strings.HasPrefix(line, "imok") {
		return fmt.Errorf("ruok: %q", line)
	}
	return nil
}
