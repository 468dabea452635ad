//go:build unix

package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/servertest"
)

// fastFail makes a client fail after a single attempt with a short timeout,
// instead of go-redis' default of retrying for seconds.
func fastFail(o *redis.Options) {
	o.DialTimeout = 200 * time.Millisecond
	o.DialerRetries = 1
	o.ReadTimeout = 200 * time.Millisecond
	o.WriteTimeout = 200 * time.Millisecond
	o.MaxRetries = -1
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func infoInt(t *testing.T, s *Server, section, key string) int64 {
	t.Helper()
	v, ok := s.Info(t, section)[key]
	if !ok {
		t.Fatalf("INFO %s has no %q", section, key)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("INFO %s %s = %q: %v", section, key, v, err)
	}
	return n
}

// waitGone polls until pid no longer exists.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := syscall.Kill(pid, 0)
		if errors.Is(err, syscall.ESRCH) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still exists after cleanup (kill(pid, 0) = %v)", pid, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStartAnswersSetGet(t *testing.T) {
	t.Parallel()
	s := Start(t)
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Errorf("Addr() = %q, want 127.0.0.1:PORT", s.Addr())
	}
	ctx := context.Background()
	c := s.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v; want \"v\", nil", got, err)
	}
}

func TestStartNServersAreIndependent(t *testing.T) {
	t.Parallel()
	ss := StartN(t, 2)
	if len(ss) != 2 {
		t.Fatalf("StartN(2) returned %d servers", len(ss))
	}
	if ss[0].Addr() == ss[1].Addr() {
		t.Fatalf("both servers have address %s", ss[0].Addr())
	}
	ctx := context.Background()
	a, b := ss[0].Client(t), ss[1].Client(t)
	if err := a.Set(ctx, "only-on-a", "1", 0).Err(); err != nil {
		t.Fatalf("SET on a: %v", err)
	}
	if n, err := a.Exists(ctx, "only-on-a").Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS on a = %d, %v; want 1", n, err)
	}
	if n, err := b.Exists(ctx, "only-on-a").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS on b = %d, %v; want 0 (servers share data)", n, err)
	}
}

func TestPauseTimesOutAndResumeRecovers(t *testing.T) {
	t.Parallel()
	s := Start(t)
	ctx := context.Background()
	c := s.Client(t, func(o *redis.Options) {
		o.ReadTimeout = 200 * time.Millisecond
		o.MaxRetries = -1 // one attempt, so one timeout
	})
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}

	s.Pause(t)
	start := time.Now()
	err := c.Get(ctx, "k").Err()
	took := time.Since(start)
	if !isTimeout(err) {
		t.Fatalf("GET on paused server: err = %v, want a timeout", err)
	}
	// It waited for the ReadTimeout, and the timeout error says that is
	// what ended it; the upper bound is for a hang, not a speed check (a
	// loaded machine runs timers late).
	if took < 150*time.Millisecond || took > 30*time.Second {
		t.Errorf("GET on paused server failed after %v, want after the 200ms ReadTimeout (and no hang)", took)
	}

	s.Resume(t)
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET after Resume = %q, %v; want \"v\", nil", got, err)
	}
}

func TestKillFailsCommandsAndRestartComesBackEmpty(t *testing.T) {
	t.Parallel()
	s := Start(t)
	addr := s.Addr()
	ctx := context.Background()
	c := s.Client(t) // default options, kept across the restart
	fast := s.Client(t, fastFail)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	oldPID := s.Info(t, "server")["process_id"]

	s.Kill(t)
	if err := fast.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Kill succeeded, want an error")
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Fatalf("%s still accepts connections after Kill", addr)
	}

	s.Restart(t)
	if s.Addr() != addr {
		t.Fatalf("Addr() after Restart = %s, want %s", s.Addr(), addr)
	}
	if pid := s.Info(t, "server")["process_id"]; pid == oldPID {
		t.Fatalf("process_id after Restart = %s, same as before", pid)
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("DBSIZE after Restart = %d, %v; want 0, nil", n, err)
	}
	if err := c.Get(ctx, "k").Err(); err != redis.Nil {
		t.Fatalf("GET k after Restart: err = %v, want redis.Nil", err)
	}
	if err := fast.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}

