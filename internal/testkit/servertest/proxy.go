//go:build unix

package servertest

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxy is a TCP proxy on a free 127.0.0.1 port in front of one server,
// run in-process with the toxiproxy library, so that a test can make the
// network between its clients and the server slow or broken while the
// server itself keeps running. Point clients at Addr instead of the server.
// All methods are safe for concurrent use.
type Proxy struct {
	p *toxiproxy.Proxy

	mu     sync.Mutex
	toxics []string
	serial int
}

// StartProxy starts a proxy forwarding to upstream ("host:port", e.g. a
// Server's Addr) and stops it, closing every connection through it, at
// t.Cleanup.
func StartProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(api, "servertest-"+upstream, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("servertest: starting a proxy to %s: %v", upstream, err)
	}
	t.Cleanup(p.Stop)
	return &Proxy{p: p}
}

// Addr returns the proxy's address, "127.0.0.1:PORT".
func (p *Proxy) Addr() string {
	p.p.Lock()
	defer p.p.Unlock()
	return p.p.Listen
}

// AddLatency delays every reply from the server by d, on connections that
// exist now and new ones, until Heal.
func (p *Proxy) AddLatency(t testing.TB, d time.Duration) {
	t.Helper()
	p.add(t, "latency", "downstream", fmt.Sprintf(`{"latency": %d}`, d.Milliseconds()))
}

// Cut partitions the link: data in both directions is silently dropped and
// connections stay open, so clients see neither a refusal nor a reset, only
// timeouts, as when a network path fails. New connections are accepted by
// the proxy and then hang the same way. Heal restores the link.
func (p *Proxy) Cut(t testing.TB) {
	t.Helper()
	p.add(t, "timeout", "upstream", `{"timeout": 0}`)
	p.add(t, "timeout", "downstream", `{"timeout": 0}`)
}

// ResetConnections makes the proxy reset (TCP RST) every connection, old
// or new, as soon as a client sends data on it, until Heal.
func (p *Proxy) ResetConnections(t testing.TB) {
	t.Helper()
	p.add(t, "reset_peer", "upstream", `{"timeout": 0}`)
}

// Heal removes every latency, cut and reset added so far. Connections that
// lost data while the link was cut are out of step with the server; clients
// notice (a timeout) and dial new ones.
func (p *Proxy) Heal(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, name := range p.toxics {
		if err := p.p.Toxics.RemoveToxic(context.Background(), name); err != nil {
			t.Fatalf("servertest: proxy %s: removing toxic %s: %v", p.p.Listen, name, err)
		}
	}
	p.toxics = nil
}

func (p *Proxy) add(t testing.TB, kind, stream, attributes string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.waitStaleLinks(t)
	p.serial++
	name := fmt.Sprintf("%s-%s-%d", kind, stream, p.serial)
	spec := fmt.Sprintf(`{"name": %q, "type": %q, "stream": %q, "toxicity": 1, "attributes": %s}`, name, kind, stream, attributes)
	if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
		t.Fatalf("servertest: proxy %s: adding %s: %v", p.p.Listen, spec, err)
	}
	p.toxics = append(p.toxics, name)
}

// waitStaleLinks waits until no connection through the proxy holds more
// toxic stages than the proxy has toxics. toxiproxy v2.5.0 leaves such a
// connection behind when Heal removes a toxic while the connection closes
// (ToxicLink.RemoveToxic returns early, its stage still in place), until
// the connection is gone; a toxic added to it meanwhile panics (index out
// of range in ToxicLink.AddToxic), which crashed the randomized checkers.
// Only removals (Heal, under p.mu like add) make such connections, so none
// appears between this check and the add. Caller holds p.mu.
func (p *Proxy) waitStaleLinks(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := p.staleLinks()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("servertest: proxy %s: %d closing connection(s) still hold a removed toxic's stage after 30s; adding a toxic now would crash toxiproxy", p.p.Listen, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// staleLinks counts the connections (one link per direction) whose stages
// outnumber the toxics of their direction. It reads toxiproxy's unexported
// state by reflection, under the collection's lock, which every change of
// links, stages and toxics holds.
func (p *Proxy) staleLinks() int {
	c := p.p.Toxics
	c.Lock()
	defer c.Unlock()
	v := reflect.ValueOf(c).Elem()
	chain, links := v.FieldByName("chain"), v.FieldByName("links")
	n := 0
	for it := links.MapRange(); it.Next(); {
		link := it.Value().Elem()
		dir := int(link.FieldByName("direction").Uint())
		if dir < chain.Len() && link.FieldByName("stubs").Len() > chain.Index(dir).Len() {
			n++
		}
	}
	return n
}
