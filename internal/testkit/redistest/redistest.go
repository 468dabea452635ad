//go:build unix

package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/lockmw/lockmw/internal/testkit/servertest"
)

const (
	// readyTimeout bounds how long Start and Restart wait for PONG.
	readyTimeout = 10 * time.Second
	// bindAttempts is how many ports Start tries when redis-server cannot
	// bind the one it was given (another process took it in between).
	bindAttempts = 5
)

const installHint = "install it with `apt-get install redis-server` " +
	"(or run `make test`, which installs it), or set REDIS_SERVER to its path"

// binary is where redis-server comes from.
var binary = servertest.Binary{Name: "redis-server", Env: "REDIS_SERVER", Hint: installHint}

// Option configures the servers started by Start and StartN.
type Option func(*config)

type config struct {
	args []string
	// pickPort returns the port for the next start attempt. Tests replace it
	// to provoke bind failures; by default it is freePort.
	pickPort func() (int, error)
	// pickBusPort returns a cluster node's bus port for the next start
	// attempt (StartCluster only); by default it is freePort.
	pickBusPort func() (int, error)
	// replica is set by WithReplicaOf, master is its argument (which may be
	// nil, an error reported by StartN).
	replica bool
	master  *Server
	// linkTimeout bounds how long a replica's start waits for
	// master_link_status:up. Tests shorten it; by default it is readyTimeout.
	linkTimeout time.Duration
	// clusterReplicas is set by WithClusterReplicas (StartCluster only).
	clusterReplicas int
}

// WithArgs appends extra command-line arguments to redis-server, for example
// WithArgs("--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru").
// They come after the package defaults, so for single-valued directives they
// take precedence. The same arguments are used again by Restart.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// WithReplicaOf makes the server a replica of master: it is started with
// --replicaof 127.0.0.1 PORT (master's address), and Start or StartN returns
// only once INFO replication on it shows role:slave and
// master_link_status:up, that is once the initial sync has completed and the
// replica holds a copy of master's data. Start fails the test, quoting the
// output of both servers, if the link is not up within 10 seconds (for
// example because master is killed or paused).
//
// Restart of the replica starts it again as a replica of the same address
// and waits for the link in the same way, so master must be running then.
// Kill or Restart of master does not touch its replicas: as with real Redis,
// they reconnect by themselves (about once a second) and, after a master
// Restart, resync to its empty dataset. A replica promoted by a Sentinel
// failover becomes a replica of master again if it is restarted.
//
// So that the sync starts at once, master is switched to
// repl-diskless-sync-delay 0 (Redis 7 otherwise waits 5 seconds for more
// replicas before every full sync), with CONFIG SET now and on its command
// line in later Restarts, unless master's own WithArgs set that directive.
func WithReplicaOf(master *Server) Option {
	return func(c *config) { c.replica, c.master = true, master }
}

// Server is one redis-server process owned by a test. Its address stays the
// same for its whole life, across Kill and Restart. All methods are safe for
// concurrent use.
//
// Pause, Resume, Kill and Restart are servertest's Controls. Nothing is
// persisted: a killed server loses its data, and a restarted one starts
// with an empty keyspace (a replica: with a fresh copy of its master's,
// returning once its link to its master is up again, see WithReplicaOf).
// Paused, it answers nothing: requests fail only through client-side
// timeouts, and those sent meanwhile are executed on Resume.
type Server struct {
	servertest.Controls
	bin   string
	extra []string
	port  int
	addr  string
	dir   string
	// proc runs redis-server (or a Sentinel) on port.
	proc *servertest.Process
	// kind names the process in messages: "redis-server", or "sentinel"
	// for the process behind a Sentinel.
	kind string
	// master is the server this one replicates (WithReplicaOf), or nil.
	master      *Server
	linkTimeout time.Duration
	// sentinel, when set, makes this process a Sentinel (see StartSentinel)
	// instead of a plain server.
	sentinel *sentinelSpec
	// feedsReplicas is set once a replica of this server has been started:
	// later launches then pass --repl-diskless-sync-delay 0.
	feedsReplicas atomic.Bool
}

