//go:build unix

package servertest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	// exitTimeout bounds how long Kill and Stop wait for a SIGKILLed
	// process to be reaped.
	exitTimeout = 10 * time.Second
	// pauseTimeout bounds how long Pause waits for every thread to stop.
	pauseTimeout = 20 * time.Second
	// stopPollEvery is how often Pause looks whether the server has
	// stopped (a read of /proc).
	stopPollEvery = time.Millisecond
	// waitDelay bounds how long a run's Wait waits for its output pipes
	// after the process exited (something may have inherited them).
	waitDelay = 2 * time.Second
)

// ErrStopped is returned by a Process's methods after Stop.
var ErrStopped = errors.New("already stopped by its cleanup")

// ErrNotRunning is returned by Pause and Resume when the server has no
// process (never started, killed, or exited on its own).
var ErrNotRunning = errors.New("not running (killed, or exited on its own)")

// Command is what one run of a server executes.
type Command struct {
	// Path is the executable (see Binary).
	Path string
	// Args are its arguments, without Path.
	Args []string
	// Dir is its working directory; "" is the test's.
	Dir string
	// Env is its environment; nil is the test's (os/exec's rule).
	Env []string
}

// Config is what a launcher says about its server.
type Config struct {
	// Name names the server in messages and in Tail, for example
	// "redis-server" or "etcd m0".
	Name string
	// Command returns the command of the next run. Start and Restart call
	// it each time, so it may rewrite configuration files or use ports
	// changed since the last run. An error fails that Start.
	Command func() (Command, error)
	// Ready, when set, reports whether the run r serves: Start returns
	// once it returns nil, and fails (killing r) with its error otherwise.
	// ctx ends when r's process exits or ReadyTimeout passes, with a cause
	// (context.Cause) that says which. Ready runs
	// while the Process is locked: it must not call the Process's methods
	// other than Name, Output, Tail, Live, Running and Run (use r).
	Ready func(ctx context.Context, r *Run) error
	// ReadyTimeout, when positive, bounds Ready through its ctx; zero
	// leaves the bound to Ready.
	ReadyTimeout time.Duration
	// Ports, when set, returns the 127.0.0.1 TCP ports the server
	// listens on. From Kill until the next Start or Restart the Process
	// keeps each of them bound, not listening (a connection is refused,
	// as by a dead server), so that no other process, of this test binary
	// or another, takes one while the server is down: a server restarted
	// on a port taken meanwhile would fail to bind, or clients would
	// reach the other process's server instead.
	Ports func() []int
}

// Process supervises one server across its runs: every Start or Restart
// launches a new run (a new OS process, in a process group of its own) of
// the same Config, writing into the same output log. All methods are safe
// for concurrent use; the accessors (Name, Run, Running, Live, Output,
// Tail) never wait for the others.
type Process struct {
	cfg Config
	out *logBuffer

	run  atomic.Pointer[Run] // the latest run, nil before the first Start
	live atomic.Bool         // a run is going and is not paused

	mu      sync.Mutex // serializes Start, Restart, Pause, Resume, Kill, Stop
	stopped bool
	held    []int // sockets holding Config.Ports while killed (holdPorts)
}

// New returns a Process for cfg, not yet started.
func New(cfg Config) *Process {
	return &Process{cfg: cfg, out: &logBuffer{}}
}

// Run is one run of a Process: the OS process that one Start launched.
type Run struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd.Wait has returned
	err  error         // cmd.Wait's result, valid once done is closed
	out  *logBuffer
	from int64 // the log's offset where this run's output begins
}

// Pid returns the run's process id, which is also its process group id.
func (r *Run) Pid() int { return r.cmd.Process.Pid }

// Done returns a channel closed once the process has exited and been
// reaped.
func (r *Run) Done() <-chan struct{} { return r.done }

// Exited reports whether the process has exited and been reaped.
func (r *Run) Exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// Err returns how the process exited (os/exec's Wait error: "signal:
// killed", "exit status 1", or nil for a clean exit); nil while it runs.
func (r *Run) Err() error {
	if !r.Exited() {
		return nil
	}
	return r.err
}

