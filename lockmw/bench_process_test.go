package lockmw_test

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/benchsuite"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// The cross-process contention benchmark: like BenchmarkContended, but each
// contender is a separate OS process (this test binary re-executed, see
// TestMain and runProcessWorker) with its own go-redis client and its own
// Locker, so every hand-off crosses Lockers.
var (
	xprocWindow = flag.Duration("lockmw.xwindow", time.Second,
		"measuring window of each BenchmarkContendedProcesses run")
	xprocWarmUp = flag.Duration("lockmw.xwarmup", time.Second,
		"warm-up of each BenchmarkContendedProcesses run, before the window opens")
)

// xprocWorkerEnv makes the test binary act as one contender of
// BenchmarkContendedProcesses (see TestMain): the value is
// "MODE KEY ADDR[,ADDR...] I N" with MODE one of the xproc* constants, for
// worker I of N.
const xprocWorkerEnv = "LOCKMW_TEST_XPROC_WORKER"

const (
	xprocDefault = "default" // lockmw.New, Acquire
	xprocFair    = "fair"    // lockmw.New, Acquire with Fair()
	xprocRedlock = "redlock" // lockmw.NewRedlock over every ADDR, Acquire
	xprocRaw     = "raw"     // SET NX PX, 1 ms sleep between attempts, compare-and-delete
	// xprocRing is no lock at all: the processes pass a turn around a ring,
	// each PUBLISHing to the next when its 2 ms are up. It is the ceiling
	// of any hand-off that tells the next process through Redis: what one
	// PUBLISH and one wake-up of another process cost on this machine.
	xprocRing = "ring"
)

// xprocMaxRun bounds a worker's life on its own: it stops after this long
// even if the parent never tells it to (and when its standard input closes,
// which is what happens when the parent dies).
const xprocMaxRun = 2 * time.Minute

// BenchmarkContendedProcesses measures one key contended by 4 and by 16
// processes, each holding it for 2 ms per acquisition and asking again at
// once, for the default mode, Fair, Redlock over 5 masters, and the raw
// anchor (go-redis SET NX PX retried every 1 ms, released by a
// compare-and-delete script). It reports what BenchmarkContended reports
// (util, gap-p50-µs, gap-p99-µs, cmds/acq, jain over acquisitions per
// process, wait-p99-ms), plus acqs, the acquisitions measured. For each
// number of processes the modes take turns, benchsuite.Rounds runs each
// (benchsuite.Interleave: procs=16/r1/default …), and the medians over the
// rounds follow the result lines.
//
// b.N is not used: each run lets the processes warm up for -lockmw.xwarmup
// (1 s: scripts loaded, connections and subscriptions made, waiters
// queueing), then measures the acquisitions granted within a fixed window of
// -lockmw.xwindow (1 s), whatever b.N is. A run takes at least make bench's
// -benchtime of 2 s, so the framework runs it once.
//
// Timestamps. time.Now's monotonic reading is relative to the start of the
// process that read it (the runtime subtracts its own start time), so two
// processes' readings cannot be compared. The workers instead read
// CLOCK_MONOTONIC itself (monoNanos, clock_gettime): on Linux that is one
// clock for every process of the machine, so the parent compares the
// workers' readings, and its own, as they are: there is no offset to
// estimate, and the alignment error is zero. What remains is the error
// BenchmarkContended has too: a reading is taken just after Acquire returns
// and just before Release is called, so a measured hold lies inside the true
// one and a measured gap is longer than the true one by the time between
// those readings and the events (a clock_gettime call, well under 1 µs, plus
// whatever the scheduler of this loaded machine inserts, which the figures
// rightly include). The parent checks that no worker's reading precedes the
// start signal it sent (a worker on another clock would fail that), and that
// no two measured holds overlap. Elsewhere than Linux, monoNanos reads the
// wall clock, also one for the machine, which is wrong only if the clock is
// stepped during a run.
//
// The window is [ts, te] on that clock, ts read before the INFO that opens
// it, te after the INFO that closes it; an acquisition is measured when it
// was granted inside the window. cmds/acq divides the servers' command
// count between the two INFO calls (less the first INFO, counted by the
// second) by those acquisitions: the acquisitions straddling either edge
// make it err by about one acquisition's commands, against hundreds of
// acquisitions per window.
func BenchmarkContendedProcesses(b *testing.B) {
	srv := redistest.Start(b)
	redlock := sync.OnceValue(func() []*redistest.Server { return redistest.StartN(b, 5) })
	modes := []struct {
		name, mode string
		servers    func() []*redistest.Server
	}{
		{"default", xprocDefault, func() []*redistest.Server { return []*redistest.Server{srv} }},
		{"fair", xprocFair, func() []*redistest.Server { return []*redistest.Server{srv} }},
		{"redlock5", xprocRedlock, redlock},
		{"raw-setnx-poll1ms", xprocRaw, func() []*redistest.Server { return []*redistest.Server{srv} }},
		{"ceiling-publish-ring", xprocRing, func() []*redistest.Server { return []*redistest.Server{srv} }},
	}
	var names []string
	for _, m := range modes {
		names = append(names, m.name)
	}
	for _, procs := range []int{4, 16} {
		b.Run(fmt.Sprintf("procs=%d", procs), func(b *testing.B) {
			benchsuite.Interleave(b, names, func(b *testing.B, i int) benchsuite.Figures {
				m := modes[i]
				key := fmt.Sprintf("xproc:%s:%d", m.name, procs)
				c := runProcessContention(b, m.servers(), m.mode, key, procs)
				f := c.report(b)
				f.Report(b, float64(len(c.holds)), "acqs")
				return f
			})
		})
	}
}

