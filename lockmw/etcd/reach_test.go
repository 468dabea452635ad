package etcd_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/servertest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd"
	"github.com/lockmw/lockmw/lockmw/etcd/internal/etcdtest"
)

// TestUnreachableEtcdIsNamed: against a closed port, New returns a Locker
// and logs one warning naming the endpoint and the refused dial; an
// acquisition whose bound (the TTL) runs out names etcd, what it waited
// for, how long, and the refused dial, and still matches ErrUnavailable and
// context.DeadlineExceeded; the caller's own context ending first stays
// the caller's error.
func TestUnreachableEtcdIsNamed(t *testing.T) {
	addr := servertest.ClosedAddr(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	logs := &lockmwtest.Logs{}
	l, err := etcd.New(cli, lockmw.WithTTL(2*time.Second), lockmw.WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatalf("New against an unreachable etcd: %v, want a Locker", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	warns := lockmwtest.Texts(logs.Find(slog.LevelWarn, "etcd cannot be reached"))
	if len(warns) != 1 || !strings.Contains(warns[0], addr) || !strings.Contains(warns[0], "connection refused") {
		t.Errorf("New logged %q, want one warning naming %s and the refused connection", warns, addr)
	}

	_, err = l.TryAcquire(context.Background(), "k")
	for _, want := range []error{lockmw.ErrUnavailable, context.DeadlineExceeded} {
		if !errors.Is(err, want) {
			t.Errorf("TryAcquire: %v, want it to match %v", err, want)
		}
	}
	for _, want := range []string{`acquire "k"`, "etcd did not answer the acquisition within 2s", addr, "connection refused"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("TryAcquire: %v, want it to say %q", err, want)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = l.TryAcquire(ctx, "k")
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, lockmw.ErrUnavailable) || strings.Contains(err.Error(), "did not answer") {
		t.Errorf("TryAcquire whose own context ended first: %v, want the caller's context error only", err)
	}
	if n := len(logs.Find(slog.LevelWarn, "etcd cannot be reached")); n != 1 {
		t.Errorf("%d warnings that etcd cannot be reached, want New's one", n)
	}
}

// TestReachableEtcdNewLogsNothing: New against a live etcd warns of nothing.
func TestReachableEtcdNewLogsNothing(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	logs := &lockmwtest.Logs{}
	l, err := etcd.New(cli, lockmw.WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if warns := logs.Find(slog.LevelWarn, ""); len(warns) != 0 {
		t.Fatalf("New against a live etcd logged %q", lockmwtest.Texts(warns))
	}
}

// TestPausedEtcdIsNamed: an acquisition sent to a paused etcd names etcd,
// the acquisition and the bound, and says the client saw no connection
// error (the connection is up: the server does not answer).
func TestPausedEtcdIsNamed(t *testing.T) {
	srv := etcdtest.Start(t)
	l := newLocker(t, srv.Client(t), lockmw.WithTTL(2*time.Second))
	srv.Pause(t)
	defer srv.Resume(t)
	_, err := l.TryAcquire(context.Background(), "k")
	want := `lockmw: store unavailable: acquire "k": etcd did not answer the acquisition within 2s (the lease TTL bounds each request); its client saw no connection error`
	if !errors.Is(err, lockmw.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("TryAcquire on a paused etcd: %v, want ErrUnavailable saying %q", err, want)
	}
}

// TestSilentEtcdIsNamed: against a listener that accepts connections and
// never answers, New waits its TTL, returns a Locker and warns once; an
// acquisition names the connection that never came up.
func TestSilentEtcdIsNamed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	addr := ln.Addr().String()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	logs := &lockmwtest.Logs{}
	l, err := etcd.New(cli, lockmw.WithTTL(2*time.Second), lockmw.WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatalf("New against a silent listener: %v, want a Locker", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	warns := lockmwtest.Texts(logs.Find(slog.LevelWarn, "etcd cannot be reached"))
	if len(warns) != 1 || !strings.Contains(warns[0], addr) || !strings.Contains(warns[0], "did not answer") {
		t.Errorf("New logged %q, want one warning that etcd at %s did not answer", warns, addr)
	}
	_, err = l.TryAcquire(context.Background(), "k")
	for _, want := range []string{"etcd did not answer the acquisition within 2s", "last error reaching it: etcd at " + addr} {
		if !errors.Is(err, lockmw.ErrUnavailable) || !strings.Contains(err.Error(), want) {
			t.Errorf("TryAcquire: %v, want ErrUnavailable saying %q", err, want)
		}
	}
}
