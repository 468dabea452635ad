// Package etcdtest starts real etcd processes for tests, in the spirit of
// net/http/httptest and of lockmw's internal/testkit/redistest: no mocks, one
// throw-away member or cluster per call, always stopped through t.Cleanup.
//
// Start starts a single member, StartCluster a cluster of n members. Every
// member has its own data directory under t.TempDir() and listens for
// clients and peers on free 127.0.0.1 ports, which stay the same for its
// whole life. Both return once every member reports the same leader. A
// member can be paused (SIGSTOP; on Linux, Pause returns once every thread
// of the process has stopped), resumed (SIGCONT), killed (SIGKILL) and
// restarted on the same ports and data directory, where it rejoins its
// cluster with everything it had written to disk (etcd persists its data,
// unlike the Redis servers of redistest). Cluster.Leader waits until the
// running members agree on a leader and returns it; Cluster.MoveLeader
// hands leadership to a chosen member (etcd's MoveLeader call).
//
// The members run with a 50 ms heartbeat and a 500 ms election timeout, so
// that a leader killed or paused is replaced within about a second.
//
// # Network faults
//
// StartProxy puts a TCP proxy (servertest's toxiproxy wrapper) in front of
// one member's client port: Cut black-holes the link, AddLatency slows it,
// Heal undoes both, while the member keeps running and stays reachable
// directly. Point a client at the proxy's Addr to cut that client alone.
//
// # The binary
//
// The etcd binary is $LOCKMW_ETCD when that is set, else the repository's
// .bin/etcd: the etcd server pinned as a tool in internal/tools/etcd (etcd
// 3.6.16, the server of the client lockmw/etcd requires), built from the
// Go module proxy by `make etcd` (and so by make test, make chaos and make
// bench). When .bin/etcd is missing or reports another version, the first
// Start of a test binary builds it, under a file lock so that the packages
// go test runs in parallel build it once; if that fails, Start fails the
// test (it never skips) with the command to run. etcd on $PATH is never
// used: point LOCKMW_ETCD at it (for example Debian's /usr/bin/etcd, etcd
// 3.4.23, for make etcd-15247). The members get none of the test's ETCD_*
// environment variables, which etcd would read as flags.
//
// # Process hygiene
//
// The members are run by internal/testkit/servertest, the process supervisor
// every test kit shares. Members run in their own process group and, on Linux,
// are started with Pdeathsig SIGKILL, so a test binary that crashes does not
// leave them behind. Cleanup SIGKILLs each member's process group and waits for
// it to exit, whether it is running, paused or already dead.
//
// # Example
//
//	func TestSomething(t *testing.T) {
//		c := etcdtest.StartCluster(t, 3)
//		cli := c.Client(t)
//		// ... use cli; c.Leader(t).Kill(t), c.Leader(t), m.Restart(t), c.MoveLeader(t, m) ...
//	}
package etcdtest
