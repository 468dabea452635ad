//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/internal/testkit/servertest"
)

// TestFleet's knobs (`make fleet` passes FLEET_DURATION and FLEET_ARGS).
var (
	fleetDuration = flag.Duration("fleet.duration", 60*time.Second, "how long each case's processes contend")
	fleetProcs    = flag.Int("fleet.procs", 2, "processes per version")
	fleetWorkers  = flag.Int("fleet.workers", 2, "goroutines per process")
	fleetMasters  = flag.Int("fleet.masters", 3, "Redlock masters")
	fleetMin      = flag.Int("fleet.min", 100, "fewest acquisitions each version must make in a case")
	fleetHandover = flag.Int("fleet.handovers", 20, "fewest hand-overs old->new and new->old in a case")
	fleetMismatch = flag.Duration("fleet.mismatch", 10*time.Second, "how long the self-check (old side with another prefix: violations expected) runs; 0 skips it")
	fleetMaxWait  = flag.Duration("fleet.maxwait", 0, "when positive, a case also fails if an Acquire or TryAcquire call took longer (a stalled waiter)")
	fleetArgs     = flag.String("fleet.args", "", "more arguments for every fleetcheck process, e.g. '-try 0 -hold 2ms'")
	fleetOldArgs  = flag.String("fleet.oldargs", "", "more arguments for the old build's processes, e.g. -prefix=other: (a fleet that must fail)")
	fleetNewArgs  = flag.String("fleet.newargs", "", "more arguments for the new build's processes")
	fleetCases    = flag.String("fleet.cases", "", "comma-separated subset of the cases (default all): "+strings.Join(cases, ", "))
	fleetLive     = flag.Bool("fleet.liveness", true, "also run each case with the new build alone (and, if the mix falls short of it, the old build alone) and judge the mix's liveness against it")
	fleetWaitX    = flag.Float64("fleet.waitratio", 2, "liveness: the mix's longest acquire call may be at most this times the reference run's (and at least -fleet.waitslack more)")
	fleetWaitAdd  = flag.Duration("fleet.waitslack", 250*time.Millisecond, "liveness: a longest acquire call within this of the reference run's always passes (scheduling noise on a loaded machine)")
	fleetRateX    = flag.Float64("fleet.rateratio", 0.5, "liveness: the mix's acquisitions per second must be at least this times the reference run's")
)

// roles are the two builds, in the order they are reported.
var roles = []string{"old", "new"}

// cases are TestFleet's cases: STORE/MODE, where mixed gives each version
// a process in default mode and one with Fair (then alternating). Redlock
// has no Fair (lockmw.NewRedlock's documentation).
var cases = []string{"redis/default", "redis/fair", "redis/mixed", "redlock/default"}

