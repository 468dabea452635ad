package cronlock_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lockmw/lockmw/cronlock"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/cronsuite"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

// Through a real Redis stall (the server paused with SIGSTOP, so the
// claims sent meanwhile time out and are applied once it resumes), every
// fire that ran on no instance is counted in cronlock.gaps, once: fires no
// one claimed by the next claim's instance, fires whose claim won while its
// reply was lost by the claiming instance once Redis answers again, fires
// whose lease could not be taken after a won claim by their claimant.
func TestSchedulerGapAccountingThroughStall(t *testing.T) {
	srv := redistest.Start(t)
	_, _, reader, mp := lockmwtest.NewTelemetry()
	logs := &cronsuite.RecordLogger{}
	tally := &cronsuite.FireTally{}
	var scheds []*cron.Cron
	for _, name := range []string{"host-a", "host-b"} {
		client := srv.Client(t, func(o *redis.Options) {
			o.MaxRetries = -1
			o.ReadTimeout = 300 * time.Millisecond
			o.WriteTimeout = 300 * time.Millisecond
		})
		c := cron.New(cron.WithSeconds())
		s, err := cronlock.NewScheduler(c, newLockerOn(t, client), nil, cronlock.WithMeterProvider(mp),
			cronlock.WithInstance(name), cronlock.WithLogger(logs), cronlock.WithParser(cronsuite.SecondsParser))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.AddJob("stalled", "* * * * * *", cronlock.Func(func(ctx context.Context) error {
			at, _ := cronlock.FireTime(ctx)
			tally.Add(at, name)
			return nil
		})); err != nil {
			t.Fatal(err)
		}
		scheds = append(scheds, c)
		c.Start()
	}
	eventually(t, 10*time.Second, "two fires", func() bool { return tally.Distinct() >= 2 })
	// Stall from just before a fire, so that the fire's claims are sent
	// into the stall, for three fires.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(900 * time.Millisecond)))
	srv.Pause(t)
	time.Sleep(3 * time.Second) // the stall itself, not a wait for an outcome
	srv.Resume(t)
	before := tally.Distinct()
	eventually(t, 15*time.Second, "four fires after the stall", func() bool { return tally.Distinct() >= before+4 })
	cronsuite.StopAll(scheds)

	runs := tally.All()
	var fires []time.Time
	for at := range runs {
		fires = append(fires, at)
	}
	sort.Slice(fires, func(i, j int) bool { return fires[i].Before(fires[j]) })
	lost := 0
	for at := fires[0]; at.Before(fires[len(fires)-1]); at = at.Add(time.Second) {
		switch n := len(runs[at]); n {
		case 0:
			lost++
		case 1:
		default:
			t.Errorf("fire %s ran %d times", at.Format("15:04:05"), n)
		}
	}
	var gaps int64
	for _, sm := range lockmwtest.Collect(t, reader).ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "cronlock.gaps" {
				for _, p := range sum.DataPoints {
					gaps += p.Value
				}
			}
		}
	}
	t.Logf("fires %s to %s: %d run by no instance, %d counted in cronlock.gaps", fires[0].Format("15:04:05"), fires[len(fires)-1].Format("15:04:05"), lost, gaps)
	if lost == 0 {
		t.Errorf("no fire lost in a 3 s stall: the test did not stall the claims")
	}
	if gaps != int64(lost) {
		for _, e := range logs.Find(true, "") {
			t.Logf("%s %v", e.Msg, e.KV)
		}
		t.Errorf("cronlock.gaps counted %d fires, %d ran on no instance", gaps, lost)
	}
}
