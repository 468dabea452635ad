// Package pgtest starts real PostgreSQL servers for tests, on
// internal/testkit/servertest: one server per Start, on a free 127.0.0.1 port,
// its data directory in a temporary directory removed at t.Cleanup, with fsync
// and full_page_writes off. Commits still write the write-ahead log to the
// kernel (synchronous_commit stays on), so a killed server loses no committed
// transaction: Restart recovers them, as a crashed production server would (its
// machine does not crash here). Faults: Pause (SIGSTOP of the postmaster and
// every backend, returning once all have stopped), Resume, Kill (SIGKILL of
// them all), Restart, TerminateBackends (pg_terminate_backend, a killed
// connection) and a TCP proxy (StartProxy) that cuts one client's link.
//
// The server binaries come from Debian's postgresql package, which does
// not put them on PATH: pgtest finds them through LOCKMW_PG_BINDIR, then
// `pg_config --bindir`, then /usr/lib/postgresql/*/bin. PostgreSQL refuses
// to run as root, so when the test runs as root, initdb and postgres run
// as the user nobody (through setpriv, with the parent-death signal set
// again after the change of user, so that a crashed test leaves no server
// behind), in a directory that user owns. One initdb per test binary
// makes a template data directory; each server starts from a copy.
//
// Clients connect to URL as the superuser postgres (trust authentication
// on loopback); the package itself runs SQL through psql (Exec), so that
// it needs no Go driver.
package pgtest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/servertest"
)

// installHint says how to get PostgreSQL, in every error about it.
const installHint = "install it with `apt-get install postgresql` (or run `make test`, which installs it), " +
	"or set LOCKMW_PG_BINDIR to the directory holding initdb and postgres"

const (
	readyTimeout = 60 * time.Second
	stopTimeout  = 10 * time.Second
)

// Server is one PostgreSQL server (a postmaster and its backends).
type Server struct {
	proc *servertest.Process
	bin  string // the binaries' directory
	base string // owned by the server's user: data/ and the socket
	port int
	cred []string // setpriv's arguments before the program; nil when not root

	mu sync.Mutex // serializes Pause, Resume, Kill, Restart
	// paused holds the backends Pause stopped, for Resume.
	paused []int
}

// Start starts a server and returns once it accepts connections. It calls
// t.Fatalf, with the server's output, when PostgreSQL is missing or does
// not start within 30 seconds; it never skips the test.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := BinDir()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	cred, owner, err := credentials()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	tmpl, err := template(bin, cred, owner)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	base, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if err := chown(base, owner); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if out, err := runAs(cred, "cp", "-a", tmpl, filepath.Join(base, "data")); err != nil {
		t.Fatalf("pgtest: copying the template data directory: %v\n%s", err, out)
	}
	s := &Server{bin: bin, base: base, cred: cred}
	s.proc = servertest.New(servertest.Config{
		Name:  "postgres",
		Ports: func() []int { return []int{s.port} },
		Command: func() (servertest.Command, error) {
			args := []string{filepath.Join(bin, "postgres"), "-D", filepath.Join(base, "data"),
				"-k", base, "-h", "127.0.0.1", "-p", strconv.Itoa(s.port),
				"-c", "fsync=off", "-c", "full_page_writes=off",
				"-c", "max_connections=400", "-c", "shared_buffers=32MB",
				"-c", "log_min_messages=warning", "-c", "log_min_error_statement=panic"}
			path, args := args[0], args[1:]
			if cred != nil {
				path, args = "setpriv", append(slices.Clone(cred), append([]string{path}, args...)...)
			}
			return servertest.Command{Path: path, Args: args, Dir: base}, nil
		},
		Ready: func(ctx context.Context, r *servertest.Run) error {
			return servertest.Poll(ctx, 20*time.Millisecond, func(ctx context.Context) error {
				if strings.Contains(r.Output(), "could not bind") {
					return errPortTaken
				}
				return s.isReady(ctx)
			})
		},
		ReadyTimeout: readyTimeout,
	})
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("pgtest: %v\n%s", err, s.proc.Tail())
		}
	})
	for try := 0; ; try++ {
		if s.port, err = servertest.FreePort(); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		if _, err = s.proc.Start(); err == nil {
			return s
		}
		if !errors.Is(err, errPortTaken) || try == 3 {
			t.Fatalf("pgtest: starting postgres: %v\n%s", err, s.proc.Tail())
		}
	}
}

var errPortTaken = errors.New("port taken")