// Start starts a fresh redis-server on a free 127.0.0.1 port, with no
// persistence and its own temporary directory, and returns once the server
// answers PING. At t.Cleanup the server's process group is SIGKILLed and
// waited for (whether it is running, paused or already dead) and the
// temporary directory is removed. Start calls t.Fatalf, with the tail of the
// server's output, if the server cannot be started or does not answer PING
// within 10 seconds; it never skips the test. A replica (WithReplicaOf) is
// only returned once its link to its master is up.
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
	cfg := config{pickPort: freePort, linkTimeout: readyTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.clusterReplicas != 0 {
		t.Fatalf("redistest.StartN: WithClusterReplicas applies to StartCluster only")
	}
	if cfg.replica && cfg.master == nil {
		t.Fatalf("redistest.StartN: WithReplicaOf(nil): a replica needs a started master")
	}
	bin, err := findBinary()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}

	servers := make([]*Server, n)
	for i := range servers {
		s := newServer(t, bin)
		s.extra = append([]string(nil), cfg.args...)
		s.master = cfg.master
		s.linkTimeout = cfg.linkTimeout
		servers[i] = s
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

// StartMain starts one server as Start does, for a TestMain, which has no
// testing.TB: for example one server shared by a package's runnable
// examples. It returns the server's address and stop, which SIGKILLs the
// server's process group, waits for it and removes its temporary directory
// (problems doing so are written to standard error); call it after m.Run.
// If redis-server is missing, or does not answer PING within 10 seconds,
// StartMain returns an error saying how to install it, or quoting the tail
// of the server's output.
//
//	func TestMain(m *testing.M) {
//		addr, stop, err := redistest.StartMain()
//		if err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		redisAddr = addr
//		code := m.Run()
//		stop()
//		os.Exit(code)
//	}
func StartMain() (addr string, stop func(), err error) {
	bin, err := findBinary()
	if err != nil {
		return "", nil, fmt.Errorf("redistest: %v", err)
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return "", nil, fmt.Errorf("redistest: %v", err)
	}
	s := newProcess(&Server{bin: bin, dir: dir, kind: "redis-server", linkTimeout: readyTimeout})
	stop = func() {
		if err := s.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "redistest: %v\n", err)
		}
	}
	if err := s.firstStart(freePort); err != nil {
		stop()
		return "", nil, fmt.Errorf("redistest: %v", err)
	}
	return s.addr, stop, nil
}

// newServer returns a Server with its own temporary directory, not yet
// started. Its cleanup is registered with t before the process exists, so
// that every exit path, including a failed start, stops it and removes the
// directory.
func newServer(t testing.TB, bin string) *Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s := newProcess(&Server{bin: bin, dir: dir, kind: "redis-server"})
	t.Cleanup(func() { s.cleanup(t) })
	return s
}

// newProcess gives s the servertest.Process that runs it, and returns s.
func newProcess(s *Server) *Server {
	s.proc = servertest.New(servertest.Config{
		Name:  "redis-server",
		Ports: s.ports,
		Command: func() (servertest.Command, error) {
			args, err := s.commandLine(s.port)
			return servertest.Command{Path: s.bin, Args: args, Dir: s.dir}, err
		},
		Ready: func(_ context.Context, r *servertest.Run) error {
			if err := s.waitReady(r); err != nil {
				return err
			}
			return s.waitRole(r)
		},
	})
	s.Controls = servertest.NewControls("redistest", s.proc, nil)
	return s
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
		t.Fatalf("redistest: INFO %s on %s: %v\n%s", section, s.addr, err, s.proc.Tail())
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
	var err error
	for attempt := 1; attempt <= bindAttempts; attempt++ {
		var port int
		port, err = pickPort()
		if err != nil {
			return fmt.Errorf("picking a free port: %v", err)
		}
		s.port = port
		s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		var r *servertest.Run
		r, err = s.proc.Start()
		if err == nil {
			return nil
		}
		err = fmt.Errorf("%s on %s: %v\n%s", s.kind, s.addr, err, s.proc.Tail())
		if r == nil || !portTaken(r.Output()) {
			return err
		}
		s.proc.Logf("--- redistest: port %d taken, retrying on a new port ---", port)
	}
	return fmt.Errorf("giving up after %d ports: %w", bindAttempts, err)
}

