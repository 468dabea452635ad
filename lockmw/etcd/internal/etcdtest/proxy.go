//go:build unix

package etcdtest

import (
	"testing"

	"github.com/lockmw/lockmw/internal/testkit/servertest"
)

// Proxy is a TCP proxy in front of one member's client port: servertest's
// toxiproxy wrapper, which forwards any TCP protocol. Cut black-holes the
// link (clients see only timeouts), AddLatency slows replies,
// ResetConnections resets connections, and Heal undoes them.
type Proxy = servertest.Proxy

// StartProxy starts a proxy forwarding to member s's client port, stopped at
// t.Cleanup. A client whose only endpoint is the proxy's Addr reaches s
// through it alone (ClientConfig(p.Addr()) or Client with an option that
// sets Endpoints).
func StartProxy(t testing.TB, s *Server) *Proxy {
	t.Helper()
	return servertest.StartProxy(t, s.Addr())
}