func TestRestartWhileRunningOrPaused(t *testing.T) {
	t.Parallel()
	s := Start(t)
	ctx := context.Background()
	c := s.Client(t, fastFail)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	s.Restart(t) // running: killed first
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("DBSIZE after Restart = %d, %v; want 0, nil", n, err)
	}
	s.Pause(t)
	s.Restart(t) // paused: SIGKILL works on stopped processes
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart of a paused server: %v", err)
	}
}

func TestInfoStatsCountsCommands(t *testing.T) {
	t.Parallel()
	s := Start(t)
	ctx := context.Background()
	c := s.Client(t)
	before := infoInt(t, s, "stats", "total_commands_processed")
	const n = 10
	for i := range n {
		if err := c.Set(ctx, fmt.Sprint("k", i), i, 0).Err(); err != nil {
			t.Fatalf("SET: %v", err)
		}
	}
	after := infoInt(t, s, "stats", "total_commands_processed")
	if after < before+n {
		t.Fatalf("total_commands_processed went from %d to %d after %d SETs, want at least %d",
			before, after, n, before+n)
	}
	if got := s.Info(t, "server")["tcp_port"]; !strings.HasSuffix(s.Addr(), ":"+got) {
		t.Errorf("INFO server tcp_port = %q, Addr() = %s", got, s.Addr())
	}
}

func pidOf(t *testing.T, s *Server) int {
	t.Helper()
	pid, err := strconv.Atoi(s.Info(t, "server")["process_id"])
	if err != nil {
		t.Fatalf("INFO server process_id: %v", err)
	}
	return pid
}

func TestCleanupStopsServer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// prepare puts s in the state to clean up from and returns the pid
		// that cleanup must get rid of.
		prepare func(t *testing.T, s *Server) int
	}{
		{"running", func(t *testing.T, s *Server) int { return pidOf(t, s) }},
		{"paused", func(t *testing.T, s *Server) int {
			pid := pidOf(t, s)
			s.Pause(t)
			return pid
		}},
		{"restarted", func(t *testing.T, s *Server) int {
			s.Restart(t)
			return pidOf(t, s)
		}},
		{"killed", func(t *testing.T, s *Server) int {
			pid := pidOf(t, s)
			s.Kill(t)
			return pid
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var pid int
			var dir string
			t.Run("inner", func(t *testing.T) {
				s := Start(t)
				cfg, err := s.Client(t).ConfigGet(context.Background(), "dir").Result()
				if err != nil {
					t.Fatalf("CONFIG GET dir: %v", err)
				}
				dir = cfg["dir"]
				pid = tc.prepare(t, s)
				if err := syscall.Kill(pid, 0); tc.name != "killed" && err != nil {
					t.Fatalf("pid %d: kill(pid, 0) = %v before cleanup, want it to exist", pid, err)
				}
			})
			if pid == 0 || dir == "" {
				t.Fatal("inner test did not record the server's pid and dir")
			}
			waitGone(t, pid)
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("server dir %s still there after cleanup (stat: %v)", dir, err)
			}
		})
	}
}

