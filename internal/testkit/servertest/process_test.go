//go:build linux

package servertest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// shell returns a Process running script with sh, ready once its output
// has a line "ready". Stop runs at t.Cleanup.
func shell(t *testing.T, script string) *Process {
	t.Helper()
	sh, err := Binary{Name: "sh", Hint: "a POSIX shell"}.Path()
	if err != nil {
		t.Fatal(err)
	}
	p := New(Config{
		Name:    "sh",
		Command: func() (Command, error) { return Command{Path: sh, Args: []string{"-c", script}}, nil },
		Ready: func(ctx context.Context, r *Run) error {
			return Poll(ctx, 5*time.Millisecond, func(context.Context) error {
				if strings.Contains(r.Output(), "ready\n") {
					return nil
				}
				return errors.New("no ready line yet")
			})
		},
		ReadyTimeout: 10 * time.Second,
	})
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("stop: %v\n%s", err, p.Tail())
		}
	})
	return p
}

// groupStates returns the state letter of every thread of every process
// in process group pgid.
func groupStates(t *testing.T, pgid int) map[int]string {
	t.Helper()
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	states := make(map[int]string)
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		fields, ok := statFields(stat)
		if !ok || len(fields) < 3 || fields[2] != strconv.Itoa(pgid) {
			continue
		}
		tasks, _ := filepath.Glob(filepath.Join("/proc", e.Name(), "task", "*", "stat"))
		for _, task := range tasks {
			if stat, err := os.ReadFile(task); err == nil {
				if f, ok := statFields(stat); ok && len(f) > 0 {
					states[pid] += f[0]
				}
			}
		}
	}
	return states
}

func TestPauseStopsEveryProcessOfTheGroup(t *testing.T) {
	t.Parallel()
	// A shell that runs the server as its child, as some launch scripts
	// do, and children busy on the CPU, which are what takes a while to
	// stop on a loaded machine.
	p := shell(t, `sleep 600 & for i in 1 2 3; do while :; do :; done & done; echo ready; wait`)
	r, err := p.Start()
	if err != nil {
		t.Fatalf("start: %v\n%s", err, p.Tail())
	}
	var tasks []string
	waitGroup := time.Now().Add(10 * time.Second)
	for {
		states := groupStates(t, r.Pid())
		if len(states) == 5 {
			for pid := range states {
				more, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "stat"))
				tasks = append(tasks, more...)
			}
			break
		}
		if time.Now().After(waitGroup) {
			t.Fatalf("process group %d has processes %v, want 5", r.Pid(), states)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := range 100 {
		if err := p.Pause(); err != nil {
			t.Fatalf("pause %d: %v", i, err)
		}
		for _, task := range tasks {
			stat, err := os.ReadFile(task)
			if err != nil {
				t.Fatal(err)
			}
			if f, ok := statFields(stat); !ok || len(f) == 0 || (f[0] != "T" && f[0] != "t") {
				t.Fatalf("pause %d: Pause returned while %s says %q", i, task, stat)
			}
		}
		if p.Live() {
			t.Fatalf("pause %d: Live() = true while paused", i)
		}
		if err := p.Resume(); err != nil {
			t.Fatalf("resume %d: %v", i, err)
		}
		if !p.Live() {
			t.Fatalf("resume %d: Live() = false after Resume", i)
		}
	}
}