// Output returns what the run has written to its stdout and stderr so far
// (as far as the log still holds it).
func (r *Run) Output() string { return r.out.since(r.from) }

// Name returns the Config's Name.
func (p *Process) Name() string { return p.cfg.Name }

// Run returns the latest run, which may have exited, or nil before the
// first Start.
func (p *Process) Run() *Run { return p.run.Load() }

// Running reports whether the latest run's process has not exited (it
// may be paused).
func (p *Process) Running() bool {
	r := p.run.Load()
	return r != nil && !r.Exited()
}

// Live reports whether the server runs and is not paused: from a
// successful launch until Pause, Kill or Stop; again after Resume.
func (p *Process) Live() bool { return p.live.Load() && p.Running() }

// Output returns the output of every run so far (the last 256 KiB of it),
// with the markers Restart and Logf wrote between them.
func (p *Process) Output() string { return p.out.String() }

// Tail returns the last 40 lines of Output, formatted for a failure
// message: "NAME output (last lines):" and the lines, indented.
func (p *Process) Tail() string { return p.out.tail(p.cfg.Name) }

// Logf writes a line into the output log, for example a marker between
// two attempts.
func (p *Process) Logf(format string, args ...any) {
	fmt.Fprintf(p.out, format+"\n", args...)
}

// Start launches a run and, if the Config has Ready, waits until it
// reports the run ready; it returns the run, even when it fails (to read
// its Output). If Ready fails, Start kills the run and returns Ready's
// error as it is. Start fails if the server is running: use Restart.
func (p *Process) Start() (*Run, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return nil, ErrStopped
	}
	if p.Running() {
		return p.run.Load(), errors.New("already running")
	}
	return p.startLocked()
}

// Restart kills the current run, if any (running or paused), writes a
// marker into the output log, and starts again as Start does.
func (p *Process) Restart() (*Run, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return nil, ErrStopped
	}
	if err := p.killLocked(); err != nil {
		return p.run.Load(), err
	}
	p.Logf("--- servertest: restart of %s ---", p.cfg.Name)
	return p.startLocked()
}

func (p *Process) startLocked() (*Run, error) {
	p.releasePortsLocked()
	c, err := p.cfg.Command()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Dir = c.Dir
	cmd.Env = c.Env
	cmd.Stdout = p.out
	cmd.Stderr = p.out
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = waitDelay
	r := &Run{cmd: cmd, done: make(chan struct{}), out: p.out, from: p.out.offset()}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %v", c.Path, err)
	}
	go func() {
		r.err = cmd.Wait()
		close(r.done)
	}()
	p.run.Store(r)
	p.live.Store(true)
	if p.cfg.Ready == nil {
		return r, nil
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	if d := p.cfg.ReadyTimeout; d > 0 {
		var cancelTimeout context.CancelFunc
		ctx, cancelTimeout = context.WithTimeoutCause(ctx, d, fmt.Errorf("%s not ready within %v", p.cfg.Name, d))
		defer cancelTimeout()
	}
	go func() {
		select {
		case <-r.done:
			cancel(fmt.Errorf("%s exited while starting (%v)", p.cfg.Name, r.err))
		case <-ctx.Done():
		}
	}()
	if err := p.cfg.Ready(ctx, r); err != nil {
		_ = p.killLocked()
		return r, err
	}
	return r, nil
}