func TestStartRetriesWhenPortIsTaken(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port

	var mu sync.Mutex
	var picked []int
	pick := func() (int, error) {
		mu.Lock()
		defer mu.Unlock()
		if len(picked) == 0 {
			picked = append(picked, taken)
			return taken, nil
		}
		p, err := freePort()
		picked = append(picked, p)
		return p, err
	}
	s := Start(t, func(c *config) { c.pickPort = pick })
	if s.Addr() == l.Addr().String() {
		t.Fatalf("server claims the taken port %s", s.Addr())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(picked) != 2 {
		t.Fatalf("picked ports %v, want the taken one then one more", picked)
	}
	if err := s.Client(t).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
}

func TestWithArgsArePassedAndKeptByRestart(t *testing.T) {
	t.Parallel()
	// --loglevel is also set by the defaults: the extra args must win.
	s := Start(t, WithArgs("--maxmemory", "10mb", "--loglevel", "notice"))
	check := func(when string) {
		t.Helper()
		cfg, err := s.Client(t).ConfigGet(context.Background(), "*").Result()
		if err != nil {
			t.Fatalf("CONFIG GET * %s: %v", when, err)
		}
		if got := cfg["maxmemory"]; got != strconv.Itoa(10<<20) {
			t.Errorf("maxmemory %s = %q, want %d", when, got, 10<<20)
		}
		if got := cfg["loglevel"]; got != "notice" {
			t.Errorf("loglevel %s = %q, want notice", when, got)
		}
	}
	check("after Start")
	s.Restart(t)
	check("after Restart")
}

func TestInfoWithoutSection(t *testing.T) {
	t.Parallel()
	info := Start(t).Info(t, "")
	for _, key := range []string{"redis_version", "total_commands_processed", "used_memory"} {
		if _, ok := info[key]; !ok {
			t.Errorf("Info(\"\") has no %q", key)
		}
	}
}

func TestStartFailureQuotesServerOutput(t *testing.T) {
	t.Parallel()
	msg := servertest.FatalMessage(t, func(tb testing.TB) {
		Start(tb, WithArgs("--no-such-directive", "x"))
	})
	if msg == "" {
		t.Fatal("Start with a bad directive did not fail")
	}
	if !strings.Contains(msg, "Bad directive") || !strings.Contains(msg, "no-such-directive") {
		t.Fatalf("failure message does not quote redis-server's output:\n%s", msg)
	}
}

func TestMissingBinaryFailsWithInstallHint(t *testing.T) {
	// Not parallel: t.Setenv.
	t.Setenv("REDIS_SERVER", "")
	t.Setenv("PATH", t.TempDir())
	msg := servertest.FatalMessage(t, func(tb testing.TB) { Start(tb) })
	want := "redis-server not found on PATH: install it with `apt-get install redis-server` " +
		"(or run `make test`, which installs it), or set REDIS_SERVER to its path"
	if !strings.Contains(msg, want) {
		t.Fatalf("Start without redis-server: Fatalf(%q), want it to contain %q", msg, want)
	}

	t.Setenv("REDIS_SERVER", "/nonexistent/redis-server")
	msg = servertest.FatalMessage(t, func(tb testing.TB) { Start(tb) })
	if !strings.Contains(msg, "REDIS_SERVER") || !strings.Contains(msg, "apt-get install redis-server") {
		t.Fatalf("Start with a bad REDIS_SERVER: Fatalf(%q), want it to name REDIS_SERVER and the install hint", msg)
	}
}

func TestConcurrentControl(t *testing.T) {
	t.Parallel()
	s := Start(t)
	// Restart replaces the process while Pause, Resume and Addr use it; with
	// -race this fails if the methods do not synchronize.
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 3 {
				s.Restart(t)
			}
		}()
		go func() {
			defer wg.Done()
			for range 20 {
				s.Pause(t)
				s.Resume(t)
				_ = s.Addr()
			}
		}()
	}
	wg.Wait()
	if err := s.Client(t, fastFail).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING after concurrent Restart/Pause/Resume: %v", err)
	}
}

// withLinkTimeout shortens how long a replica's start waits for its link.
func withLinkTimeout(d time.Duration) Option {
	return func(c *config) { c.linkTimeout = d }
}

func replicaLink(t *testing.T, r *Server) string {
	t.Helper()
	info := r.Info(t, "replication")
	return fmt.Sprintf("role:%s master_link_status:%s", info["role"], info["master_link_status"])
}

