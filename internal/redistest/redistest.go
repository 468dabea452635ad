//go:build unix

package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

const (
	// readyTimeout bounds how long Start and Restart wait for PONG.
	readyTimeout = 10 * time.Second
	// exitTimeout bounds how long Kill and cleanup wait for a SIGKILLed
	// process to be reaped.
	exitTimeout = 10 * time.Second
	// bindAttempts is how many ports Start tries when redis-server cannot
	// bind the one it was given (another process took it in between).
	bindAttempts = 5
	// logCap is how many bytes of server output are kept in memory.
	logCap = 256 << 10
	// tailLines is how many lines of server output failure messages quote.
	tailLines = 40
)

const installHint = "install it with `apt-get install redis-server` " +
	"(or run `make test`, which installs it), or set REDIS_SERVER to its path"

// Option configures the servers started by Start and StartN.
type Option func(*config)

type config struct {
	args []string
	// pickPort returns the port for the next start attempt. Tests replace it
	// to provoke bind failures; by default it is freePort.
	pickPort func() (int, error)
}

// WithArgs appends extra command-line arguments to redis-server, for example
// WithArgs("--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru").
// They come after the package defaults, so for single-valued directives they
// take precedence. The same arguments are used again by Restart.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// Server is one redis-server process owned by a test. Its address stays the
// same for its whole life, across Kill and Restart. All methods are safe for
// concurrent use.
type Server struct {
	bin   string
	extra []string
	port  int
	addr  string
	dir   string
	out   *logBuffer

	mu      sync.Mutex
	proc    *process // nil when not running
	stopped bool     // set by cleanup; the server cannot be used afterwards
}

// process is one run of redis-server.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd.Wait has returned
	err  error         // cmd.Wait's result, valid after done is closed
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Start starts a fresh redis-server on a free 127.0.0.1 port, with no
// persistence and its own temporary directory, and returns once the server
// answers PING. At t.Cleanup the server's process group is SIGKILLed and
// waited for (whether it is running, paused or already dead) and the
// temporary directory is removed. Start calls t.Fatalf, with the tail of the
// server's output, if the server cannot be started or does not answer PING
// within 10 seconds; it never skips the test.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	return StartN(t, 1, opts...)[0]
}

// StartN starts n independent servers, concurrently, with the same options,
// and returns once all of them answer PING. Each server has the guarantees
// described for Start; the servers share nothing but the options.
func StartN(t testing.TB, n int, opts ...Option) []*Server {
	t.Helper()
	if n < 1 {
		t.Fatalf("redistest.StartN: n = %d, want at least 1", n)
	}
	cfg := config{pickPort: freePort}
	for _, o := range opts {
		o(&cfg)
	}
	bin, err := findBinary()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}

	servers := make([]*Server, n)
	for i := range servers {
		dir, err := os.MkdirTemp("", "redistest-")
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s := &Server{
			bin:   bin,
			extra: append([]string(nil), cfg.args...),
			dir:   dir,
			out:   &logBuffer{},
		}
		servers[i] = s
		// Registered before the process exists, so that every exit path,
		// including a failed start, stops it and removes dir.
		t.Cleanup(func() { s.cleanup(t) })
	}

	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.firstStart(cfg.pickPort)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return servers
}

// Addr returns the server's address, "127.0.0.1:PORT". It is fixed when the
// server is started and does not change across Kill and Restart.
func (s *Server) Addr() string { return s.addr }

// Client returns a new go-redis client connected to s, closed at t.Cleanup.
// Each opt is applied to the client's options (Addr already set) before the
// client is created, so it can change timeouts, retries, pool size and so on;
// everything else is go-redis' default.
func (s *Server) Client(t testing.TB, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: s.addr}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Pause sends SIGSTOP to the server. The process keeps its sockets, so
// clients can still connect and write, but nothing is answered until Resume:
// requests fail only through client-side timeouts. Pause fails the test if the
// server is not running.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.signalLocked(syscall.SIGSTOP); err != nil {
		t.Fatalf("redistest: Pause %s: %v\n%s", s.addr, err, s.out.tail())
	}
}

// Resume sends SIGCONT to the server, undoing Pause. Requests that were sent
// while it was paused are then executed. Resume fails the test if the server
// is not running.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.signalLocked(syscall.SIGCONT); err != nil {
		t.Fatalf("redistest: Resume %s: %v\n%s", s.addr, err, s.out.tail())
	}
}