// ports are the ports s listens on: its port, and a Cluster node's bus
// port.
func (s *Server) ports() []int {
	ports := []int{s.port}
	for i, a := range s.extra {
		if a == "--cluster-port" && i+1 < len(s.extra) {
			if p, err := strconv.Atoi(s.extra[i+1]); err == nil {
				ports = append(ports, p)
			}
		}
	}
	return ports
}

// portTaken reports whether redis-server's output says it could not bind
// its port.
func portTaken(out string) bool {
	return strings.Contains(out, "Address already in use") ||
		strings.Contains(out, "Failed listening on port")
}

// commandLine returns redis-server's arguments for a run on port. For a
// Sentinel it (re)writes the configuration file first.
func (s *Server) commandLine(port int) ([]string, error) {
	if s.sentinel != nil {
		return s.sentinel.commandLine(s.dir, port)
	}
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
	if s.feedsReplicas.Load() {
		args = append(args, "--repl-diskless-sync-delay", "0")
	}
	if m := s.master; m != nil {
		host, mport, err := net.SplitHostPort(m.addr)
		if err != nil {
			return nil, fmt.Errorf("master address %q: %v", m.addr, err)
		}
		m.prepareForReplicas()
		args = append(args, "--replicaof", host, mport)
	}
	return append(args, s.extra...), nil
}

// prepareForReplicas makes s start full syncs at once, now and after its
// Restarts, unless its own arguments say otherwise (see WithReplicaOf).
func (s *Server) prepareForReplicas() {
	if hasArg(s.extra, "--repl-diskless-sync-delay") {
		return
	}
	s.feedsReplicas.Store(true)
	// Best effort: a master that is down or paused makes the replica's link
	// wait fail, with both servers' output, which says more than this would.
	_ = oneShot(s.addr, time.Second, func(ctx context.Context, c *redis.Client) error {
		return c.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err()
	})
}

func hasArg(args []string, name string) bool {
	for _, a := range args {
		if strings.EqualFold(a, name) {
			return true
		}
	}
	return false
}

// waitRole waits, after the first PONG from p, until a replica's link to its
// master is up, or until a Sentinel is watching its master. It does nothing
// for other servers.
func (s *Server) waitRole(p *servertest.Run) error {
	switch {
	case s.sentinel != nil:
		return s.sentinel.waitWatching(s, p)
	case s.master != nil:
		err := s.waitUntil(p, s.linkTimeout, "master_link_status:up",
			func(ctx context.Context, c *redis.Client) (bool, string, error) {
				raw, err := c.Info(ctx, "replication").Result()
				if err != nil {
					return false, "", err
				}
				info := parseInfo(raw)
				state := fmt.Sprintf("role:%s master_link_status:%s", info["role"], info["master_link_status"])
				return info["role"] == "slave" && info["master_link_status"] == "up", state, nil
			})
		if err != nil {
			return fmt.Errorf("replica of %s: %v\nmaster %s %s", s.master.addr, err, s.master.addr, s.master.proc.Tail())
		}
	}
	return nil
}