// Pause sends SIGSTOP to the run's process group and, on Linux, returns
// once every thread of every process in it has stopped. kill(2) returns
// once the signal is queued; a process stops only when one of its threads
// has run to take it, which on a busy machine can be after it answered
// another request, so without the wait a "paused" server could still
// answer for a moment. From then on the server keeps its sockets (clients
// connect and write) but answers nothing until Resume. Pause fails with
// ErrNotRunning if there is no running process, and if the process has
// not stopped within 20 seconds or exits meanwhile.
func (p *Process) Pause() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, err := p.signalLocked(syscall.SIGSTOP)
	if err != nil {
		return err
	}
	p.live.Store(false)
	if !canObserveStop {
		return nil
	}
	deadline := time.Now().Add(pauseTimeout)
	for {
		stopped, err := groupStopped(r.Pid())
		switch {
		case r.Exited():
			return fmt.Errorf("exited while being paused (%v)", r.err)
		case err != nil:
			return fmt.Errorf("reading its state: %v", err)
		case stopped:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("pid %d not stopped within %v of SIGSTOP", r.Pid(), pauseTimeout)
		}
		time.Sleep(stopPollEvery)
	}
}

// Resume sends SIGCONT to the run's process group, undoing Pause (what
// clients sent meanwhile is then served). It fails with ErrNotRunning if
// there is no running process.
func (p *Process) Resume() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.signalLocked(syscall.SIGCONT); err != nil {
		return err
	}
	p.live.Store(true)
	return nil
}

// Kill sends SIGKILL to the run's process group (which also ends a paused
// one) and returns once the process has been reaped, so that its ports
// are closed; with Config.Ports, they stay reserved for its Restart.
// Killing a server that is not running does nothing.
func (p *Process) Kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return ErrStopped
	}
	if err := p.killLocked(); err != nil {
		return err
	}
	p.holdPortsLocked()
	return nil
}

// holdPortsLocked binds, without listening, each of Config.Ports not held
// yet. A port it cannot bind (another socket has it) is noted in the
// output log and left alone.
func (p *Process) holdPortsLocked() {
	if p.cfg.Ports == nil || len(p.held) > 0 {
		return
	}
	for _, port := range p.cfg.Ports() {
		if port == 0 {
			continue // not picked yet
		}
		fd, err := holdPort(port)
		if err != nil {
			p.Logf("--- servertest: cannot hold port %d while %s is down: %v ---", port, p.cfg.Name, err)
			continue
		}
		p.held = append(p.held, fd)
	}
}

// releasePortsLocked lets the held ports go, for the next run to bind.
func (p *Process) releasePortsLocked() {
	for _, fd := range p.held {
		_ = syscall.Close(fd)
	}
	p.held = nil
}

// holdPort returns a socket bound to 127.0.0.1:port that does not listen.
// SO_REUSEADDR lets it bind beside the dead server's connections still in
// TIME_WAIT; the kernel still never hands the port to another socket that
// asks for any free port (as FreePorts does), nor to an outgoing
// connection.
func holdPort(port int) (int, error) {
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return -1, err
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		_ = syscall.Close(fd)
		return -1, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

// Stop kills the server for good, as Kill does; later calls of Start,
// Restart, Pause, Resume and Kill fail with ErrStopped, and of Stop do
// nothing. Launchers call it at the test's cleanup.
func (p *Process) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return nil
	}
	p.stopped = true
	err := p.killLocked()
	p.releasePortsLocked()
	return err
}

// signalLocked sends sig to the running run's process group.
func (p *Process) signalLocked(sig syscall.Signal) (*Run, error) {
	if p.stopped {
		return nil, ErrStopped
	}
	r := p.run.Load()
	if r == nil || r.Exited() {
		return nil, ErrNotRunning
	}
	return r, syscall.Kill(-r.Pid(), sig)
}

// killLocked SIGKILLs the run's process group, if it runs, and waits for
// it to be reaped.
func (p *Process) killLocked() error {
	p.live.Store(false)
	r := p.run.Load()
	if r == nil {
		return nil
	}
	if !r.Exited() {
		// The group may already be gone; ESRCH is fine.
		_ = syscall.Kill(-r.Pid(), syscall.SIGKILL)
		_ = r.cmd.Process.Kill()
	}
	select {
	case <-r.done:
		return nil
	case <-time.After(exitTimeout):
		return fmt.Errorf("pid %d did not exit within %v of SIGKILL", r.Pid(), exitTimeout)
	}
}
