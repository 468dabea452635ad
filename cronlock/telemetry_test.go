//lint:file-ignore SA1019 the deprecated Singleton and New keep working: their tests use them on purpose.

package cronlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lockmw/lockmw/cronlock"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/cronsuite"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

// Runs and skips are counted by outcome and reason, timed, and traced, and
// a busy skip's log names the instance holding the lock.
func TestTelemetryAndSkipLog(t *testing.T) {
	srv := redistest.Start(t)
	spans, tp, reader, mp := lockmwtest.NewTelemetry()
	logs := &cronsuite.RecordLogger{}
	opts := func(inst string) []cronlock.Option {
		return []cronlock.Option{cronlock.WithTracerProvider(tp), cronlock.WithMeterProvider(mp),
			cronlock.WithLogger(logs), cronlock.WithInstance(inst), cronlock.WithMinHold(time.Minute),
			cronlock.WithHolderRecord(srv.Client(t))}
	}
	a := cronlock.Singleton(newLocker(t, srv), "nightly", opts("host-a")...)
	b := cronlock.Singleton(newLocker(t, srv), "nightly", opts("host-b")...)
	failing := cronlock.Singleton(newLocker(t, srv), "failing", opts("host-a")...)

	ran := 0
	a(cron.FuncJob(func() { ran++ })).Run()
	b(cron.FuncJob(func() { ran++ })).Run() // busy: a holds it for MinHold
	failing(cronlock.Func(func(context.Context) error { return errors.New("disk full") })).Run()
	if ran != 1 {
		t.Fatalf("the job ran %d times, want 1", ran)
	}

	skips := logs.Find(false, "skip")
	if len(skips) != 1 {
		t.Fatalf("want one busy skip log, got %v", logs.Find(false, ""))
	}
	if skips[0].KV["holder"] != "host-a" || skips[0].KV["instance"] != "host-b" || skips[0].KV["job"] != "nightly" {
		t.Errorf("skip log = %v, want job nightly, instance host-b, holder host-a", skips[0].KV)
	}
	if logs.Count(true, "job failed") != 1 {
		t.Errorf("want one error log of the failed job, got %v", logs.Find(true, ""))
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if len(rm.ScopeMetrics) != 1 || rm.ScopeMetrics[0].Scope.Name != cronlock.ScopeName {
		t.Fatalf("metrics scopes = %+v, want one named %s", rm.ScopeMetrics, cronlock.ScopeName)
	}
	count := func(metric string, attrs ...attribute.KeyValue) int64 {
		want := attribute.NewSet(attrs...)
		for _, m := range rm.ScopeMetrics[0].Metrics {
			if m.Name != metric {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						return p.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						return int64(p.Count)
					}
				}
			}
		}
		return 0
	}
	job, outcome := attribute.Key("cron.job"), attribute.Key("cron.outcome")
	for _, c := range []struct {
		metric string
		attrs  []attribute.KeyValue
	}{
		{"cronlock.runs", []attribute.KeyValue{job.String("nightly"), outcome.String("ok")}},
		{"cronlock.runs", []attribute.KeyValue{job.String("failing"), outcome.String("error")}},
		{"cronlock.skips", []attribute.KeyValue{job.String("nightly"), attribute.String("cron.skip_reason", "busy")}},
		{"cronlock.run.duration", []attribute.KeyValue{job.String("nightly"), outcome.String("ok")}},
	} {
		if n := count(c.metric, c.attrs...); n != 1 {
			t.Errorf("%s%v = %d, want 1", c.metric, c.attrs, n)
		}
	}

	var runSpans []sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		if s.Name() == "cronlock.run" {
			runSpans = append(runSpans, s)
			if s.InstrumentationScope().Name != cronlock.ScopeName {
				t.Errorf("span scope = %s, want %s", s.InstrumentationScope().Name, cronlock.ScopeName)
			}
		}
	}
	if len(runSpans) != 3 {
		t.Fatalf("%d cronlock.run spans, want 3 (run, busy skip, failed run)", len(runSpans))
	}
	wantStatus := []codes.Code{codes.Unset, codes.Unset, codes.Error} // busy is not an error
	for i, s := range runSpans {
		if s.Status().Code != wantStatus[i] {
			t.Errorf("span %d status = %v, want %v", i, s.Status().Code, wantStatus[i])
		}
	}
}
