//go:build unix

package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockmw/lockmw/internal/testkit/servertest"
)

// eventually retries call until it succeeds, failing the test after limit
// with the last error.
func eventually(t *testing.T, limit time.Duration, call func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := call()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after %v: %v", limit, err)
		}
		time.Sleep(pollEvery)
	}
}

// put writes key=value, bounded by limit.
func put(cli *clientv3.Client, limit time.Duration, key, value string) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	_, err := cli.Put(ctx, key, value)
	return err
}

// get reads key (linearizable), bounded by limit.
func get(cli *clientv3.Client, limit time.Duration, key string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) != 1 {
		return "", fmt.Errorf("%q has %d values, want 1", key, len(resp.Kvs))
	}
	return string(resp.Kvs[0].Value), nil
}

// wantValue waits until key reads value through cli.
func wantValue(t *testing.T, cli *clientv3.Client, key, value string) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		got, err := get(cli, time.Second, key)
		if err == nil && got != value {
			err = fmt.Errorf("%q = %q, want %q", key, got, value)
		}
		return err
	})
}

func TestStartPutGet(t *testing.T) {
	t.Parallel()
	s := Start(t)
	cli := s.Client(t)
	if err := put(cli, 5*time.Second, "k", "v"); err != nil {
		t.Fatal(err)
	}
	got, err := get(cli, 5*time.Second, "k")
	if err != nil || got != "v" {
		t.Fatalf("get = %q, %v; want \"v\"", got, err)
	}
	if l := s.Cluster().Leader(t); l != s {
		t.Fatalf("leader of a single member is %s, want itself", l.Name())
	}
	if !strings.HasPrefix(s.Endpoint(), "http://127.0.0.1:") || s.ID() == 0 {
		t.Fatalf("endpoint %q, ID %x", s.Endpoint(), s.ID())
	}
	if _, err := os.Stat(s.DataDir()); err != nil {
		t.Fatalf("data dir: %v", err)
	}
}

// Two members started at once get distinct ports and data directories.
func TestStartTwiceIndependent(t *testing.T) {
	t.Parallel()
	a, b := Start(t), Start(t)
	if a.Addr() == b.Addr() || a.DataDir() == b.DataDir() {
		t.Fatalf("shared address or data dir: %s %s, %s %s", a.Addr(), b.Addr(), a.DataDir(), b.DataDir())
	}
	if err := put(a.Client(t), 5*time.Second, "k", "a"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := b.Client(t).Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Fatalf("second etcd sees the first one's key: %v", resp.Kvs)
	}
}

func TestClusterKillLeaderElectsAnother(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3)
	if len(c.Members()) != 3 || len(c.Endpoints()) != 3 {
		t.Fatalf("members %d, endpoints %v", len(c.Members()), c.Endpoints())
	}
	cli := c.Client(t)
	if err := put(cli, 5*time.Second, "before", "1"); err != nil {
		t.Fatal(err)
	}
	old := c.Leader(t)
	old.Kill(t)
	start := time.Now()
	next := c.Leader(t)
	if next == old {
		t.Fatalf("leader is still the killed member %s", old.Name())
	}
	t.Logf("new leader %s after %v", next.Name(), time.Since(start))
	// The remaining quorum takes writes.
	eventually(t, 10*time.Second, func() error { return put(cli, time.Second, "during", "2") })

	// The old leader rejoins, with the data it missed.
	old.Restart(t)
	oc := old.Client(t)
	wantValue(t, oc, "before", "1")
	wantValue(t, oc, "during", "2")
	if l := c.Leader(t); l == nil {
		t.Fatal("no leader after the restart")
	}
}

func TestPauseResumeSingle(t *testing.T) {
	t.Parallel()
	s := Start(t)
	cli := s.Client(t)
	if err := put(cli, 5*time.Second, "k", "v"); err != nil {
		t.Fatal(err)
	}
	s.Pause(t)
	if _, err := get(cli, 300*time.Millisecond, "k"); !errors.Is(err, context.DeadlineExceeded) {
		s.Resume(t)
		t.Fatalf("get from a paused member: %v, want a deadline error", err)
	}
	s.Resume(t)
	wantValue(t, cli, "k", "v")
}

func TestPauseLeaderElectsAnotherAndRejoins(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3)
	old := c.Leader(t)
	old.Pause(t)
	next := c.Leader(t)
	if next == old {
		t.Fatalf("leader is still the paused member %s", old.Name())
	}
	if err := put(next.Client(t), 5*time.Second, "k", "v"); err != nil {
		t.Fatal(err)
	}
	old.Resume(t)
	wantValue(t, old.Client(t), "k", "v")
	// All three agree on a leader again.
	c.Leader(t)
}

func TestRestartKeepsData(t *testing.T) {
	t.Parallel()
	s := Start(t)
	cli := s.Client(t)
	if err := put(cli, 5*time.Second, "k", "v"); err != nil {
		t.Fatal(err)
	}
	s.Kill(t)
	if _, err := get(cli, 300*time.Millisecond, "k"); err == nil {
		t.Fatal("get from a killed member succeeded")
	}
	s.Kill(t) // killing a dead member does nothing
	s.Restart(t)
	wantValue(t, cli, "k", "v")
	// Restart of a running member kills it first.
	s.Restart(t)
	wantValue(t, cli, "k", "v")
}

