// Package servertest is test support, used by test code only (like all of
// internal/testkit, and unlike internal/adapt and internal/fireclaim, which
// lockmw's own packages import): it runs the real server processes that
// the test kits start for tests, one launcher per server on top of it
// (internal/testkit/redistest for redis-server, internal/testkit/pgtest for
// PostgreSQL, internal/testkit/zktest for ZooKeeper; etcd's and MariaDB's,
// which import those stores' clients, live in their store's module:
// lockmw/etcd/internal/etcdtest and lockmw/mysql/internal/mariatest).
//
// A launcher says how to run its server; servertest does the rest, the
// same for every server:
//
//   - Process supervises one server across its runs: Start (launch, then
//     wait for the launcher's readiness check), Pause (SIGSTOP, returning
//     once every thread of every process of the server has stopped, as
//     /proc shows on Linux: a paused server answers nothing), Resume
//     (SIGCONT), Kill (SIGKILL, returning once the process is reaped, so
//     its ports are closed; the Config's Ports stay bound, not listening,
//     until the Restart, so that no other process takes one while the
//     server is down), Restart (Kill, then Start with the same
//     Config) and Stop (Kill for good, at the test's cleanup). Each run is
//     a process group of its own, started with Pdeathsig SIGKILL on Linux,
//     so that a crashed test binary leaves no server behind.
//   - Config is what a launcher gives: a Name for messages, a Command
//     (program, arguments, working directory, environment), asked again at
//     every start so that it can write configuration files or move to new
//     ports, a Ready check that gets the Run (pid, exit, output) and a
//     context that ends when the process exits or ReadyTimeout passes, and
//     the Ports the server listens on.
//   - The output of every run goes to an in-memory log (the last 256 KiB):
//     Run.Output for one run (to see why it failed: "address already in
//     use"), Process.Tail for failure messages.
//   - Binary finds a server's executable: an environment variable naming
//     it, else a launcher's own Find, else PATH, with a hint saying how to
//     install it in every error.
//   - Controls are what a launcher's Server embeds for its tests: Pause,
//     Resume, Kill and Restart, failing the test with the server's output;
//     FatalMessage runs a launcher call and returns its Fatalf message.
//   - FreePort and FreePorts pick free 127.0.0.1 ports; Poll polls a
//     condition until a context ends; StartProxy puts a toxiproxy TCP
//     proxy (latency, cut, reset) in front of any TCP server.
//
// Methods of Process report errors; the launchers turn them into t.Fatalf
// with Tail (Controls does so for Pause, Resume, Kill and Restart), and register Stop with t.Cleanup, so that their own API stays
// in the shape of net/http/httptest.
//
// # A launcher
//
//	srv := &Server{port: port, dir: t.TempDir()}
//	srv.proc = servertest.New(servertest.Config{
//		Name: "zookeeper 1",
//		Command: func() (servertest.Command, error) {
//			// write zoo.cfg with srv.port ...
//			return servertest.Command{Path: java, Args: args, Dir: srv.dir}, nil
//		},
//		Ready: func(ctx context.Context, r *servertest.Run) error {
//			return servertest.Poll(ctx, 20*time.Millisecond, srv.ruok)
//		},
//		ReadyTimeout: 20 * time.Second,
//	})
//	srv.Controls = servertest.NewControls("zktest", srv.proc, nil) // Server embeds Controls
//	t.Cleanup(func() {
//		if err := srv.proc.Stop(); err != nil {
//			t.Errorf("zktest: %v\n%s", err, srv.proc.Tail())
//		}
//	})
//	if _, err := srv.proc.Start(); err != nil {
//		t.Fatalf("zktest: %v\n%s", err, srv.proc.Tail())
//	}
//	// in tests: srv.Pause(t), srv.Resume(t), srv.Kill(t), srv.Restart(t)
package servertest