// TestFleet is the mixed-fleet check (old and new releases side by side),
// opt-in: it runs only when LOCKMW_FLEET_OLD names a commit. It builds this package's program
// (main.go) from that commit (its source copied into a `git archive` of it,
// replacing any version the commit has) and from the working tree (or from
// the commit LOCKMW_FLEET_NEW, the same way), then, for each case (one
// redis-server in default mode, with Fair, or with both; Redlock over
// -fleet.masters), runs -fleet.procs processes of each build contending
// for one key for -fleet.duration. A case fails unless every process exits
// cleanly with no violation, each version acquired at least -fleet.min
// times, the lock passed between the versions at least -fleet.handovers
// times each way, and every key left in the servers expires (and, with
// -fleet.maxwait, unless no acquire call took longer).
//
// Exclusion is not enough: a fleet whose versions do not wake each other
// stays exclusive while its waiters sleep out a TTL. So each case is also
// judged on liveness (-fleet.liveness, on by default): the same fleet runs
// again with the new build alone (both halves of it), in the same
// invocation, and the mix must keep its longest acquire call within
// -fleet.waitratio times that run's (or -fleet.waitslack of it) and its
// acquisitions per second at least -fleet.rateratio times that run's. A
// mix that falls short of the new build alone is judged once more, against
// the weaker of the new build alone and the old build alone: it passes if
// the old release is as slow on its own (its own defect, which the
// upgrade ends), and the log says so. A self-check first
// runs the same fleet with the old side under another prefix
// (lockmw.WithPrefix), a fleet that does not exclude itself, and fails
// unless the check sees violations.
func TestFleet(t *testing.T) {
	old := os.Getenv("LOCKMW_FLEET_OLD")
	if old == "" {
		t.Skip("the fleet check is opt-in: LOCKMW_FLEET_OLD=<commit> (make fleet OLD=<commit>)")
	}
	bins := map[string]string{
		"old": build(t, "old", old),
		"new": build(t, "new", os.Getenv("LOCKMW_FLEET_NEW")),
	}
	if *fleetMismatch > 0 {
		t.Run("mismatch", func(t *testing.T) {
			srv := redistest.Start(t)
			res := runFleet(t, bins, []string{srv.Addr()}, "default", *fleetMismatch,
				map[string][]string{"old": {"-prefix", "fleetcheck-wrong:"}})
			res.what = "old (another prefix) and new"
			res.log(t)
			if res.stats["violations"] == 0 || res.role["old"].Violations+res.role["new"].Violations == 0 || res.failedExits == 0 {
				t.Errorf("two versions that do not share keys ran side by side and the check saw no violation (stats %v, %d processes exited with an error)",
					res.stats, res.failedExits)
			}
		})
	}
	want := map[string]bool{}
	for c := range strings.SplitSeq(*fleetCases, ",") {
		if c != "" {
			if !slices.Contains(cases, c) {
				t.Fatalf("-fleet.cases: no case %q (cases: %s)", c, strings.Join(cases, ", "))
			}
			want[c] = true
		}
	}
	for _, name := range cases {
		if len(want) > 0 && !want[name] {
			continue
		}
		store, mode, _ := strings.Cut(name, "/")
		t.Run(name, func(t *testing.T) {
			extra := map[string][]string{
				"old": strings.Fields(*fleetOldArgs),
				"new": strings.Fields(*fleetNewArgs),
			}
			mixed := runCase(t, "old and new", bins, store, mode, extra, false)
			if !*fleetLive {
				return
			}
			// The references: the same fleet of one build alone, in
			// the same invocation (a machine's speed drifts over minutes).
			alone := func(role string) *fleetResult {
				return runCase(t, role+" alone", map[string]string{"old": bins[role], "new": bins[role]}, store, mode,
					map[string][]string{"old": extra[role], "new": extra[role]}, true)
			}
			newAlone := alone("new")
			problems := judgeLiveness(mixed.liveness(), newAlone.liveness())
			t.Logf("liveness: %s", livenessTable(map[string]*fleetResult{"old and new": mixed, "new alone": newAlone}))
			if len(problems) == 0 {
				return
			}
			// The mix falls short of the new release alone: it passes only
			// if the old release alone falls as short, i.e. mixing the
			// versions costs nothing that running the old one does not.
			oldAlone := alone("old")
			t.Logf("liveness: %s", livenessTable(map[string]*fleetResult{"old and new": mixed, "new alone": newAlone, "old alone": oldAlone}))
			weaker := weakerOf(newAlone.liveness(), oldAlone.liveness())
			if again := judgeLiveness(mixed.liveness(), weaker); len(again) > 0 {
				for _, p := range problems {
					t.Errorf("liveness against the new release alone: %s", p)
				}
				for _, p := range again {
					t.Errorf("liveness against the weaker of the two releases alone: %s", p)
				}
				return
			}
			t.Logf("liveness: the mix falls short of the new release alone (%s), but not of the old release alone: "+
				"the old release's own limit, which the mix does not make worse", strings.Join(problems, "; "))
		})
	}
}

// runCase runs one fleet of case store/mode on servers of its own
// (what, e.g. "new alone", names it in the log), checks it (exclusion,
// fences, nothing left behind, and, unless it is a reference run of one
// build alone, whose pace is only measured, both roles acquiring and
// taking turns) and returns its figures.
func runCase(t *testing.T, what string, bins map[string]string, store, mode string, extra map[string][]string, reference bool) *fleetResult {
	t.Helper()
	n := 1
	if store == "redlock" {
		n = *fleetMasters
	}
	var addrs []string
	for _, s := range redistest.StartN(t, n) {
		addrs = append(addrs, s.Addr())
	}
	res := runFleet(t, bins, addrs, mode, *fleetDuration, extra)
	res.what = what
	res.log(t)
	if reference {
		res.checkSafety(t)
	} else {
		res.check(t)
	}
	checkExpiring(t, addrs)
	return res
}