func TestReplicaStartsInSync(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := Start(t)
	mc := m.Client(t)
	// Enough data for the initial sync to take a while.
	big := strings.Repeat("x", 64<<20)
	if err := mc.Set(ctx, "before", big, 0).Err(); err != nil {
		t.Fatalf("SET on master: %v", err)
	}

	r := Start(t, WithReplicaOf(m))
	// Redis 7 waits repl-diskless-sync-delay (5s by default) before a full
	// sync; WithReplicaOf switches the master to 0 so the sync starts at
	// once. Checked by the setting, not by a wall-clock bound (the machine
	// may be loaded).
	if got, err := mc.ConfigGet(ctx, "repl-diskless-sync-delay").Result(); err != nil || got["repl-diskless-sync-delay"] != "0" {
		t.Errorf("master's repl-diskless-sync-delay after Start(WithReplicaOf) = %v, %v; want 0", got, err)
	}
	// No polling: Start promises the link is up when it returns.
	if got := replicaLink(t, r); got != "role:slave master_link_status:up" {
		t.Fatalf("replica right after Start: %s, want role:slave master_link_status:up", got)
	}
	info := r.Info(t, "replication")
	if want := strings.TrimPrefix(m.Addr(), "127.0.0.1:"); info["master_host"] != "127.0.0.1" || info["master_port"] != want {
		t.Errorf("replica's master = %s:%s, want %s", info["master_host"], info["master_port"], m.Addr())
	}
	rc := r.Client(t)
	if n, err := rc.StrLen(ctx, "before").Result(); err != nil || n != int64(len(big)) {
		t.Fatalf("STRLEN before on replica = %d, %v; want the master's %d (initial sync)", n, err, len(big))
	}
	if err := mc.Set(ctx, "after", "2", 0).Err(); err != nil {
		t.Fatalf("SET on master: %v", err)
	}
	if n, err := mc.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 on master = %d, %v; want 1", n, err)
	}
	if got, err := rc.Get(ctx, "after").Result(); err != nil || got != "2" {
		t.Fatalf("GET after on replica = %q, %v; want \"2\"", got, err)
	}
	if err := rc.Set(ctx, "x", "y", 0).Err(); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Errorf("SET on replica: err = %v, want READONLY", err)
	}
}

func TestReplicaSurvivesRestarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := Start(t)
	r := Start(t, WithReplicaOf(m))
	mc, rc := m.Client(t, fastFail), r.Client(t, fastFail)
	if err := mc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET on master: %v", err)
	}

	// A restarted replica is a replica of the same master again, in sync
	// when Restart returns.
	r.Restart(t)
	if got := replicaLink(t, r); got != "role:slave master_link_status:up" {
		t.Fatalf("replica right after its Restart: %s", got)
	}
	if got, err := rc.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k on restarted replica = %q, %v; want \"v\"", got, err)
	}

	// A restarted master comes back empty; its replica reconnects by itself
	// and resyncs, without the 5s diskless sync delay.
	m.Restart(t)
	cfg, err := mc.ConfigGet(ctx, "repl-diskless-sync-delay").Result()
	if err != nil || cfg["repl-diskless-sync-delay"] != "0" {
		t.Fatalf("master's repl-diskless-sync-delay after Restart = %v, %v; want 0", cfg, err)
	}
	start := time.Now()
	for {
		n, err := rc.Exists(ctx, "k").Result()
		if err == nil && n == 0 && replicaLink(t, r) == "role:slave master_link_status:up" {
			break
		}
		// A bound for a stuck replica, not a speed check (the setting
		// above is what keeps the 5s delay away).
		if time.Since(start) > 30*time.Second {
			t.Fatalf("replica not resynced with the restarted (empty) master after %v: EXISTS k = %d, %v; %s",
				time.Since(start), n, err, replicaLink(t, r))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("replica resynced %v after the master's Restart", time.Since(start))
}

func TestReplicaStartFailsWithoutMaster(t *testing.T) {
	t.Parallel()
	m := Start(t)
	m.Kill(t)
	msg := servertest.FatalMessage(t, func(tb testing.TB) {
		Start(tb, WithReplicaOf(m), withLinkTimeout(500*time.Millisecond))
	})
	if msg == "" {
		t.Fatal("Start of a replica of a killed master did not fail")
	}
	for _, want := range []string{"master_link_status", "replica of " + m.Addr(), "redis-server output"} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure message does not contain %q:\n%s", want, msg)
		}
	}

	msg = servertest.FatalMessage(t, func(tb testing.TB) { Start(tb, WithReplicaOf(nil)) })
	if !strings.Contains(msg, "WithReplicaOf(nil)") {
		t.Errorf("Start(WithReplicaOf(nil)): Fatalf(%q), want it to name WithReplicaOf(nil)", msg)
	}
}