func TestKillRestartAndOutputOfEachRun(t *testing.T) {
	t.Parallel()
	n := 0
	sh, err := Binary{Name: "sh", Hint: "a POSIX shell"}.Path()
	if err != nil {
		t.Fatal(err)
	}
	p := New(Config{
		Name: "counter",
		Command: func() (Command, error) {
			n++ // the Command is asked again at every start
			return Command{Path: sh, Args: []string{"-c", "echo run " + strconv.Itoa(n) + "; echo ready; exec sleep 600"}}, nil
		},
		Ready: func(ctx context.Context, r *Run) error {
			return Poll(ctx, 5*time.Millisecond, func(context.Context) error {
				if !strings.Contains(r.Output(), "ready\n") {
					return errors.New("not yet")
				}
				return nil
			})
		},
	})
	t.Cleanup(func() { _ = p.Stop() })
	if p.Running() || p.Live() || p.Run() != nil {
		t.Fatal("a new Process runs")
	}
	first, err := p.Start()
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if _, err := p.Start(); err == nil {
		t.Fatal("second Start of a running Process succeeded")
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if !first.Exited() || p.Running() || p.Live() {
		t.Fatalf("after Kill: exited %v, running %v, live %v", first.Exited(), p.Running(), p.Live())
	}
	if err := p.Pause(); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Pause of a killed server: %v, want ErrNotRunning", err)
	}
	if err := p.Kill(); err != nil {
		t.Fatalf("Kill of a killed server: %v, want nil", err)
	}
	second, err := p.Restart()
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	if second == first || second.Pid() == first.Pid() || !p.Live() {
		t.Fatal("Restart did not start a new run")
	}
	if out := second.Output(); strings.Contains(out, "run 1") || !strings.Contains(out, "run 2") {
		t.Fatalf("second run's Output %q, want run 2's lines only", out)
	}
	all := p.Output()
	for _, want := range []string{"run 1", "--- servertest: restart of counter ---", "run 2"} {
		if !strings.Contains(all, want) {
			t.Errorf("Output %q has no %q", all, want)
		}
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	for name, f := range map[string]func() error{
		"Kill": p.Kill, "Pause": p.Pause, "Resume": p.Resume,
		"Start":   func() error { _, err := p.Start(); return err },
		"Restart": func() error { _, err := p.Restart(); return err },
	} {
		if err := f(); !errors.Is(err, ErrStopped) {
			t.Errorf("%s after Stop: %v, want ErrStopped", name, err)
		}
	}
}

func TestStartFailsWhenTheServerExits(t *testing.T) {
	t.Parallel()
	p := shell(t, `echo "bind: address already in use" >&2; exit 3`)
	r, err := p.Start()
	if err == nil {
		t.Fatal("Start of a server that exits succeeded")
	}
	if !strings.Contains(err.Error(), "sh exited while starting (exit status 3)") {
		t.Errorf("Start: %v, want it to say the server exited and how", err)
	}
	if r == nil || !strings.Contains(r.Output(), "address already in use") {
		t.Errorf("Start returned run %v, want one whose Output says why it failed", r)
	}
	if tail := p.Tail(); !strings.HasPrefix(tail, "sh output (last lines):\n\tbind: address already in use") {
		t.Errorf("Tail() = %q", tail)
	}
	if p.Running() {
		t.Error("Running() after a failed Start")
	}
}

func TestStartFailsWhenNotReadyInTime(t *testing.T) {
	t.Parallel()
	sh, err := Binary{Name: "sh", Hint: "a POSIX shell"}.Path()
	if err != nil {
		t.Fatal(err)
	}
	p := New(Config{
		Name:    "mute",
		Command: func() (Command, error) { return Command{Path: sh, Args: []string{"-c", "exec sleep 600"}}, nil },
		Ready: func(ctx context.Context, r *Run) error {
			return Poll(ctx, 5*time.Millisecond, func(context.Context) error { return errors.New("no answer") })
		},
		ReadyTimeout: 100 * time.Millisecond,
	})
	t.Cleanup(func() { _ = p.Stop() })
	r, err := p.Start()
	if err == nil || !strings.Contains(err.Error(), "mute not ready within 100ms (last: no answer)") {
		t.Fatalf("Start: %v, want the timeout and the last error", err)
	}
	select {
	case <-r.Done():
	default:
		t.Fatal("Start left the run that was not ready running")
	}
}

func TestConcurrentControl(t *testing.T) {
	t.Parallel()
	p := shell(t, `echo ready; exec sleep 600`)
	if _, err := p.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	wg.Go(func() {
		for range 3 {
			if _, err := p.Restart(); err != nil {
				errs <- err
			}
		}
	})
	wg.Go(func() {
		for range 20 {
			// A restart may come between: ErrNotRunning is fine then.
			if err := p.Pause(); err != nil && !errors.Is(err, ErrNotRunning) {
				errs <- err
			}
			if err := p.Resume(); err != nil && !errors.Is(err, ErrNotRunning) {
				errs <- err
			}
			_, _, _ = p.Live(), p.Running(), p.Output()
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestBinary(t *testing.T) {
	// Not parallel: t.Setenv.
	hint := "install it with `apt-get install nothing`"
	t.Setenv("SERVERTEST_BIN", "")
	b := Binary{Name: "servertest-no-such-server", Env: "SERVERTEST_BIN", Hint: hint}
	if _, err := b.Path(); err == nil || err.Error() != "servertest-no-such-server not found on PATH: "+hint {
		t.Errorf("missing binary: %v", err)
	}
	t.Setenv("SERVERTEST_BIN", "/nonexistent/server")
	_, err := b.Path()
	if err == nil || !strings.Contains(err.Error(), `SERVERTEST_BIN="/nonexistent/server" is not an executable`) ||
		!strings.Contains(err.Error(), "servertest-no-such-server from PATH") || !strings.Contains(err.Error(), hint) {
		t.Errorf("bad variable: %v", err)
	}
	t.Setenv("SERVERTEST_BIN", "sh")
	if bin, err := b.Path(); err != nil || filepath.Base(bin) != "sh" {
		t.Errorf("variable naming sh: %q, %v", bin, err)
	}
	t.Setenv("SERVERTEST_BIN", "")
	fake := t.TempDir()
	if err := os.WriteFile(filepath.Join(fake, "servertest-no-such-server"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", fake+string(filepath.ListSeparator)+os.Getenv("PATH"))
	b.Find = func() (string, error) { return "/opt/pinned/server", nil }
	if bin, err := b.Path(); err != nil || bin != "/opt/pinned/server" {
		t.Errorf("with Find: %q, %v; want Find's answer, never PATH's", bin, err)
	}
}

func TestFreePortsDiffer(t *testing.T) {
	t.Parallel()
	ports, err := FreePorts(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := make(map[int]bool)
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Fatalf("FreePorts(8) = %v", ports)
		}
		seen[p] = true
	}
}

// bindAlone binds a socket without SO_REUSEADDR to 127.0.0.1:port and
// closes it: it fails while any other socket has the port.
func bindAlone(port int) error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	return syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
}

// A killed server's Config.Ports stay bound, not listening, until its
// Restart (a connection is refused, as by a dead server, and no other
// socket gets the port); Restart and Stop let them go.
func TestKilledServerKeepsItsPorts(t *testing.T) {
	t.Parallel()
	ports, err := FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	sh, err := Binary{Name: "sh", Hint: "a POSIX shell"}.Path()
	if err != nil {
		t.Fatal(err)
	}
	p := New(Config{
		Name:    "sleeper",
		Command: func() (Command, error) { return Command{Path: sh, Args: []string{"-c", "exec sleep 600"}}, nil },
		Ports:   func() []int { return ports },
	})
	t.Cleanup(func() { _ = p.Stop() })
	if _, err := p.Start(); err != nil {
		t.Fatal(err)
	}
	for _, port := range ports {
		if err := bindAlone(port); err != nil {
			t.Fatalf("port %d is not free while the server (which does not listen) runs: %v", port, err)
		}
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, port := range ports {
		if err := bindAlone(port); !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("port %d after Kill: bind gave %v, want EADDRINUSE (held for the Restart)", port, err)
		}
		if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			c.Close()
			t.Errorf("port %d after Kill accepted a connection, want it refused", port)
		}
	}
	if _, err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	for _, port := range ports {
		if err := bindAlone(port); err != nil {
			t.Errorf("port %d after Restart: %v, want it let go for the new run", port, err)
		}
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, port := range ports {
		if err := bindAlone(port); err != nil {
			t.Errorf("port %d after Stop: %v, want it let go", port, err)
		}
	}
}

// RetryTakenPorts starts again only after a taken port, and at most
// StartAttempts times.
func TestRetryTakenPorts(t *testing.T) {
	other := errors.New("bad config")
	for _, c := range []struct {
		name      string
		fails     int  // starts that fail before one succeeds
		taken     bool // whether they fail on a taken port
		wantCalls int
		wantErr   bool
	}{
		{"first start", 0, true, 1, false},
		{"two ports taken", 2, true, 3, false},
		{"other failure", 2, false, 1, true},
		{"always taken", 100, true, StartAttempts, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			err := RetryTakenPorts(func() (bool, error) {
				calls++
				if calls <= c.fails {
					if c.taken {
						return true, errors.New("address already in use")
					}
					return false, other
				}
				return false, nil
			})
			if calls != c.wantCalls || (err != nil) != c.wantErr {
				t.Fatalf("%d starts, error %v; want %d starts, error %v", calls, err, c.wantCalls, c.wantErr)
			}
			if !c.taken && !errors.Is(err, other) {
				t.Fatalf("error %v does not wrap start's", err)
			}
		})
	}
}