// liveness is what a fleet run shows of waiting: its acquisitions per
// second (both roles) and its longest acquire call.
type liveness struct {
	rate    float64
	maxWait time.Duration
}

// liveness returns r's liveness figures.
func (r *fleetResult) liveness() liveness {
	var l liveness
	var acquired int64
	for _, role := range roles {
		acquired += r.role[role].Acquired
		l.maxWait = max(l.maxWait, time.Duration(r.role[role].MaxWait)*time.Millisecond)
	}
	l.rate = float64(acquired) / r.duration.Seconds()
	return l
}

// weakerOf is the lower rate and the longer wait of a and b.
func weakerOf(a, b liveness) liveness {
	return liveness{rate: min(a.rate, b.rate), maxWait: max(a.maxWait, b.maxWait)}
}

// judgeLiveness returns what keeps the mixed run from being as live as
// ref, the reference run: its longest acquire call may be at most
// -fleet.waitratio times ref's (or within -fleet.waitslack of it), and its
// rate at least -fleet.rateratio times ref's.
func judgeLiveness(mixed, ref liveness) []string {
	var problems []string
	allowed := max(time.Duration(float64(ref.maxWait)**fleetWaitX), ref.maxWait+*fleetWaitAdd)
	if mixed.maxWait > allowed {
		problems = append(problems, fmt.Sprintf("longest acquire call %v, more than %v (%.3gx the reference's %v, or %v more)",
			mixed.maxWait, allowed, *fleetWaitX, ref.maxWait, *fleetWaitAdd))
	}
	if want := ref.rate * *fleetRateX; mixed.rate < want {
		problems = append(problems, fmt.Sprintf("%.1f acquisitions/s, fewer than %.1f (%.3gx the reference's %.1f)",
			mixed.rate, want, *fleetRateX, ref.rate))
	}
	return problems
}

// livenessTable formats runs' liveness figures for the log, in a fixed
// order.
func livenessTable(runs map[string]*fleetResult) string {
	var b strings.Builder
	for _, what := range []string{"old and new", "new alone", "old alone"} {
		r, ok := runs[what]
		if !ok {
			continue
		}
		l := r.liveness()
		fmt.Fprintf(&b, "\n  %-12s %8.1f acquisitions/s, longest acquire call %v", what, l.rate, l.maxWait)
	}
	return b.String()
}

// build builds main.go's program for role from commit rev, or from the
// working tree when rev is "", and returns the binary's path.
func build(t *testing.T, role, rev string) string {
	t.Helper()
	pkgDir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	top := strings.TrimSpace(git(t, pkgDir, "rev-parse", "--show-toplevel"))
	rel, err := filepath.Rel(top, pkgDir)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "fleetcheck")
	src := top
	if rev == "" {
		t.Logf("%s: the working tree at %s", role, strings.TrimSpace(git(t, top, "describe", "--always", "--dirty")))
	} else {
		t.Logf("%s: %s", role, strings.TrimSpace(git(t, top, "log", "-1", "--format=%h %s", rev)))
		src = t.TempDir()
		tar := filepath.Join(t.TempDir(), "src.tar")
		git(t, top, "archive", "--format=tar", "-o", tar, rev)
		runCmd(t, src, "tar", "-xf", tar)
		// The program's source, as in the working tree, replaces whatever
		// the commit has (or adds it).
		dst := filepath.Join(src, rel)
		if err := os.RemoveAll(dst); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		files, err := filepath.Glob(filepath.Join(pkgDir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dst, filepath.Base(f)), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The root module alone (GOWORK=off), as a user's build would see it.
	cmd := exec.Command("go", "build", "-o", out, "./"+filepath.ToSlash(rel))
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building fleetcheck at %q: %v\n%s", rev, err, b)
	}
	return out
}

// git runs git in dir and returns its output.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return runCmd(t, dir, "git", args...)
}

