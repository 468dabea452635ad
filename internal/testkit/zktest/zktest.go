// Package zktest starts real ZooKeeper servers for tests: one server, or an
// ensemble of n, on free 127.0.0.1 ports, each a JVM in the foreground
// (org.apache.zookeeper.server.quorum.QuorumPeerMain) with its data under
// t.TempDir(), killed at t.Cleanup. It is a launcher on
// internal/testkit/servertest, the one process supervisor of the test kits.
// Faults: Pause (SIGSTOP, returning once every thread has stopped: a paused
// server answers nothing), Resume, Kill, Restart, CloseSession (a forced
// expiry), and a TCP proxy (StartProxy) that cuts one client's link.
//
// ZooKeeper comes from the Debian package zookeeper (not zookeeperd, which
// installs a system service); its jar is found at /usr/share/java, or
// through LOCKMW_ZOOKEEPER_JAR. Servers run with TickTime ticks, the admin
// server off, four-letter words on (srvr tells readiness and the leader),
// sessions allowed up to MaxSessionTimeout, and container nodes checked
// every ContainerCheck so that an empty lock parent goes quickly. They log
// at info level through SLF4J's simple logger (slf4j-simple.jar beside the
// ZooKeeper jar), so failures quote why a server failed. A first start
// retries on new ports when one was taken; a killed server's ports stay
// reserved until its Restart (servertest.Config.Ports).
package zktest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/servertest"
)

const (
	// TickTime is the servers' tickTime: sessions last 2 to
	// MaxSessionTimeout/TickTime ticks.
	TickTime = 100 * time.Millisecond
	// MaxSessionTimeout is the longest session timeout the servers grant.
	MaxSessionTimeout = 60 * time.Second
	// ContainerCheck is how often the servers delete empty container nodes.
	ContainerCheck = 100 * time.Millisecond

	readyTimeout = 60 * time.Second
)

const installHint = "install Debian's zookeeper package (apt-get install zookeeper; not zookeeperd, " +
	"which starts a system service), or set LOCKMW_ZOOKEEPER_JAR to a zookeeper.jar whose manifest names its class path"

// Ensemble is one or more servers started together.
type Ensemble struct {
	servers []*Server
	jar     string
	logger  string // class path of a logger binding, or ""
	opts    Options
}

// Server is one ZooKeeper server process, supervised by servertest.
// Pause (every thread of its JVM stopped), Resume and Kill are
// servertest's Controls; a killed server's data stays for Restart.
type Server struct {
	servertest.Controls
	e                           *Ensemble
	id                          int
	dir                         string
	clientPort, quorumPort, elP int
	proc                        *servertest.Process
}

// starting admits two ensembles' starts at a time: JVMs starting together
// on a small machine each take much longer than one alone.
var starting = make(chan struct{}, 2)

// Start starts one standalone server and returns once it serves. It calls
// t.Fatalf, with the server's output, when ZooKeeper is missing or not
// ready within 60 seconds; it never skips the test.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartEnsemble(t, 1).servers[0]
}

// StartEnsemble starts n servers as one ensemble (n = 1: standalone) and
// returns once a leader serves and every server answers.
func StartEnsemble(t testing.TB, n int) *Ensemble {
	t.Helper()
	return StartWith(t, n, Options{})
}

// Options are settings of StartWith beyond the defaults.
type Options struct {
	// ExtendedTypes turns on TTL nodes (zookeeper.extendedTypesEnabled),
	// which ZooKeeper leaves off by default.
	ExtendedTypes bool

	// pickPorts picks n free ports (servertest.FreePorts when nil): a
	// test's hook.
	pickPorts func(n int) ([]int, error)
}

// StartWith is StartEnsemble with options.
func StartWith(t testing.TB, n int, o Options) *Ensemble {
	t.Helper()
	starting <- struct{}{}
	defer func() { <-starting }()
	jar, err := findJar()
	if err != nil {
		t.Fatalf("zktest: %v", err)
	}
	e := &Ensemble{jar: jar, opts: o, logger: simpleLogger(jar)}
	base := t.TempDir()
	for i := range n {
		s := &Server{e: e, id: i + 1, dir: filepath.Join(base, "zk"+strconv.Itoa(i+1))}
		// No Ready check: a server of an ensemble serves only once a
		// quorum runs, so StartEnsemble launches them all, then waits.
		s.proc = servertest.New(servertest.Config{Name: "zookeeper " + strconv.Itoa(s.id), Command: s.command,
			Ports: func() []int { return []int{s.clientPort, s.quorumPort, s.elP} }})
		s.Controls = servertest.NewControls("zktest", s.proc, nil)
		e.servers = append(e.servers, s)
	}
	t.Cleanup(e.cleanup)
	if err := servertest.RetryTakenPorts(e.firstStart); err != nil {
		t.Fatalf("zktest: starting %d server(s): %v", n, err)
	}
	return e
}