func TestSentinelStartWatchesMaster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := Start(t)
	r := Start(t, WithReplicaOf(m))
	s := StartSentinel(t, "mymaster", m, 1)
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || s.Addr() == m.Addr() || s.Addr() == r.Addr() {
		t.Errorf("Addr() = %q, want its own 127.0.0.1:PORT", s.Addr())
	}
	if got := s.MasterAddr(t); got != m.Addr() {
		t.Fatalf("MasterAddr() = %s, want %s", got, m.Addr())
	}

	// No polling: StartSentinel promises the Sentinel is connected and
	// knows the replica when it returns.
	c := s.Client(t)
	master, err := c.Master(ctx, "mymaster").Result()
	if err != nil {
		t.Fatalf("SENTINEL master: %v", err)
	}
	for k, want := range map[string]string{
		"flags":                   "master",
		"quorum":                  "1",
		"down-after-milliseconds": "1000",
		"failover-timeout":        "5000",
		"parallel-syncs":          "1",
		"num-slaves":              "1",
	} {
		if master[k] != want {
			t.Errorf("SENTINEL master mymaster: %s = %q, want %q", k, master[k], want)
		}
	}
	replicas, err := c.Replicas(ctx, "mymaster").Result()
	if err != nil || len(replicas) != 1 || net.JoinHostPort(replicas[0]["ip"], replicas[0]["port"]) != r.Addr() {
		t.Fatalf("SENTINEL replicas = %v, %v; want just %s", replicas, err, r.Addr())
	}
}

func TestSentinelFailoverPromotesReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := Start(t)
	r := Start(t, WithReplicaOf(m))
	ss := StartSentinels(t, 3, "mymaster", m, 2)
	addrs := map[string]bool{}
	for _, s := range ss {
		addrs[s.Addr()] = true
		// No polling: StartSentinels promises they know each other.
		peers, err := s.Client(t).Sentinels(ctx, "mymaster").Result()
		if err != nil || len(peers) != 2 {
			t.Fatalf("SENTINEL sentinels on %s = %v, %v; want the 2 others", s.Addr(), peers, err)
		}
	}
	if len(addrs) != 3 {
		t.Fatalf("sentinel addresses %v, want 3 distinct", addrs)
	}

	m.Kill(t)
	killed := time.Now()
	for _, s := range ss {
		for s.MasterAddr(t) != r.Addr() {
			if time.Since(killed) > 60*time.Second { // stuck, not slow
				t.Fatalf("sentinel %s still says master %s %v after the master was killed", s.Addr(), s.MasterAddr(t), time.Since(killed))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("all 3 sentinels report the promoted replica %v after the master was killed", time.Since(killed))
	if role := r.Info(t, "replication")["role"]; role != "master" {
		t.Fatalf("promoted replica's role = %q, want master", role)
	}
	if err := r.Client(t).Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET on the promoted replica: %v", err)
	}
}

func TestSentinelKillAndCleanup(t *testing.T) {
	t.Parallel()
	m := Start(t)
	for _, kill := range []bool{false, true} {
		t.Run(fmt.Sprintf("killed=%v", kill), func(t *testing.T) {
			var pid int
			var dir, addr string
			t.Run("inner", func(t *testing.T) {
				s := StartSentinel(t, "mymaster", m, 1)
				addr, dir = s.Addr(), s.srv.dir
				if _, err := os.Stat(filepath.Join(dir, "sentinel.conf")); err != nil {
					t.Fatalf("sentinel config: %v", err)
				}
				var info string
				err := oneShot(addr, time.Second, func(ctx context.Context, c *redis.Client) (err error) {
					info, err = c.Info(ctx, "server").Result()
					return err
				})
				if err != nil {
					t.Fatalf("INFO server on sentinel: %v", err)
				}
				if pid, err = strconv.Atoi(parseInfo(info)["process_id"]); err != nil {
					t.Fatalf("INFO server process_id: %v", err)
				}
				if mode := parseInfo(info)["redis_mode"]; mode != "sentinel" {
					t.Fatalf("redis_mode = %q, want sentinel", mode)
				}
				if kill {
					s.Kill(t)
					if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
						conn.Close()
						t.Fatalf("sentinel %s still accepts connections after Kill", addr)
					}
					s.Kill(t) // killing a dead Sentinel does nothing
				}
			})
			if pid == 0 || dir == "" {
				t.Fatal("inner test did not record the sentinel's pid and dir")
			}
			waitGone(t, pid)
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("sentinel dir %s still there after cleanup (stat: %v)", dir, err)
			}
		})
	}
}

func TestSentinelStartFailureQuotesOutput(t *testing.T) {
	t.Parallel()
	m := Start(t)
	// Sentinel itself rejects quorum 0 when it loads its configuration.
	msg := servertest.FatalMessage(t, func(tb testing.TB) { StartSentinel(tb, "mymaster", m, 0) })
	if msg == "" {
		t.Fatal("StartSentinel with quorum 0 did not fail")
	}
	if !strings.Contains(msg, "sentinel on 127.0.0.1:") || !strings.Contains(msg, "Quorum must be 1 or greater") {
		t.Errorf("failure message does not quote the sentinel's output:\n%s", msg)
	}

	msg = servertest.FatalMessage(t, func(tb testing.TB) { StartSentinel(tb, "my master", m, 1) })
	if !strings.Contains(msg, `"my master"`) {
		t.Errorf("StartSentinel with a space in the name: Fatalf(%q), want it to quote the name", msg)
	}

	dead := Start(t)
	dead.Kill(t)
	msg = servertest.FatalMessage(t, func(tb testing.TB) { StartSentinel(tb, "mymaster", dead, 1) })
	if !strings.Contains(msg, dead.Addr()) {
		t.Errorf("StartSentinel on a killed master: Fatalf(%q), want it to name %s", msg, dead.Addr())
	}
}

func TestStartMainStartsAndStops(t *testing.T) {
	t.Parallel()
	addr, stop, err := StartMain()
	if err != nil {
		t.Fatal(err)
	}
	o := &redis.Options{Addr: addr}
	fastFail(o)
	c := redis.NewClient(o)
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING %s: %v", addr, err)
	}
	stop()
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Fatalf("%s still accepts connections after stop", addr)
	}
	stop() // a second stop does nothing
}

func TestStartMainWithoutBinaryGivesInstallHint(t *testing.T) {
	// Not parallel: t.Setenv.
	t.Setenv("REDIS_SERVER", "")
	t.Setenv("PATH", t.TempDir())
	_, stop, err := StartMain()
	if err == nil {
		stop()
		t.Fatal("StartMain without redis-server succeeded")
	}
	if want := "redis-server not found on PATH: " + installHint; !strings.Contains(err.Error(), want) {
		t.Fatalf("StartMain without redis-server: %v, want it to contain %q", err, want)
	}
}