func TestMoveLeader(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3)
	for range 2 {
		old := c.Leader(t)
		var to *Server
		for _, m := range c.Members() {
			if m != old {
				to = m
				break
			}
		}
		c.MoveLeader(t, to)
		if l := c.Leader(t); l != to {
			t.Fatalf("leader is %s after MoveLeader to %s", l.Name(), to.Name())
		}
		// Every member says so itself.
		for _, m := range c.Members() {
			st, err := m.status()
			if err != nil {
				t.Fatal(err)
			}
			if st.Leader != to.ID() {
				t.Fatalf("member %s reports leader %x, want %x", m.Name(), st.Leader, to.ID())
			}
		}
	}
	// Moving to the leader itself does nothing.
	l := c.Leader(t)
	c.MoveLeader(t, l)
	if got := c.Leader(t); got != l {
		t.Fatalf("leader moved from %s to %s", l.Name(), got.Name())
	}
}

func TestProxyCutAndHeal(t *testing.T) {
	t.Parallel()
	s := Start(t)
	p := StartProxy(t, s)
	via := s.Client(t, func(cfg *clientv3.Config) { cfg.Endpoints = []string{p.Addr()} })
	direct := s.Client(t)
	if err := put(via, 5*time.Second, "k", "1"); err != nil {
		t.Fatal(err)
	}
	p.Cut(t)
	if err := put(via, 300*time.Millisecond, "k", "2"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("put through a cut link: %v, want a deadline error", err)
	}
	// The member itself still answers.
	if err := put(direct, 5*time.Second, "k", "3"); err != nil {
		t.Fatal(err)
	}
	p.Heal(t)
	eventually(t, 10*time.Second, func() error { return put(via, time.Second, "k", "4") })
	wantValue(t, direct, "k", "4")
}

func TestStartFailureQuotesOutput(t *testing.T) {
	t.Parallel()
	msg := servertest.FatalMessage(t, func(tb testing.TB) { Start(tb, WithArgs("--no-such-flag")) })
	if !strings.Contains(msg, "no-such-flag") {
		t.Fatalf("Start with a bad flag: Fatalf(%q), want it to quote etcd's complaint", msg)
	}
}

func TestBinaryIsNeverTakenFromPATH(t *testing.T) {
	// Not parallel: t.Setenv.
	t.Setenv(binaryEnv, "")
	fake := t.TempDir()
	if err := os.WriteFile(filepath.Join(fake, "etcd"), []byte("#!/bin/sh\necho 'etcd Version: 3.4.23'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", fake+string(filepath.ListSeparator)+os.Getenv("PATH"))
	bin, err := findBinary()
	if err != nil {
		t.Fatalf("findBinary: %v", err)
	}
	root, err := repositoryRoot()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, builtBinary); bin != want {
		t.Fatalf("findBinary = %s, want the repository's build %s (never etcd from PATH)", bin, want)
	}
	want, err := pinnedVersion(filepath.Join(root, toolsDir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := binaryVersion(bin); err != nil || got != want {
		t.Fatalf("%s --version: %q, %v; want %s", bin, got, err, want)
	}
}

func TestBadBinaryEnvNamesIt(t *testing.T) {
	// Not parallel: t.Setenv.
	t.Setenv(binaryEnv, "/nonexistent/etcd")
	msg := servertest.FatalMessage(t, func(tb testing.TB) { Start(tb) })
	if !strings.Contains(msg, "LOCKMW_ETCD") || !strings.Contains(msg, "make etcd") {
		t.Fatalf("Start with a bad LOCKMW_ETCD: Fatalf(%q), want it to name LOCKMW_ETCD and `make etcd`", msg)
	}
}

func TestOutsideTheRepositoryNamesTheVariable(t *testing.T) {
	// Not parallel: t.Chdir.
	t.Chdir(t.TempDir())
	_, err := repositoryRoot()
	if err == nil || !strings.Contains(err.Error(), "set LOCKMW_ETCD") {
		t.Fatalf("repositoryRoot outside the repository: %v, want an error saying to set LOCKMW_ETCD", err)
	}
}

// TestBuildsStaleBinaryUnderLock has binaryIn build over a stale
// binary, from several goroutines at once (the file lock works between them
// as between processes). So that it takes a second, not a minute, the tools
// module it builds from replaces the etcd server by a main package that
// only prints its version.
func TestBuildsStaleBinaryUnderLock(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	files := map[string]string{
		toolsDir + "/go.mod": "module example.com/tools\n\ngo 1.26.0\n\n" +
			"tool " + serverModule + "\n\nrequire " + serverModule + " v3.6.99\n\n" +
			"replace " + serverModule + " => ./fake\n",
		toolsDir + "/fake/go.mod": "module " + serverModule + "\n\ngo 1.26.0\n",
		toolsDir + "/fake/main.go": "package main\n\nimport \"fmt\"\n\n" +
			"func main() { fmt.Println(\"etcd Version: 3.6.99\") }\n",
		builtBinary: "#!/bin/sh\necho 'etcd Version: 3.4.23'\n",
	}
	for name, content := range files {
		path := filepath.Join(tmp, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(tmp, builtBinary)
	bins := make([]string, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range bins {
		wg.Go(func() { bins[i], errs[i] = binaryIn(tmp) })
	}
	wg.Wait()
	for i := range bins {
		if errs[i] != nil || bins[i] != bin {
			t.Fatalf("binaryIn: %q, %v; want %s", bins[i], errs[i], bin)
		}
	}
	if got, err := binaryVersion(bin); err != nil || got != "3.6.99" {
		t.Fatalf("%s --version after the build: %q, %v; want 3.6.99", bin, got, err)
	}
	left, _ := filepath.Glob(bin + ".tmp*")
	if len(left) > 0 {
		t.Fatalf("temporary build outputs left behind: %v", left)
	}
}
