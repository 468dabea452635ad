package servertest

import (
	"fmt"
	"net"
	"testing"
)

// FreePort asks the kernel for a free 127.0.0.1 port. Someone else may take
// it before the server binds it: a launcher that sees its server fail so
// (Run.Output says "address already in use" in the server's words) picks
// again.
func FreePort() (int, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// FreePorts asks the kernel for n distinct free 127.0.0.1 ports (held
// together while they are picked, so they differ), for a server that
// listens on several or a cluster started at once.
func FreePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// StartAttempts is how many sets of ports RetryTakenPorts tries.
const StartAttempts = 5

// RetryTakenPorts runs start, a launcher's first start on newly picked
// ports, until it succeeds; it runs it again only when start reports that
// a port was taken (another process bound it between the pick and the
// server's bind), at most StartAttempts times in all. The error names the
// attempt that failed.
func RetryTakenPorts(start func() (portTaken bool, err error)) error {
	for attempt := 1; ; attempt++ {
		portTaken, err := start()
		if err == nil {
			return nil
		}
		if !portTaken || attempt == StartAttempts {
			return fmt.Errorf("attempt %d: %w", attempt, err)
		}
	}
}

// ClosedAddr returns a 127.0.0.1 address nothing listens on (a port the
// kernel just gave out and that was closed again), for tests of a store
// that cannot be reached: a dial to it is refused.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
