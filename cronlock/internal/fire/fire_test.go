package fire_test

import (
	"testing"
	"time"

	"github.com/lockmw/lockmw/cronlock/internal/fire"
	"github.com/lockmw/lockmw/internal/fireclaim"
)

// Missed lists the fires between the previous claim and the won one.
func TestMissed(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	next := func(t time.Time) time.Time { return t.Add(time.Second) }
	missed := fire.Missed(fireclaim.Claim{Won: true, Fire: t0.Add(time.Second)}, t0.Add(3*time.Second), next)
	if len(missed) != 1 || !missed[0].Equal(t0.Add(2*time.Second)) {
		t.Errorf("Missed = %v, want the one fire between", missed)
	}
	if missed := fire.Missed(fireclaim.Claim{Won: true}, t0, next); missed != nil {
		t.Errorf("Missed after no claim = %v, want none", missed)
	}
}

// A Times names the fire running at a time: the latest recorded fire not
// after it.
func TestTimesAt(t *testing.T) {
	var times fire.Times
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 12 {
		times.Record(t0.Add(time.Duration(i) * time.Second))
	}
	for _, tc := range []struct {
		now  time.Time
		want time.Time
		ok   bool
	}{
		{t0.Add(11 * time.Second), t0.Add(11 * time.Second), true},
		{t0.Add(10*time.Second + 700*time.Millisecond), t0.Add(10 * time.Second), true},
		{t0.Add(time.Second), time.Time{}, false}, // older than what is kept
	} {
		got, ok := times.At(tc.now, 0)
		if ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("At(%v) = %v, %v; want %v, %v", tc.now, got, ok, tc.want, tc.ok)
		}
	}
}