// xprocWorker is the parent's side of one worker process.
type xprocWorker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	ready chan error // the worker said "ready" (nil) or could not
	done  chan xprocResult
}

// xprocResult is what a worker reported when it stopped.
type xprocResult struct {
	holds []xprocHold
	err   error
}

// xprocHold is one acquisition, in CLOCK_MONOTONIC nanoseconds: asked (Acquire
// called), got (it returned), done (just before Release).
type xprocHold struct{ asked, got, done int64 }

// runProcessContention runs procs worker processes contending for key on
// servers, and returns what they did within the measuring window, with
// perGo counting acquisitions per process.
func runProcessContention(b *testing.B, servers []*redistest.Server, mode, key string, procs int) contention {
	b.Helper()
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	spec := fmt.Sprintf("%s %s %s", mode, key, strings.Join(addrs, ","))
	workers := make([]*xprocWorker, procs)
	for i := range workers {
		workers[i] = startProcessWorker(b, fmt.Sprintf("%s %d %d", spec, i, procs))
	}
	for i, w := range workers {
		select {
		case err := <-w.ready:
			if err != nil {
				b.Fatalf("worker %d: %v", i, err)
			}
		case <-time.After(30 * time.Second):
			b.Fatalf("worker %d not ready after 30s", i)
		}
	}

	goAt := monoNanos()
	for i, w := range workers {
		if _, err := io.WriteString(w.stdin, "go\n"); err != nil {
			b.Fatalf("worker %d: start: %v", i, err)
		}
	}
	time.Sleep(*xprocWarmUp)
	ts := monoNanos()
	before := commandsOn(b, servers)
	statsBefore := commandStatsOn(b, servers)
	time.Sleep(*xprocWindow)
	statsAfter := commandStatsOn(b, servers)
	after := commandsOn(b, servers)
	te := monoNanos()
	for _, w := range workers {
		_, _ = io.WriteString(w.stdin, "stop\n")
		_ = w.stdin.Close()
	}

	c := contention{perGo: make([]int, procs), wall: time.Duration(te - ts)}
	for i, w := range workers {
		var r xprocResult
		select {
		case r = <-w.done:
		case <-time.After(30 * time.Second):
			b.Fatalf("worker %d did not stop within 30s of being told to", i)
		}
		if r.err != nil {
			b.Fatalf("worker %d: %v", i, r.err)
		}
		for _, h := range r.holds {
			if h.asked < goAt {
				b.Fatalf("worker %d asked at %d, before the start signal at %d: not the parent's clock", i, h.asked, goAt)
			}
			if h.got < ts || h.got > te {
				continue
			}
			c.holds = append(c.holds, benchsuite.Interval{Start: time.Unix(0, h.got), End: time.Unix(0, h.done)})
			c.waits = append(c.waits, time.Duration(h.got-h.asked))
			c.perGo[i]++
		}
	}
	if len(c.holds) < 2 {
		b.Fatalf("only %d acquisitions in the %v window", len(c.holds), *xprocWindow)
	}
	// Every server counted the INFO that read "before", and the two that
	// read the command statistics.
	c.commands = after - before - 3*int64(len(servers))
	b.Logf("%d processes, %d acquisitions; Redis commands per acquisition: %s",
		procs, len(c.holds), commandMix(statsBefore, statsAfter, len(c.holds)))
	benchsuite.SortHolds(c.holds)
	return c
}