// isReady reports whether the server accepts connections: it sends a
// startup message (as postgres, protocol 3.0) and reads the first reply,
// an authentication request when it does (no subprocess: pg_isready can
// take seconds to start on a loaded machine).
func (s *Server) isReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", s.Addr())
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	body := append([]byte{0, 3, 0, 0}, "user\x00postgres\x00database\x00postgres\x00\x00"...)
	msg := binary.BigEndian.AppendUint32(nil, uint32(len(body)+4))
	if _, err := c.Write(append(msg, body...)); err != nil {
		return err
	}
	reply := make([]byte, 512)
	n, err := io.ReadAtLeast(c, reply, 1)
	if err != nil {
		return err
	}
	switch {
	case reply[0] == 'R':
		return nil
	case reply[0] == 'E' && strings.Contains(string(reply[:n]), "53300"): // too many clients: it serves
		return nil
	}
	return fmt.Errorf("not accepting connections yet: %q", reply[:n])
}

// URL returns a connection URL for the server's postgres database as the
// superuser postgres, e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable.
func (s *Server) URL() string { return URLFor(s.Addr()) }

// URLFor returns the URL of a server (or a proxy in front of one) at addr.
func URLFor(addr string) string {
	return "postgres://postgres@" + addr + "/postgres?sslmode=disable"
}

// Addr returns the server's address, 127.0.0.1:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Tail returns the last lines of the server's output, for failure messages.
func (s *Server) Tail() string { return s.proc.Tail() }

// Exec runs sql with psql and returns its unaligned output, failing the
// test when psql fails.
func (s *Server) Exec(t testing.TB, sql string) string {
	t.Helper()
	out, err := s.TryExec(sql)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return out
}

// TryExec runs sql with psql and returns its unaligned output, or an error
// with psql's message.
func (s *Server) TryExec(sql string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
		"-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", "postgres", "-d", "postgres", "-c", sql)
	cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=5", "PGAPPNAME=pgtest")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("psql %q: %v: %s", sql, err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// TerminateBackends kills (pg_terminate_backend) every client backend
// whose application_name is app, as an administrator or a failover would,
// and returns how many it killed.
func (s *Server) TerminateBackends(t testing.TB, app string) int {
	t.Helper()
	n, err := s.TryTerminateBackends(app)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return n
}

// TryTerminateBackends is TerminateBackends returning psql's error (the
// server paused or down, for example) instead of failing the test.
func (s *Server) TryTerminateBackends(app string) (int, error) {
	out, err := s.TryExec("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = '" +
		strings.ReplaceAll(app, "'", "''") + "' AND pid <> pg_backend_pid()")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(out)
	if err != nil {
		return 0, fmt.Errorf("pg_terminate_backend: %q", out)
	}
	return n, nil
}

// Pause stops the postmaster and every backend (SIGSTOP; backends are
// sessions of their own, outside the postmaster's process group) and
// returns once all have stopped: the server keeps its sockets but answers
// nothing until Resume.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.proc.Pause(); err != nil {
		t.Fatalf("pgtest: Pause: %v\n%s", err, s.proc.Tail())
	}
	// The postmaster is stopped: it forks no new backend.
	kids := children(s.proc.Run().Pid())
	for _, pid := range kids {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	s.paused = kids
	deadline := time.Now().Add(readyTimeout)
	for _, pid := range kids {
		for !stoppedOrGone(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("pgtest: Pause: backend %d not stopped within %v", pid, readyTimeout)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// Resume undoes Pause (SIGCONT).
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pid := range s.paused {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	s.paused = nil
	if err := s.proc.Resume(); err != nil {
		t.Fatalf("pgtest: Resume: %v\n%s", err, s.proc.Tail())
	}
}

// Kill SIGKILLs the postmaster and every backend and returns once they are
// gone; the data stays for Restart. Killing a server that is not running
// does nothing.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.killLocked(); err != nil {
		t.Fatalf("pgtest: Kill: %v\n%s", err, s.proc.Tail())
	}
}

// Restart kills the server if it runs and starts it again on the same port
// and data (crash recovery), returning once it accepts connections.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.killLocked(); err != nil {
		t.Fatalf("pgtest: Restart: %v\n%s", err, s.proc.Tail())
	}
	s.proc.Logf("--- pgtest: restart ---")
	if _, err := s.proc.Start(); err != nil {
		t.Fatalf("pgtest: Restart: %v\n%s", err, s.proc.Tail())
	}
}

