package conformance

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/lockmw/lockmw/lockmw"
)

// This file checks the lockmw.waiting up-down counter: every way a store's
// waiters wait counts them while they wait, and only then.

// upDowns is a metric.MeterProvider that keeps the sums of its int64
// up-down counters by instrument and lock.name; every other instrument is
// a no-op.
type upDowns struct {
	noop.MeterProvider
	mu   sync.Mutex
	sums map[string]int64 // instrument name + " " + lock.name
}

func (p *upDowns) Meter(string, ...metric.MeterOption) metric.Meter { return upDownMeter{p: p} }

func (p *upDowns) sum(instrument, name string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sums[instrument+" "+name]
}

type upDownMeter struct {
	noop.Meter
	p *upDowns
}

func (m upDownMeter) Int64UpDownCounter(name string, _ ...metric.Int64UpDownCounterOption) (metric.Int64UpDownCounter, error) {
	return upDownCounter{p: m.p, name: name}, nil
}

type upDownCounter struct {
	noop.Int64UpDownCounter
	p    *upDowns
	name string
}

func (c upDownCounter) Enabled(context.Context) bool { return true }

func (c upDownCounter) Add(_ context.Context, n int64, opts ...metric.AddOption) {
	attrs := metric.NewAddConfig(opts).Attributes()
	v, _ := attrs.Value(attribute.Key("lock.name"))
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if c.p.sums == nil {
		c.p.sums = map[string]int64{}
	}
	c.p.sums[c.name+" "+v.AsString()] += n
}

// waitingMetric: while another Locker holds a lock, a Locker's waiters in
// every mode the store has (two default-mode waiters, so that one waits
// behind the other within the Locker, and a Fair one) count in
// lockmw.waiting; a TryAcquire and a WithWait(0) that find it busy do not;
// the count returns to 0 once each waiter got the lock.
func (r *runner) waitingMetric(t *testing.T) {
	k := key(t, "")
	ttl := r.ttl(10 * time.Second)
	mp := &upDowns{}
	l := r.locker(t, lockmw.WithTTL(ttl), lockmw.WithMeterProvider(mp))
	holder := r.locker(t, lockmw.WithTTL(ttl))
	name := lockmw.WithName("waiting:{id}")
	waiting := func() int64 { return mp.sum("lockmw.waiting", "waiting:{id}") }

	lease := acquireOK(t, holder, k)
	ctx := context.Background()
	if _, err := l.TryAcquire(ctx, k, name); err == nil {
		t.Fatal("TryAcquire got a held lock")
	}
	if _, err := l.Acquire(ctx, k, name, lockmw.WithWait(0)); err == nil {
		t.Fatal("Acquire WithWait(0) got a held lock")
	}
	if n := waiting(); n != 0 {
		t.Fatalf("lockmw.waiting = %d after a TryAcquire and a WithWait(0) found the lock busy, want 0", n)
	}
	var modes [][]lockmw.AcquireOption
	modes = append(modes, []lockmw.AcquireOption{name}, []lockmw.AcquireOption{name})
	if r.Fair {
		modes = append(modes, []lockmw.AcquireOption{name, lockmw.Fair()})
	}
	got := make(chan *lockmw.Lease, len(modes))
	errs := make(chan error, len(modes))
	for _, opts := range modes {
		go func() {
			w, err := l.Acquire(ctx, k, append(opts, lockmw.WithWait(30*time.Second))...)
			if err != nil {
				errs <- err
				return
			}
			got <- w
		}()
	}
	want := int64(len(modes))
	deadline := time.Now().Add(10 * time.Second)
	for waiting() != want {
		if time.Now().After(deadline) {
			t.Fatalf("lockmw.waiting = %d with %d waiters, want %d", waiting(), len(modes), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	releaseOK(t, lease)
	for range modes {
		select {
		case w := <-got:
			if n := waiting(); n < 0 || n >= want {
				t.Fatalf("lockmw.waiting = %d once a waiter of %d got the lock", n, want)
			}
			want--
			releaseOK(t, w)
		case err := <-errs:
			t.Fatalf("a waiter: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("a release woke no waiter")
		}
	}
	if n := waiting(); n != 0 {
		t.Fatalf("lockmw.waiting = %d once every waiter got the lock, want 0", n)
	}
	r.waitNoLeftovers(t, k)
}
