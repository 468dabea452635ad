package cronlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/lockmw/lockmw/cronlock"
	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/cronsuite"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// Two applications share one Redis with different prefixes, each on two
// instances (one 300 ms late), and each has a job named cleanup: each
// application runs every fire of its own job exactly once, also when its
// Scheduler is given a Redis client (the suite's Prefixes claims in the
// Locker's Redis).
func TestSchedulerPrefixesClientGiven(t *testing.T) {
	srv := redistest.Start(t)
	cronsuite.CheckPrefixes(t, func(prefix string) cronsuite.NewScheduler {
		return func(t testing.TB, c *cron.Cron, _ cronsuite.Host, opts ...cronlock.Option) (*cronlock.Scheduler, error) {
			client := srv.Client(t)
			return cronlock.NewScheduler(c, newLockerOn(t, client, lockmw.WithPrefix(prefix)), client, opts...)
		}
	})
}

// A rolling upgrade on one Redis: instances of the release before the
// prefix scoping (its claim script on "cronlock:{JOB}:fired") run beside
// instances of this release, one of them 300 ms late; later this release
// runs beside the next one, which claims in the Locker's record only.
// Every fire runs exactly once.
func TestSchedulerRollingUpgrade(t *testing.T) {
	for _, tc := range []struct {
		name     string
		releases map[string]string // host → release: older, this, next
	}{
		{"older and this release", map[string]string{"host-a": "older", "host-b": "this", "host-c": "this"}},
		{"older late", map[string]string{"host-a": "this", "host-b": "this", "host-c": "older"}},
		{"this release and the next", map[string]string{"host-a": "next", "host-b": "this", "host-c": "next"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			newScheduler := func(t testing.TB, c *cron.Cron, h cronsuite.Host, opts ...cronlock.Option) (*cronlock.Scheduler, error) {
				client := srv.Client(t)
				l := newLockerOn(t, client)
				switch tc.releases[h.Name] {
				case "older":
					return cronlock.NewSchedulerWithClaims(c, l, cronsuite.NewOldClaims(client), opts...)
				case "next":
					return cronlock.NewSchedulerWithClaims(c, l, fireclaim.NewNext(client, lockmw.DefaultPrefix), opts...)
				}
				return cronlock.NewScheduler(c, l, nil, opts...)
			}
			logs := &cronsuite.RecordLogger{}
			tally := cronsuite.RunHosts(t, newScheduler, "report", []cronsuite.Host{
				{Name: "host-a"}, {Name: "host-b"}, {Name: "host-c", Late: 300 * time.Millisecond}}, 10, logs)
			hist := tally.Check(t, time.Second)
			byRelease := map[string]int{}
			for _, hosts := range tally.All() {
				for _, h := range hosts {
					byRelease[tc.releases[h]]++
				}
			}
			t.Logf("fires run 0 times: %d, once: %d, 2+ times: %d; runs by release: %v", hist[0], hist[1], hist[2], byRelease)
			if errs := logs.Find(true, ""); len(errs) != 0 {
				t.Errorf("error logs, want none: %v", errs)
			}
		})
	}
}

// The record names the Locker's prefix; a Redlock Locker's Scheduler, given
// one master's client, claims under its prefix too.
func TestSchedulerRecordKeys(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	masters := []redis.UniversalClient{client, redistest.Start(t).Client(t), redistest.Start(t).Client(t)}
	redlock, err := lockmw.NewRedlock(masters, lockmw.WithPrefix("red:"))
	if err != nil {
		t.Fatal(err)
	}
	defer redlock.Close()
	for _, tc := range []struct {
		locker *lockmw.Locker
		rdb    redis.UniversalClient
		key    string
	}{
		{newLockerOn(t, client, lockmw.WithPrefix("app:")), nil, "app:cronlock:{sweep}:claim"},
		{newLockerOn(t, client), client, "lockmw:cronlock:{sweep}:claim"},
		{redlock, client, "red:cronlock:{sweep}:claim"},
	} {
		ran := make(chan struct{}, 1)
		c := cron.New(cron.WithSeconds())
		s, err := cronlock.NewScheduler(c, tc.locker, tc.rdb, cronlock.WithParser(cronsuite.SecondsParser), cronlock.WithLogger(cron.DiscardLogger))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.AddJob("sweep", "* * * * * *", cron.FuncJob(func() {
			select {
			case ran <- struct{}{}:
			default:
			}
		})); err != nil {
			t.Fatal(err)
		}
		c.Start()
		<-ran
		cronsuite.StopAll([]*cron.Cron{c})
		if n, err := client.Exists(context.Background(), tc.key).Result(); err != nil || n != 1 {
			t.Errorf("record %s: exists %d, %v", tc.key, n, err)
		}
		if err := client.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