// commandsOn sums INFO stats total_commands_processed over servers.
func commandsOn(tb testing.TB, servers []*redistest.Server) int64 {
	var n int64
	for _, s := range servers {
		n += serverCommands(tb, s)
	}
	return n
}

// commandStatsOn sums INFO commandstats calls per command over servers,
// and the microseconds Redis spent running them (the key "µs of Redis CPU").
func commandStatsOn(tb testing.TB, servers []*redistest.Server) map[string]int64 {
	calls := map[string]int64{}
	for _, s := range servers {
		for k, v := range s.Info(tb, "commandstats") {
			name, ok := strings.CutPrefix(k, "cmdstat_")
			if !ok {
				continue
			}
			// "calls=12,usec=34,..."
			for _, field := range strings.Split(v, ",") {
				f, val, _ := strings.Cut(field, "=")
				if f != "calls" && f != "usec" {
					continue
				}
				n, err := strconv.ParseInt(val, 10, 64)
				if err != nil {
					tb.Fatalf("commandstats %s=%q: %v", k, v, err)
				}
				if f == "usec" {
					calls["µs of Redis CPU"] += n
				} else {
					calls[name] += n
				}
			}
		}
	}
	return calls
}

// commandMix formats the commands counted between two commandstats
// readings per acquisition, most frequent first.
func commandMix(before, after map[string]int64, acqs int) string {
	type count struct {
		name string
		n    int64
	}
	var cs []count
	for name, n := range after {
		if name == "info" {
			continue
		}
		if d := n - before[name]; d > 0 {
			cs = append(cs, count{name, d})
		}
	}
	slices.SortFunc(cs, func(a, b count) int { return int(b.n - a.n) })
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s %.2f", c.name, float64(c.n)/float64(acqs)))
	}
	return strings.Join(out, ", ")
}

// startProcessWorker runs this test binary as one worker (see
// runProcessWorker), killed at cleanup if it is still running then.
func startProcessWorker(b *testing.B, spec string) *xprocWorker {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), xprocWorkerEnv+"="+spec)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	w := &xprocWorker{cmd: cmd, stdin: stdin, ready: make(chan error, 1), done: make(chan xprocResult, 1)}
	waited := make(chan struct{})
	go func() {
		r := readWorker(bufio.NewReader(stdout), w.ready)
		_ = cmd.Wait() // after reading to EOF, as exec requires
		w.done <- r
		close(waited)
	}()
	b.Cleanup(func() {
		_ = cmd.Process.Kill() // fails harmlessly once it has exited
		<-waited
	})
	return w
}

// readWorker reads a worker's output: "ready", then one "h ASKED GOT DONE"
// line per acquisition, then "end".
func readWorker(out *bufio.Reader, ready chan<- error) xprocResult {
	line, err := out.ReadString('\n')
	if line != "ready\n" {
		if err == nil {
			err = fmt.Errorf("said %q", line)
		}
		ready <- fmt.Errorf("no ready line: %w", err)
		return xprocResult{err: err}
	}
	ready <- nil
	var r xprocResult
	for {
		line, err := out.ReadString('\n')
		if err != nil {
			r.err = fmt.Errorf("output ended without \"end\": %w", err)
			return r
		}
		if line == "end\n" {
			return r
		}
		var h xprocHold
		if _, err := fmt.Sscanf(line, "h %d %d %d\n", &h.asked, &h.got, &h.done); err != nil {
			r.err = fmt.Errorf("bad line %q: %w", line, err)
			return r
		}
		r.holds = append(r.holds, h)
	}
}