// firstStart picks ports, starts every server with an empty data
// directory and waits until each serves. On failure it kills them all
// again and reports whether a port was taken.
func (e *Ensemble) firstStart() (portTaken bool, err error) {
	pick := servertest.FreePorts
	if e.opts.pickPorts != nil {
		pick = e.opts.pickPorts
	}
	ports, err := pick(3 * len(e.servers))
	if err != nil {
		return false, fmt.Errorf("free ports: %v", err)
	}
	for i, s := range e.servers {
		s.clientPort, s.quorumPort, s.elP = ports[3*i], ports[3*i+1], ports[3*i+2]
		if err := os.RemoveAll(s.dir); err != nil {
			return false, err
		}
	}
	runs := make([]*servertest.Run, len(e.servers))
	for i, s := range e.servers {
		if err = s.writeConfig(); err == nil {
			runs[i], err = s.proc.Start()
		}
		if err != nil {
			e.killAll()
			return false, fmt.Errorf("server %d: %v\n%s", s.id, err, s.proc.Tail())
		}
	}
	for _, s := range e.servers {
		if err = s.waitServing(); err != nil {
			err = fmt.Errorf("server %d: %v\n%s", s.id, err, e.tails())
			break
		}
	}
	if err == nil {
		return false, nil
	}
	e.killAll()
	for i, s := range e.servers {
		if strings.Contains(runs[i].Output(), "Address already in use") {
			portTaken = true
			s.proc.Logf("--- zktest: a port of the ensemble was taken, retrying on new ports ---")
		}
	}
	return portTaken, err
}

func (e *Ensemble) killAll() {
	for _, s := range e.servers {
		_ = s.proc.Kill()
	}
}

