// Package redistest starts real redis-server processes for tests, in the
// spirit of net/http/httptest: no mocks, one throw-away server per call,
// always stopped through t.Cleanup.
//
// Each server listens on a free 127.0.0.1 port, has persistence disabled
// (--save "" --appendonly no) and its own temporary working directory, which
// is removed when the server is stopped. A server can be paused (SIGSTOP;
// on Linux, Pause returns once every thread has stopped), resumed
// (SIGCONT), killed (SIGKILL) and restarted on the same address, which is
// enough to exercise timeouts, lost locks and reconnection logic against
// the real thing. The processes are run by internal/testkit/servertest, the
// supervisor every test kit shares; redistest says how to run and probe
// redis-server.
//
// StartMain starts one server from a TestMain, which has no testing.TB (for
// example one server for a package's runnable examples), and returns its
// address and a func that stops it.
//
// # Replication and Sentinel
//
// WithReplicaOf starts a server as a replica of another one and returns once
// the replica is in sync. StartSentinel (and StartSentinels for several)
// starts Redis Sentinel processes (redis-server CONF --sentinel) monitoring
// a master, with a 1 second down-after-milliseconds, so that killing the
// master promotes a replica within a few seconds (about 2.3s with 3
// Sentinels and quorum 2, about 3.1s with a single Sentinel, measured with
// Redis 7.0). Sentinels are stopped at t.Cleanup like servers.
//
// # Cluster
//
// StartCluster starts a Redis Cluster of three masters, built with cluster
// commands only (CLUSTER ADDSLOTSRANGE, CLUSTER MEET), in a little over two
// seconds, optionally with replicas for every master (WithClusterReplicas).
// Its nodes are Servers, so they pause, die and restart like any other; BeginMigration, MoveKeys and Finish move a slot between masters
// step by step, as a resharding does, so that tests can act while clients
// get ASK and MOVED redirections.
//
// # Network faults
//
// StartProxy puts a TCP proxy (servertest's toxiproxy, run in-process as
// a library) in front of a server: AddLatency slows replies, Cut black-holes the link
// (clients see only timeouts), ResetConnections resets it, and Heal undoes
// them, while the server itself keeps running and stays reachable directly.
//
// # The binary
//
// The server binary is $REDIS_SERVER if that is set, else redis-server found
// on $PATH. If neither exists, Start fails the test (it never skips), and
// StartMain returns an error, with a message saying how to install it.
//
// # Process hygiene
//
// Servers run in their own process group and, on Linux, are started with
// Pdeathsig SIGKILL, so a test binary that crashes or is killed does not leave
// servers behind. Cleanup SIGKILLs the process group and waits for the exit,
// which works whether the server is running, paused or already dead.
//
// # go-redis behaviour worth knowing (v9.23, measured against these servers)
//
// While a server is paused its sockets stay open and the kernel keeps
// accepting connections and buffering requests, so clients see neither a
// refused connection nor an EOF: only a read timeout. Requests written while
// the server was paused are executed when it resumes, even though their
// callers have already given up.
//
//   - go-redis retries a command whose read timed out (MaxRetries, default
//     3), so against a paused server a command can take a multiple of
//     ReadTimeout to fail (about 2x was observed). Set MaxRetries to -1 for a
//     single-timeout failure.
//   - Context deadlines do not interrupt socket reads unless
//     ContextTimeoutEnabled is true: with default options a command whose
//     context expires after 100ms blocks for the whole ReadTimeout (5s by
//     default) on a paused server, then reports context.DeadlineExceeded.
//   - Against a killed server a default client takes about 1.7s to report
//     "connection refused" (DialerRetries 5 x 100ms, times MaxRetries).
//   - After PoolSize consecutive dial failures the pool stops dialing, fails
//     fast with the last dial error and re-probes once a second, so a client
//     that hammered a killed server may keep failing for up to a second after
//     Restart.
//
// # Example
//
//	func TestSomething(t *testing.T) {
//		srv := redistest.Start(t)
//		rdb := srv.Client(t, func(o *redis.Options) { o.ReadTimeout = 200 * time.Millisecond })
//		// ... use rdb; srv.Pause(t), srv.Resume(t), srv.Kill(t), srv.Restart(t) ...
//	}
package redistest