// runProcessWorker is a worker of BenchmarkContendedProcesses: it connects,
// prints "ready", waits for "go" on its standard input, then acquires key,
// holds it for holdFor, releases it and asks again, until "stop", the end
// of its standard input, or xprocMaxRun. It then prints one line per
// acquisition and "end".
func runProcessWorker(spec string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "xproc worker:", err)
		return 2
	}
	var mode, key, addrs string
	var idx, procs int
	if _, err := fmt.Sscan(spec, &mode, &key, &addrs, &idx, &procs); err != nil {
		return fail(fmt.Errorf("bad spec %q: %w", spec, err))
	}
	var clients []redis.UniversalClient
	for _, addr := range strings.Split(addrs, ",") {
		o := &redis.Options{Addr: addr}
		benchClient(o)
		c := redis.NewClient(o)
		defer c.Close()
		clients = append(clients, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), xprocMaxRun)
	defer cancel()

	var acquire func(ctx context.Context) (release func() error, err error)
	switch mode {
	case xprocDefault, xprocFair, xprocRedlock:
		var l *lockmw.Locker
		var err error
		if mode == xprocRedlock {
			l, err = lockmw.NewRedlock(clients)
		} else {
			l, err = lockmw.New(clients[0])
		}
		if err != nil {
			return fail(err)
		}
		defer l.Close()
		var opts []lockmw.AcquireOption
		if mode == xprocFair {
			opts = append(opts, lockmw.Fair())
		}
		acquire = func(ctx context.Context) (func() error, error) {
			lease, err := l.Acquire(ctx, key, opts...)
			if err != nil {
				return nil, err
			}
			return func() error { return lease.Release(context.Background()) }, nil
		}
	case xprocRing:
		client := clients[0]
		ps := client.Subscribe(ctx, fmt.Sprintf("%s:%d", key, idx))
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
			return fail(err)
		}
		turns := ps.Channel()
		next := fmt.Sprintf("%s:%d", key, (idx+1)%procs)
		first := idx == 0
		acquire = func(ctx context.Context) (func() error, error) {
			if !first {
				select {
				case <-turns:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			first = false
			return func() error { return client.Publish(context.Background(), next, "").Err() }, nil
		}
	case xprocRaw:
		client := clients[0]
		var n int
		acquire = func(ctx context.Context) (func() error, error) {
			n++
			tok := fmt.Sprintf("%d:%d", os.Getpid(), n)
			for {
				err := client.Do(ctx, "SET", key, tok, "NX", "PX", 10000).Err()
				if err == nil {
					return func() error { return rawRelease.Run(context.Background(), client, []string{key}, tok).Err() }, nil
				}
				if !errors.Is(err, redis.Nil) {
					return nil, err
				}
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(time.Millisecond):
				}
			}
		}
	default:
		return fail(fmt.Errorf("unknown mode %q", mode))
	}

	in := bufio.NewReader(os.Stdin)
	fmt.Println("ready")
	if line, err := in.ReadString('\n'); line != "go\n" {
		return fail(fmt.Errorf("expected \"go\", read %q (%v)", line, err))
	}
	go func() {
		_, _ = in.ReadString('\n') // "stop", or EOF when the parent is gone
		cancel()
	}()

	var holds []xprocHold
	for ctx.Err() == nil {
		asked := monoNanos()
		release, err := acquire(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return fail(err)
		}
		got := monoNanos()
		benchsuite.Hold(holdFor)
		done := monoNanos()
		if err := release(); err != nil && ctx.Err() == nil {
			return fail(err)
		}
		holds = append(holds, xprocHold{asked, got, done})
	}
	out := bufio.NewWriter(os.Stdout)
	for _, h := range holds {
		fmt.Fprintf(out, "h %d %d %d\n", h.asked, h.got, h.done)
	}
	fmt.Fprintln(out, "end")
	if err := out.Flush(); err != nil {
		return fail(err)
	}
	return 0
}