// simpleLogger returns the class path entry of SLF4J's simple logger
// beside jar (Debian's libslf4j-java, which zookeeper depends on), or ""
// when there is none. Without a logger binding a server writes nothing,
// and a failure could not quote why it failed (a port taken, a session
// refused).
func simpleLogger(jar string) string {
	p := filepath.Join(filepath.Dir(jar), "slf4j-simple.jar")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// Servers returns the ensemble's servers.
func (e *Ensemble) Servers() []*Server { return slices.Clone(e.servers) }

// Addrs returns every server's client address.
func (e *Ensemble) Addrs() []string {
	var out []string
	for _, s := range e.servers {
		out = append(out, s.Addr())
	}
	return out
}

// Leader returns the server that leads (the only one when standalone),
// waiting up to 60 seconds for one.
func (e *Ensemble) Leader(t testing.TB) *Server {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for {
		for _, s := range e.servers {
			if m, err := s.Mode(); err == nil && (m == "leader" || m == "standalone") {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("zktest: no leader within %v\n%s", readyTimeout, e.tails())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Ensemble returns the ensemble s belongs to.
func (s *Server) Ensemble() *Ensemble { return s.e }

// Addr is the server's client address, 127.0.0.1:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.clientPort) }

// Mode asks the server (four-letter word srvr) for its mode: standalone,
// leader or follower; an error while it does not serve.
func (s *Server) Mode() (string, error) {
	out, err := s.FourLetter("srvr")
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(out, "\n") {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("not serving: %q", strings.TrimSpace(out))
}

// FourLetter sends a four-letter word to the server and returns its answer.
func (s *Server) FourLetter(word string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(word)); err != nil {
		return "", err
	}
	var b strings.Builder
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	return b.String(), sc.Err()
}

// Restart starts the server again (killing it first if it runs) on the
// same ports and data; when serve is true, it returns once the server
// serves (it has a quorum).
func (s *Server) Restart(t testing.TB, serve bool) {
	t.Helper()
	s.Controls.Restart(t)
	if !serve {
		return
	}
	if err := s.waitServing(); err != nil {
		t.Fatalf("zktest: Restart %d: %v\n%s", s.id, err, s.e.tails())
	}
}

// Output returns the server's output (the last 256 KiB of it).
func (s *Server) Output() string { return s.proc.Output() }

// Proxy is a TCP proxy in front of one server's client port
// (servertest's toxiproxy wrapper): Cut black-holes the link, AddLatency
// slows replies, ResetConnections resets connections, Heal undoes them.
type Proxy = servertest.Proxy

// StartProxy starts a TCP proxy to s's client port, stopped at t.Cleanup.
func StartProxy(t testing.TB, s *Server) *Proxy {
	t.Helper()
	return servertest.StartProxy(t, s.Addr())
}

func (s *Server) waitServing() error {
	deadline := time.Now().Add(readyTimeout)
	var last error
	for time.Now().Before(deadline) {
		if !s.proc.Running() {
			return errors.New("exited while starting")
		}
		if _, err := s.Mode(); err == nil {
			return nil
		} else {
			last = err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("not serving within %v (last: %v)", readyTimeout, last)
}

func (s *Server) writeConfig() error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "tickTime=%d\ninitLimit=50\nsyncLimit=20\ndataDir=%s\n", TickTime.Milliseconds(), s.dir)
	fmt.Fprintf(&b, "clientPort=%d\nclientPortAddress=127.0.0.1\n", s.clientPort)
	fmt.Fprintf(&b, "maxSessionTimeout=%d\nmaxClientCnxns=0\n", MaxSessionTimeout.Milliseconds())
	b.WriteString("admin.enableServer=false\n4lw.commands.whitelist=*\nforceSync=no\n")
	if len(s.e.servers) > 1 {
		b.WriteString("standaloneEnabled=false\n")
		for _, o := range s.e.servers {
			fmt.Fprintf(&b, "server.%d=127.0.0.1:%d:%d\n", o.id, o.quorumPort, o.elP)
		}
		if err := os.WriteFile(filepath.Join(s.dir, "myid"), []byte(strconv.Itoa(s.id)+"\n"), 0o600); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(s.dir, "zoo.cfg"), []byte(b.String()), 0o600)
}

// command is the server's command line: the JVM in the foreground.
func (s *Server) command() (servertest.Command, error) {
	java, err := javaBinary.Path()
	if err != nil {
		return servertest.Command{}, err
	}
	args := []string{"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
		"-Dzookeeper.admin.enableServer=false",
		"-Dznode.container.checkIntervalMs=" + strconv.Itoa(int(ContainerCheck.Milliseconds())),
		"-Dznode.container.maxNeverUsedIntervalMs=1000"}
	if s.e.opts.ExtendedTypes {
		args = append(args, "-Dzookeeper.extendedTypesEnabled=true")
	}
	cp := s.e.jar
	if s.e.logger != "" {
		// Info and up, to stderr, timed to the millisecond.
		cp += string(os.PathListSeparator) + s.e.logger
		args = append(args, "-Dorg.slf4j.simpleLogger.showDateTime=true", "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS")
	}
	args = append(args, "-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(s.dir, "zoo.cfg"))
	return servertest.Command{Path: java, Args: args}, nil
}

func (e *Ensemble) cleanup() {
	for _, s := range e.servers {
		_ = s.proc.Stop()
	}
}

// Tails quotes every server's latest output, for a failure about the
// ensemble.
func (e *Ensemble) Tails() string { return e.tails() }

// tails quotes every server's latest output.
func (e *Ensemble) tails() string {
	procs := make([]*servertest.Process, len(e.servers))
	for i, s := range e.servers {
		procs[i] = s.proc
	}
	return servertest.Tails(procs...)
}

// javaBinary is the JVM that runs the servers.
var javaBinary = servertest.Binary{Name: "java", Hint: installHint}

// findJar returns the ZooKeeper server jar.
func findJar() (string, error) {
	if _, err := javaBinary.Path(); err != nil {
		return "", err
	}
	jar := os.Getenv("LOCKMW_ZOOKEEPER_JAR")
	if jar == "" {
		jar = "/usr/share/java/zookeeper.jar"
	}
	if _, err := os.Stat(jar); err != nil {
		return "", fmt.Errorf("%s: %v: %s", jar, err, installHint)
	}
	return jar, nil
}