func (s *Server) killLocked() error {
	var kids []int
	if r := s.proc.Run(); r != nil && !r.Exited() {
		kids = children(r.Pid())
	}
	err := s.proc.Kill()
	for _, pid := range kids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	s.paused = nil
	deadline := time.Now().Add(stopTimeout)
	for _, pid := range kids {
		for alive(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("backend %d did not exit within %v of SIGKILL", pid, stopTimeout)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return err
}

func (s *Server) stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.killLocked()
	if serr := s.proc.Stop(); err == nil {
		err = serr
	}
	return err
}

// children returns the processes whose parent is pid.
func children(pid int) []int {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := strconv.Itoa(pid)
	var out []int
	for _, e := range procs {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := statFields(p)
		// After "pid (comm)": state ppid ...
		if len(f) > 1 && f[1] == want {
			out = append(out, p)
		}
	}
	return out
}

// statFields returns the fields of /proc/pid/stat after "pid (comm)".
func statFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// stoppedOrGone reports whether process pid is stopped, a zombie or gone.
func stoppedOrGone(pid int) bool {
	f := statFields(pid)
	return len(f) == 0 || strings.ContainsAny(f[0], "TtZX")
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	f := statFields(pid)
	return len(f) > 0 && !strings.ContainsAny(f[0], "ZX")
}

// BinDir returns the directory of PostgreSQL's server binaries: $LOCKMW_PG_BINDIR,
// else `pg_config --bindir`, else the newest /usr/lib/postgresql/*/bin.
func BinDir() (string, error) {
	if d := os.Getenv("LOCKMW_PG_BINDIR"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err != nil {
			return "", fmt.Errorf("LOCKMW_PG_BINDIR=%q holds no postgres (%v): fix or unset it; to get PostgreSQL, %s", d, err, installHint)
		}
		return d, nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("PostgreSQL's server binaries (initdb, postgres) not found: " + installHint)
}

// owner is the user the server runs as.
type owner struct{ uid, gid int }

// credentials returns setpriv's arguments to run as nobody when the test
// runs as root (nil otherwise), and the user who must own the server's
// files.
func credentials() ([]string, owner, error) {
	if os.Geteuid() != 0 {
		return nil, owner{os.Geteuid(), os.Getegid()}, nil
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		return nil, owner{}, errors.New("running as root, and PostgreSQL refuses to: setpriv (util-linux) is needed to run it as nobody")
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, owner{}, fmt.Errorf("running as root, and PostgreSQL refuses to: no user nobody to run it as (%v)", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return []string{"--reuid=" + u.Uid, "--regid=" + u.Gid, "--clear-groups", "--pdeathsig=KILL", "--"}, owner{uid, gid}, nil
}

func chown(dir string, o owner) error {
	if os.Geteuid() != 0 {
		return nil
	}
	return os.Chown(dir, o.uid, o.gid)
}

// runAs runs a command, through setpriv when cred is set.
func runAs(cred []string, name string, args ...string) ([]byte, error) {
	if cred != nil {
		name, args = "setpriv", append(slices.Clone(cred), append([]string{name}, args...)...)
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = os.TempDir()
	return cmd.CombinedOutput()
}

var (
	tmplOnce sync.Once
	tmplDir  string
	tmplErr  error
)

// template returns a data directory made by initdb once per test binary
// (removed when the binary exits... or left in the temporary directory
// when it crashes: it is small, and named pgtest-template-*).
func template(bin string, cred []string, o owner) (string, error) {
	tmplOnce.Do(func() {
		base, err := os.MkdirTemp("", "pgtest-template-")
		if err != nil {
			tmplErr = err
			return
		}
		if err := chown(base, o); err != nil {
			tmplErr = err
			return
		}
		dir := filepath.Join(base, "data")
		out, err := runAs(cred, filepath.Join(bin, "initdb"), "-D", dir, "-U", "postgres", "-A", "trust",
			"-E", "UTF8", "--no-locale", "--no-sync")
		if err != nil {
			tmplErr = fmt.Errorf("initdb: %v\n%s", err, out)
			return
		}
		tmplDir = dir
	})
	return tmplDir, tmplErr
}

// Cleanup removes the template data directory; call it from TestMain
// after m.Run. Without it the directory stays in the temporary directory.
func Cleanup() {
	if tmplDir != "" {
		_ = os.RemoveAll(filepath.Dir(tmplDir))
	}
}

// StartProxy starts a TCP proxy in front of s (servertest's toxiproxy
// wrapper), stopped at t.Cleanup; connect through URLFor(p.Addr()).
func StartProxy(t testing.TB, s *Server) *servertest.Proxy {
	t.Helper()
	return servertest.StartProxy(t, s.Addr())
}
