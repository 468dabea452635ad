package zookeeper_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/servertest"
	"github.com/lockmw/lockmw/internal/testkit/zktest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/zookeeper"
)

// silentAddr returns the address of a listener that accepts connections
// and never writes to them.
func silentAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// sshAddr returns the address of a listener that greets each connection
// as an SSH server does, and closes it.
func sshAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n"))
			_ = c.Close()
		}
	}()
	return ln.Addr().String()
}

// httpAddr returns the address of an HTTP server.
func httpAddr(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestWrongAddressIsNamed: New against an address where no ZooKeeper
// answers returns a Locker, and logs one warning naming the servers and
// why there is no session; each acquisition then fails with
// ErrUnavailable naming them too.
func TestWrongAddressIsNamed(t *testing.T) {
	for _, tc := range []struct {
		name string
		addr func(*testing.T) string
		why  string
	}{
		{"closed port", func(t *testing.T) string { return servertest.ClosedAddr(t) }, "connection refused"},
		{"HTTP server", httpAddr, "has not answered the session handshake"}, // it waits for a request line
		{"silent listener", silentAddr, "has not answered the session handshake"},
		{"SSH server", sshAddr, `answered "SSH-", not a ZooKeeper connect response`},
		{"unknown host", func(*testing.T) string { return "no-such-host.invalid:2181" }, "lookup no-such-host.invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.addr(t)
			logs := &lockmwtest.Logs{}
			cfg := zookeeper.Config{Servers: []string{addr}, TickTime: zktest.TickTime, ConnectTimeout: time.Second}
			l, err := zookeeper.New(cfg, lockmw.WithTTL(testTTL), lockmw.WithLogger(slog.New(logs)))
			if err != nil {
				t.Fatalf("New: %v, want a Locker (the store may come up later)", err)
			}
			t.Cleanup(func() { _ = l.Close() })
			warns := lockmwtest.Texts(logs.Find(slog.LevelWarn, ""))
			if len(warns) != 1 || !strings.Contains(warns[0], "ZooKeeper cannot be reached") || !strings.Contains(warns[0], addr) || !strings.Contains(warns[0], tc.why) {
				t.Errorf("New logged %q, want one warning that ZooKeeper cannot be reached, naming %s and %q", warns, addr, tc.why)
			}
			_, err = l.TryAcquire(context.Background(), "k")
			if !errors.Is(err, lockmw.ErrUnavailable) {
				t.Errorf("TryAcquire: %v, want ErrUnavailable", err)
			}
			for _, want := range []string{"no session with " + addr, tc.why} {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("TryAcquire: %v, want it to say %q", err, want)
				}
			}
		})
	}
}

// TestEmptyServersIsAnInvalidOption: an empty server list is a
// configuration error saying so.
func TestEmptyServersIsAnInvalidOption(t *testing.T) {
	_, err := zookeeper.New(zookeeper.Config{})
	if !errors.Is(err, lockmw.ErrInvalidOption) || errors.Is(err, lockmw.ErrNilClient) || !strings.Contains(err.Error(), "Servers is empty") {
		t.Fatalf("New with no servers: %v, want ErrInvalidOption saying Servers is empty", err)
	}
}

// TestReachableNewLogsNothing: New against a live ensemble warns of
// nothing.
func TestReachableNewLogsNothing(t *testing.T) {
	e := zktest.StartEnsemble(t, 1)
	logs := &lockmwtest.Logs{}
	newLocker(t, e, lockmw.WithLogger(slog.New(logs)))
	if warns := logs.Find(slog.LevelWarn, ""); len(warns) != 0 {
		t.Fatalf("New against a live ensemble logged %q", lockmwtest.Texts(warns))
	}
}