// Kill sends SIGKILL to the server and waits until the process has exited, so
// that when Kill returns the port is closed and connections fail. All data is
// lost: nothing is persisted. Killing a server that is not running (already
// killed, or crashed) does nothing.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		t.Fatalf("redistest: Kill %s: server already stopped by its cleanup", s.addr)
	}
	if err := s.killLocked(); err != nil {
		t.Fatalf("redistest: Kill %s: %v\n%s", s.addr, err, s.out.tail())
	}
}

// Restart starts the server again, on the same address and with the same
// arguments, and returns once it answers PING. If the server is running (or
// paused) it is killed first. The new server starts with an empty keyspace.
// Restart fails the test, with the tail of the server's output, if the server
// cannot be started again on its port within 10 seconds.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		t.Fatalf("redistest: Restart %s: server already stopped by its cleanup", s.addr)
	}
	if err := s.killLocked(); err != nil {
		t.Fatalf("redistest: Restart %s: %v\n%s", s.addr, err, s.out.tail())
	}
	fmt.Fprintf(s.out, "--- redistest: restart on port %d ---\n", s.port)
	if _, err := s.launchLocked(s.port); err != nil {
		t.Fatalf("redistest: Restart %s: %v", s.addr, err)
	}
}

// Info runs INFO section on the server over a fresh connection and returns
// its "key:value" lines as a map, for example
// Info(t, "stats")["total_commands_processed"]. An empty section means plain
// INFO (the default sections); "all" and "everything" work too. Section headers and blank
// lines are dropped; values are returned as the server wrote them. Info fails
// the test if the server does not answer within 5 seconds (e.g. it is paused
// or killed).
func (s *Server) Info(t testing.TB, section string) map[string]string {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:            s.addr,
		DialTimeout:     5 * time.Second,
		ReadTimeout:     5 * time.Second,
		WriteTimeout:    5 * time.Second,
		MaxRetries:      -1,
		PoolSize:        1,
		Protocol:        2,
		DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	})
	defer c.Close()
	var sections []string
	if section != "" {
		sections = []string{section}
	}
	raw, err := c.Info(context.Background(), sections...).Result()
	if err != nil {
		t.Fatalf("redistest: INFO %s on %s: %v\n%s", section, s.addr, err, s.out.tail())
	}
	return parseInfo(raw)
}

func parseInfo(raw string) map[string]string {
	m := make(map[string]string)
	for _, line := range strings.Split(raw, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}

// firstStart launches the server for the first time, picking a new port
// whenever redis-server fails because the port is taken.
func (s *Server) firstStart(pickPort func() (int, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	for attempt := 1; attempt <= bindAttempts; attempt++ {
		var port int
		port, err = pickPort()
		if err != nil {
			return fmt.Errorf("picking a free port: %v", err)
		}
		s.port = port
		s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		var portTaken bool
		portTaken, err = s.launchLocked(port)
		if err == nil || !portTaken {
			return err
		}
		fmt.Fprintf(s.out, "--- redistest: port %d taken, retrying on a new port ---\n", port)
	}
	return fmt.Errorf("giving up after %d ports: %w", bindAttempts, err)
}

// launchLocked starts redis-server on port and waits until it answers PING.
// On failure the process is killed and reaped, and portTaken reports whether
// it failed because the port was in use.
func (s *Server) launchLocked(port int) (portTaken bool, err error) {
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--protected-mode", "no",
		"--daemonize", "no",
		"--loglevel", "warning",
	}
	args = append(args, s.extra...)
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	cmd.Stdout = s.out
	cmd.Stderr = s.out
	cmd.SysProcAttr = sysProcAttr()
	// Wait must not hang on the output pipe if something inherited it.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return false, fmt.Errorf("starting %s: %v", s.bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.proc = p

	err = s.waitReady(p)
	if err == nil {
		return false, nil
	}
	_ = s.killLocked()
	out := s.out.String()
	portTaken = strings.Contains(out, "Address already in use") ||
		strings.Contains(out, "Failed listening on port")
	return portTaken, fmt.Errorf("redis-server on %s: %v\n%s", s.addr, err, s.out.tail())
}

// waitReady polls the server with PING until it answers PONG, p exits, or
// readyTimeout passes. A PONG from a process other than p (one that holds the
// port we were given) does not count.
func (s *Server) waitReady(p *process) error {
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if p.exited() {
			return fmt.Errorf("exited before answering PING (%v)", p.err)
		}
		// Probe in the background so that an exit is noticed at once, not
		// after the probe's timeouts (a port thief may accept and never
		// answer).
		type result struct {
			pid string
			err error
		}
		res := make(chan result, 1)
		go func() {
			pid, err := s.probe()
			res <- result{pid, err}
		}()
		var pid string
		var err error
		select {
		case r := <-res:
			pid, err = r.pid, r.err
		case <-p.done:
			return fmt.Errorf("exited before answering PING (%v)", p.err)
		}
		switch {
		case err != nil:
			// Not listening yet (or not answering): poll again.
		case pid == strconv.Itoa(p.cmd.Process.Pid):
			return nil
		default:
			// Someone else holds the port, so ours is about to exit with
			// a bind error.
			select {
			case <-p.done:
				return fmt.Errorf("exited before answering PING (%v)", p.err)
			case <-time.After(time.Until(deadline)):
				return fmt.Errorf("port %d is served by another redis (pid %s)", s.port, pid)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG within %v (last error: %v)", readyTimeout, err)
		}
		select {
		case <-p.done:
		case <-tick.C:
		}
	}
}

// probe sends PING and, if it gets PONG, returns the answering server's
// process_id. It connects with net.Dial first and hands that connection to a
// one-off go-redis client, because go-redis logs every failed dial to stderr
// and keeps a pool-wide dial failure state (after PoolSize failed dials it
// stops dialing and re-probes once a second).
func (s *Server) probe() (pid string, err error) {
	conn, err := net.DialTimeout("tcp", s.addr, 250*time.Millisecond)
	if err != nil {
		return "", err
	}
	var dialed atomic.Bool
	c := redis.NewClient(&redis.Options{
		Addr: s.addr,
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			if dialed.Swap(true) {
				return nil, errors.New("redistest: probe connection already used")
			}
			return conn, nil
		},
		ReadTimeout:     time.Second,
		WriteTimeout:    time.Second,
		MaxRetries:      -1,
		PoolSize:        1,
		Protocol:        2,
		DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	})
	defer c.Close()
	defer conn.Close() // in case go-redis never used it
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		return "", err
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	return parseInfo(info)["process_id"], nil
}

