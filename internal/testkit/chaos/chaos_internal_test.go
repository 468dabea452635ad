package chaos

import (
	"testing"
	"time"
)

func TestLockmwCodeMatchesLockmwPackagesOnly(t *testing.T) {
	for frame, want := range map[string]bool{
		"github.com/lockmw/lockmw/lockmw.(*Locker).Acquire(...)":                        true,
		"github.com/lockmw/lockmw/lockmw/etcd.(*etcdStore).WaitTurn(...)":               true,
		"github.com/lockmw/lockmw/lockmw/internal/store.Wait(...)":                      true,
		"created by github.com/lockmw/lockmw/lockmw.(*keepalive).start in goroutine 7":  true,
		"github.com/lockmw/lockmw/lockmw_test.TestChaos(...)":                           false,
		"github.com/lockmw/lockmw/lockmw/etcd_test.startEtcdChaos.func3(...)":           false,
		"github.com/lockmw/lockmw/lockmw/etcd/internal/etcdtest.(*Server).launchLocked": false,
		"github.com/lockmw/lockmw/internal/testkit/chaos.(*chaosRun).worker(...)":       false,
		"go.etcd.io/etcd/client/v3.(*watchGrpcStream).run(...)":                         false,
	} {
		stack := "goroutine 12 [select]:\n" + frame + "\n\t/src/x.go:1 +0x1"
		if got := runsLockmw(stack); got != want {
			t.Errorf("%q: lockmw code %v, want %v", frame, got, want)
		}
	}
}

func TestTimingDefaultsAndDuration(t *testing.T) {
	tm := Timing{MinTTL: 2 * time.Second, MaxTTL: 4 * time.Second, ShortDuration: 30 * time.Second}.withDefaults()
	if tm.MinTTL != 2*time.Second || tm.MaxTTL != 4*time.Second || tm.ShortMinTTL != 600*time.Millisecond || tm.LockerTTL != time.Second {
		t.Errorf("withDefaults kept or filled in wrongly: %+v", tm)
	}
	if d := tm.duration(Config{Duration: time.Minute}); d != time.Minute {
		t.Errorf("duration with -chaos.duration=1m: %v", d)
	}
	want := 30 * time.Second
	if testing.Short() {
		want = 10 * time.Second
	}
	if d := tm.duration(Config{}); d != want {
		t.Errorf("default duration %v, want %v", d, want)
	}
}