// runCmd runs a command in dir and returns its output, failing the test if
// it fails.
func runCmd(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr)
	}
	return string(b)
}

// fleetResult is what one case's processes and check server reported.
type fleetResult struct {
	what        string // which builds ran, e.g. "old and new"
	mode        string
	masters     int
	duration    time.Duration
	role        map[string]Summary // summed per role; MaxFence is the highest
	stats       map[string]int64   // the check server's stats hash
	failedExits int                // processes that exited with an error
	problems    []string           // processes without a summary, or that failed
	notes       []string           // the first messages each process printed
}

// notesPerProcess is how many of a process's messages the log quotes.
const notesPerProcess = 3

// runFleet runs *fleetProcs processes of each build against addrs for d
// and collects their summaries and the check server's stats. extra adds
// arguments per role.
func runFleet(t *testing.T, bins map[string]string, addrs []string, mode string, d time.Duration, extra map[string][]string) *fleetResult {
	t.Helper()
	type member struct {
		id   string
		proc *servertest.Process
		run  *servertest.Run
	}
	var members []member
	for i := range *fleetProcs {
		for _, role := range roles {
			id := fmt.Sprintf("%s-%d", role, i+1)
			mode := mode
			if mode == "mixed" {
				mode = []string{"default", "fair"}[i%2]
			}
			args := []string{
				"-addrs", strings.Join(addrs, ","), "-role", role, "-id", id, "-mode", mode,
				"-duration", d.String(), "-workers", strconv.Itoa(*fleetWorkers),
			}
			args = append(args, strings.Fields(*fleetArgs)...)
			args = append(args, extra[role]...)
			p := servertest.New(servertest.Config{
				Name:    "fleetcheck " + id,
				Command: func() (servertest.Command, error) { return servertest.Command{Path: bins[role], Args: args}, nil },
			})
			t.Cleanup(func() { _ = p.Stop() })
			r, err := p.Start()
			if err != nil {
				t.Fatalf("starting %s: %v", id, err)
			}
			members = append(members, member{id: id, proc: p, run: r})
		}
	}
	res := &fleetResult{mode: mode, masters: len(addrs), duration: d, role: map[string]Summary{}}
	deadline := time.After(d + time.Minute)
	for _, m := range members {
		select {
		case <-m.run.Done():
		case <-deadline:
			t.Fatalf("%s still running a minute after its %v:\n%s", m.id, d, m.proc.Tail())
		}
		out := m.run.Output()
		if err := m.run.Err(); err != nil {
			res.failedExits++
			res.problems = append(res.problems, fmt.Sprintf("%s exited: %v\n%s", m.id, err, lastLines(out, 3)))
		}
		var s Summary
		found, noted := false, 0
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			line := sc.Text()
			if js, ok := strings.CutPrefix(line, "SUMMARY "); ok {
				found = json.Unmarshal([]byte(js), &s) == nil
			}
			if strings.HasPrefix(line, m.id+" ") && noted < notesPerProcess {
				res.notes = append(res.notes, line)
				noted++
			}
		}
		if !found {
			res.problems = append(res.problems, fmt.Sprintf("%s printed no summary:\n%s", m.id, lastLines(out, 20)))
			continue
		}
		sum := res.role[s.Role]
		sum.Acquired += s.Acquired
		sum.Tried += s.Tried
		sum.Busy += s.Busy
		sum.MaxFence = max(sum.MaxFence, s.MaxFence)
		sum.MaxWait = max(sum.MaxWait, s.MaxWait)
		sum.MaxRelease = max(sum.MaxRelease, s.MaxRelease)
		sum.Violations += s.Violations
		sum.Lost += s.Lost
		sum.Errors += s.Errors
		res.role[s.Role] = sum
	}
	res.stats = statsOf(t, addrs[0])
	return res
}

// lastLines returns the last n lines of out.
func lastLines(out string, n int) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// client returns a client of the server at addr, closed at the test's end.
func client(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// statsOf reads the check's stats hash (main.go) from the server at addr.
func statsOf(t *testing.T, addr string) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := client(t, addr).HGetAll(ctx, "fleetcheck:{fleet}:stats").Result()
	if err != nil {
		t.Fatalf("reading the check's stats: %v", err)
	}
	stats := map[string]int64{}
	for k, v := range h {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("stats field %s = %q: %v", k, v, err)
		}
		stats[k] = n
	}
	return stats
}