// signalLocked sends sig to the running server's process group.
func (s *Server) signalLocked(sig syscall.Signal) error {
	if s.stopped {
		return errors.New("server already stopped by its cleanup")
	}
	if s.proc == nil || s.proc.exited() {
		return errors.New("server is not running (killed, or exited on its own)")
	}
	return syscall.Kill(-s.proc.cmd.Process.Pid, sig)
}

// killLocked SIGKILLs the server's process group, if there is a process, and
// waits for it to be reaped. SIGKILL also ends a stopped (paused) process.
func (s *Server) killLocked() error {
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	if !p.exited() {
		// The group may already be gone; ESRCH is fine.
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		_ = p.cmd.Process.Kill()
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(exitTimeout):
		return fmt.Errorf("pid %d did not exit within %v of SIGKILL", p.cmd.Process.Pid, exitTimeout)
	}
}

// cleanup is registered with t.Cleanup by StartN.
func (s *Server) cleanup(t testing.TB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	if p := s.proc; p != nil && p.exited() {
		// It died on its own (crash, SHUTDOWN, DEBUG SEGFAULT...). Not
		// necessarily a failure, but worth a look.
		t.Logf("redistest: redis-server on %s had exited before cleanup (%v)\n%s", s.addr, p.err, s.out.tail())
	}
	if err := s.killLocked(); err != nil {
		t.Errorf("redistest: stopping %s: %v\n%s", s.addr, err, s.out.tail())
	}
	if err := os.RemoveAll(s.dir); err != nil {
		t.Errorf("redistest: removing %s: %v", s.dir, err)
	}
}

// findBinary returns the redis-server binary to run.
func findBinary() (string, error) {
	if env := os.Getenv("REDIS_SERVER"); env != "" {
		bin, err := exec.LookPath(env)
		if err != nil {
			return "", fmt.Errorf("REDIS_SERVER=%q is not an executable (%v): "+
				"fix or unset it to use redis-server from PATH; to get redis-server, %s", env, err, installHint)
		}
		return bin, nil
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("redis-server not found on PATH: " + installHint)
	}
	return bin, nil
}

// freePort asks the kernel for a free 127.0.0.1 port. Someone else may take
// it before redis-server binds it; firstStart retries in that case.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// logBuffer collects a server's stdout and stderr, keeping the last logCap
// bytes. It is written by os/exec's copying goroutine and read by tests.
type logBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - logCap; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// tail returns the last tailLines lines of output, formatted for a failure
// message.
func (b *logBuffer) tail() string {
	out := bytes.TrimRight([]byte(b.String()), "\n")
	if len(out) == 0 {
		return "redis-server output: (empty)"
	}
	lines := bytes.Split(out, []byte("\n"))
	if len(lines) > tailLines {
		lines = lines[len(lines)-tailLines:]
	}
	return "redis-server output (last lines):\n\t" + string(bytes.Join(lines, []byte("\n\t")))
}