// waitUntil polls check on s over fresh connections, every 20ms, until it
// reports done, p exits, or timeout passes. want describes the awaited state
// and state the last one seen, for the error.
func (s *Server) waitUntil(p *servertest.Run, timeout time.Duration, want string,
	check func(ctx context.Context, c *redis.Client) (done bool, state string, err error),
) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		if p.Exited() {
			return fmt.Errorf("exited while waiting for %s (%v)", want, p.Err())
		}
		var done bool
		err := oneShot(s.addr, time.Second, func(ctx context.Context, c *redis.Client) error {
			var err error
			var state string
			done, state, err = check(ctx, c)
			if state != "" {
				last = state
			}
			return err
		})
		if err == nil && done {
			return nil
		}
		if err != nil {
			last = "error: " + err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %s within %v (last seen: %s)", want, timeout, last)
		}
		select {
		case <-p.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitReady polls the server with PING until it answers PONG, p exits, or
// readyTimeout passes. A PONG from a process other than p (one that holds the
// port we were given) does not count.
func (s *Server) waitReady(p *servertest.Run) error {
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if p.Exited() {
			return fmt.Errorf("exited before answering PING (%v)", p.Err())
		}
		// Probe in the background so that an exit is noticed at once, not
		// after the probe's timeouts (a port thief may accept and never
		// answer).
		type result struct {
			pid string
			err error
		}
		res := make(chan result, 1)
		addr := s.addr // the probe may outlive this attempt, and s.addr change
		go func() {
			pid, err := probe(addr)
			res <- result{pid, err}
		}()
		var pid string
		var err error
		select {
		case r := <-res:
			pid, err = r.pid, r.err
		case <-p.Done():
			return fmt.Errorf("exited before answering PING (%v)", p.Err())
		}
		switch {
		case err != nil:
			// Not listening yet (or not answering): poll again.
		case pid == strconv.Itoa(p.Pid()):
			return nil
		default:
			// Someone else holds the port, so ours is about to exit with
			// a bind error.
			select {
			case <-p.Done():
				return fmt.Errorf("exited before answering PING (%v)", p.Err())
			case <-time.After(time.Until(deadline)):
				return fmt.Errorf("port %d is served by another redis (pid %s)", s.port, pid)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG within %v (last error: %v)", readyTimeout, err)
		}
		select {
		case <-p.Done():
		case <-tick.C:
		}
	}
}

// probe sends PING to addr and, if it gets PONG, returns the answering
// server's process_id.
func probe(addr string) (pid string, err error) {
	err = oneShot(addr, time.Second, func(ctx context.Context, c *redis.Client) error {
		if err := c.Ping(ctx).Err(); err != nil {
			return err
		}
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		pid = parseInfo(info)["process_id"]
		return nil
	})
	return pid, err
}

// oneShot runs fn with a go-redis client over a single new connection to
// addr, with timeout as read and write timeout and no retries. It connects
// with net.Dial first and hands that connection to the client, because
// go-redis logs every failed dial to stderr and keeps a pool-wide dial
// failure state (after PoolSize failed dials it stops dialing and re-probes
// once a second).
func oneShot(addr string, timeout time.Duration, fn func(ctx context.Context, c *redis.Client) error) error {
	conn, err := net.DialTimeout("tcp", addr, 250*time.Millisecond)
	if err != nil {
		return err
	}
	var dialed atomic.Bool
	c := redis.NewClient(&redis.Options{
		Addr: addr,
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			if dialed.Swap(true) {
				return nil, errors.New("redistest: probe connection already used")
			}
			return conn, nil
		},
		ReadTimeout:     timeout,
		WriteTimeout:    timeout,
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
	return fn(context.Background(), c)
}

// cleanup is registered with t.Cleanup by StartN.
func (s *Server) cleanup(t testing.TB) {
	if p := s.proc.Run(); p != nil && p.Exited() {
		// It died on its own (crash, SHUTDOWN, DEBUG SEGFAULT...). Not
		// necessarily a failure, but worth a look.
		t.Logf("redistest: %s on %s had exited before cleanup (%v)\n%s", s.kind, s.addr, p.Err(), s.proc.Tail())
	}
	if err := s.stop(); err != nil {
		t.Errorf("redistest: %v", err)
	}
}

// stop stops the server for good (its process group SIGKILLed and
// reaped) and removes its directory: at the cleanup of Start's servers,
// by the func StartMain returns for its own.
func (s *Server) stop() error {
	var errs []error
	if err := s.proc.Stop(); err != nil {
		errs = append(errs, fmt.Errorf("stopping %s: %v\n%s", s.addr, err, s.proc.Tail()))
	}
	if err := os.RemoveAll(s.dir); err != nil {
		errs = append(errs, fmt.Errorf("removing %s: %v", s.dir, err))
	}
	return errors.Join(errs...)
}

// findBinary returns the redis-server binary to run.
func findBinary() (string, error) { return binary.Path() }

// freePort asks the kernel for a free 127.0.0.1 port. Someone else may take
// it before redis-server binds it; firstStart retries in that case.
func freePort() (int, error) { return servertest.FreePort() }