// log writes the case's figures to the test log.
func (r *fleetResult) log(t *testing.T) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %v, %s mode, %d master(s), %d+%d processes of %d workers:\n",
		r.what, r.duration, r.mode, r.masters, *fleetProcs, *fleetProcs, *fleetWorkers)
	for _, role := range roles {
		s := r.role[role]
		fmt.Fprintf(&b, "  %s: %d acquisitions (%d by TryAcquire; check server: %d), %d busy, longest acquire call %dms, longest Release %dms, highest fence %d, %d violations, %d lost, %d errors\n",
			role, s.Acquired, s.Tried, r.stats["acquired:"+role], s.Busy, s.MaxWait, s.MaxRelease, s.MaxFence, s.Violations, s.Lost, s.Errors)
	}
	fmt.Fprintf(&b, "  hand-overs: old->new %d, new->old %d, old->old %d, new->new %d; violations on the check server: %d",
		r.stats["handover:old>new"], r.stats["handover:new>old"], r.stats["handover:old>old"], r.stats["handover:new>new"], r.stats["violations"])
	for _, n := range r.notes {
		b.WriteString("\n  | " + n)
	}
	t.Log(b.String())
}

// check fails the test unless the case showed exclusion between the
// versions, with enough interleaving to mean something.
func (r *fleetResult) check(t *testing.T) {
	t.Helper()
	r.checkSafety(t)
	for _, role := range roles {
		if s := r.role[role]; s.Acquired < int64(*fleetMin) {
			t.Errorf("%s: %d acquisitions, want at least %d (-fleet.min)", role, s.Acquired, *fleetMin)
		}
	}
	for _, role := range roles {
		if w := time.Duration(r.role[role].MaxWait) * time.Millisecond; *fleetMaxWait > 0 && w > *fleetMaxWait {
			t.Errorf("%s: an acquire call took %v, more than %v (-fleet.maxwait)", role, w, *fleetMaxWait)
		}
	}
	for _, h := range []string{"handover:old>new", "handover:new>old"} {
		if r.stats[h] < int64(*fleetHandover) {
			t.Errorf("%s: %d, want at least %d (-fleet.handovers): the versions did not take turns", h, r.stats[h], *fleetHandover)
		}
	}
}

// checkSafety fails the test if the run's processes failed, saw a
// violation of exclusion or of rising fences, or counted acquisitions the
// check server did not: what a reference run (one build alone, whose pace
// is only measured) is held to as well.
func (r *fleetResult) checkSafety(t *testing.T) {
	t.Helper()
	for _, p := range r.problems {
		t.Error(p)
	}
	if v := r.stats["violations"]; v != 0 {
		t.Errorf("%d violations recorded on the check server", v)
	}
	for _, role := range roles {
		s := r.role[role]
		if s.Violations != 0 {
			t.Errorf("%s: %d violations", role, s.Violations)
		}
		if got := r.stats["acquired:"+role]; got != s.Acquired {
			t.Errorf("%s: the processes counted %d acquisitions, the check server %d", role, s.Acquired, got)
		}
	}
}

// checkExpiring fails the test if a server keeps a key that never
// expires, or the lock key itself, once every process has ended: a mixed
// fleet leaves nothing behind either.
func checkExpiring(t *testing.T, addrs []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, a := range addrs {
		c := client(t, a)
		keys, err := c.Keys(ctx, "*").Result()
		if err != nil {
			t.Fatalf("KEYS on %s: %v", a, err)
		}
		for _, k := range keys {
			ttl, err := c.PTTL(ctx, k).Result()
			switch {
			case err != nil:
				t.Errorf("PTTL %s on %s: %v", k, a, err)
			case ttl < 0 && ttl != -2: // -2: expired or deleted since KEYS
				t.Errorf("%s on %s never expires", k, a)
			case k == "lockmw:{fleet}":
				t.Errorf("the lock key %s is still on %s (TTL %v) after every holder ended", k, a, ttl)
			}
		}
	}
}
