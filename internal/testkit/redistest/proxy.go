//go:build unix

package redistest

import (
	"testing"

	"github.com/lockmw/lockmw/internal/testkit/servertest"
)

// Proxy is a TCP proxy on a free 127.0.0.1 port in front of one server
// (servertest's toxiproxy wrapper, which forwards any TCP protocol):
// AddLatency slows replies, Cut black-holes the link (clients see only
// timeouts), ResetConnections resets connections, and Heal undoes them,
// while the server keeps running. Point clients at Addr instead of the
// server. All methods are safe for concurrent use.
type Proxy = servertest.Proxy

// StartProxy starts a proxy forwarding to upstream ("host:port", e.g. a
// Server's Addr) and stops it, closing every connection through it, at
// t.Cleanup.
func StartProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	return servertest.StartProxy(t, upstream)
}
