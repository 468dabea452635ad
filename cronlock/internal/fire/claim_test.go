package fire_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockmw/lockmw/cronlock/internal/fire"
	"github.com/lockmw/lockmw/internal/redistest"
)

// A fire is won by its first claim; later claims of it or of an older fire
// are refused and name the claim that refused them; a later fire is won
// and names the previous claim. The record is one key per job.
func TestClaimHighWaterMark(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	store := fire.NewStore(client)
	t0 := time.UnixMilli(1_700_000_000_000)
	steps := []struct {
		at       time.Time
		instance string
		won      bool
		prev     time.Time
		prevBy   string
	}{
		{t0, "a", true, time.Time{}, ""},
		{t0, "b", false, t0, "a"},                   // the same fire
		{t0.Add(-time.Second), "c", false, t0, "a"}, // an older fire
		{t0.Add(time.Second), "c", true, t0, "a"},   // the next fire
		{t0.Add(time.Second), "a", false, t0.Add(time.Second), "c"},
		{t0.Add(3 * time.Second), "b", true, t0.Add(time.Second), "c"}, // skips one
	}
	for i, s := range steps {
		c, err := store.Claim(ctx, "job", s.at, s.instance)
		if err != nil {
			t.Fatal(err)
		}
		if c.Won != s.won || !c.Fire.Equal(s.prev) || c.By != s.prevBy {
			t.Errorf("step %d: %s claims %v: got %+v, want won=%v by %q at %v", i, s.instance, s.at, c, s.won, s.prevBy, s.prev)
		}
	}
	keys, err := client.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != fire.Key("job") {
		t.Errorf("keys %v, want only %s", keys, fire.Key("job"))
	}
	next := func(t time.Time) time.Time { return t.Add(time.Second) }
	missed := fire.Missed(fire.Claim{Won: true, Fire: t0.Add(time.Second)}, t0.Add(3*time.Second), next)
	if len(missed) != 1 || !missed[0].Equal(t0.Add(2*time.Second)) {
		t.Errorf("Missed = %v, want the one fire between", missed)
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
