package fireclaim_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/cronsuite"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

var t0 = time.UnixMilli(1_700_000_000_000)

// The claim semantics (cronsuite.RunClaims) on Redis, whose records are
// one key per job under the Locker's prefix, and the old record of the
// transition.
func TestClaimHighWaterMark(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	cronsuite.RunClaims(t, fireclaim.NewRedis(client, "app:"), "job")
	keys, err := client.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	if want := []string{"app:cronlock:{job}:claim", "cronlock:{job}:fired"}; !slices.Equal(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
}

// Two applications sharing one Redis with different prefixes each win
// every fire of their job of the same name.
func TestClaimsScopedByPrefix(t *testing.T) {
	client := redistest.Start(t).Client(t)
	apps := []fireclaim.Claims{fireclaim.NewRedis(client, "billing:"), fireclaim.NewRedis(client, "mail:")}
	for i := range 5 {
		at := t0.Add(time.Duration(i) * time.Second)
		for j, c := range apps {
			got, err := c.Claim(context.Background(), "cleanup", at, "host")
			if err != nil {
				t.Fatal(err)
			}
			if !got.Won {
				t.Errorf("fire %d: application %d refused by %+v", i, j, got)
			}
		}
	}
}

// A rolling upgrade: instances of the release before the prefix scoping
// (its own script on the old record), of this release, and of the next
// one (the Locker's record only) claim every fire of one job side by side
// on one Redis, in random order, each fire after the last. Each fire is
// won exactly once, for the default prefix (both records in one script)
// and for a prefix with a hash tag of its own (the old record's part
// first). Older and next releases never run side by side.
func TestClaimsRollingUpgrade(t *testing.T) {
	client := redistest.Start(t).Client(t)
	for _, prefix := range []string{"lockmw:", "app{x}:"} {
		for _, mix := range []struct {
			name     string
			claimers func(job string) []fireclaim.Claims
		}{
			{"older and this release", func(string) []fireclaim.Claims {
				return []fireclaim.Claims{cronsuite.NewOldClaims(client), cronsuite.NewOldClaims(client),
					fireclaim.NewRedis(client, prefix), fireclaim.NewRedis(client, prefix)}
			}},
			{"this release and the next", func(string) []fireclaim.Claims {
				return []fireclaim.Claims{fireclaim.NewRedis(client, prefix), fireclaim.NewRedis(client, prefix),
					fireclaim.NewNext(client, prefix), fireclaim.NewNext(client, prefix)}
			}},
		} {
			t.Run(prefix+" "+mix.name, func(t *testing.T) {
				job := fmt.Sprintf("sweep-%s-%s", prefix, mix.name)
				claimers := mix.claimers(job)
				rng := rand.New(rand.NewPCG(1, uint64(len(job))))
				wins := make([]int, len(claimers))
				for i := range 300 {
					at := t0.Add(time.Duration(i) * time.Second)
					// A random nonempty set of instances claims the fire
					// (the others are late or down), all at once.
					var who []int
					for k := range claimers {
						if rng.IntN(3) > 0 {
							who = append(who, k)
						}
					}
					if len(who) == 0 {
						who = []int{rng.IntN(len(claimers))}
					}
					won := make(chan int, len(who))
					var wg sync.WaitGroup
					for _, k := range who {
						wg.Add(1)
						go func() {
							defer wg.Done()
							got, err := claimers[k].Claim(context.Background(), job, at, fmt.Sprint("host-", k))
							if err != nil {
								t.Error(err)
							}
							if got.Won {
								won <- k
							}
						}()
					}
					wg.Wait()
					close(won)
					var winners []int
					for k := range won {
						winners = append(winners, k)
						wins[k]++
					}
					if len(winners) != 1 {
						t.Fatalf("fire %d claimed by %v: won by %v, want exactly one", i, who, winners)
					}
				}
				t.Logf("wins per instance: %v", wins)
				for k, n := range wins {
					if n == 0 {
						t.Errorf("instance %d won no fire", k)
					}
				}
			})
		}
	}
}

// The check above sees a double run: the older release beside the next
// one, which share no record, both win fires.
func TestClaimsOlderBesideNextRunTwice(t *testing.T) {
	client := redistest.Start(t).Client(t)
	older, next := cronsuite.NewOldClaims(client), fireclaim.NewNext(client, "lockmw:")
	for _, c := range []fireclaim.Claims{older, next} {
		if got, err := c.Claim(context.Background(), "sweep", t0, "host"); err != nil || !got.Won {
			t.Fatalf("%+v, %v; want both to win: the upgrade must go through this release", got, err)
		}
	}
}

// The same on a Cluster: the default prefix claims in both records in one
// script (one slot), a prefix with its own hash tag in two steps.
func TestClaimsRollingUpgradeCluster(t *testing.T) {
	client := redistest.StartCluster(t).Client(t)
	for _, prefix := range []string{"lockmw:", "app{x}:"} {
		claimers := []fireclaim.Claims{cronsuite.NewOldClaims(client), fireclaim.NewRedis(client, prefix), fireclaim.NewRedis(client, prefix)}
		for i := range 60 {
			at := t0.Add(time.Duration(i) * time.Second)
			winners := 0
			for _, k := range rand.Perm(len(claimers)) {
				got, err := claimers[k].Claim(context.Background(), "sweep-"+prefix, at, fmt.Sprint("host-", k))
				if err != nil {
					t.Fatalf("prefix %q: %v", prefix, err)
				}
				if got.Won {
					winners++
				}
			}
			if winners != 1 {
				t.Fatalf("prefix %q, fire %d: %d winners, want 1", prefix, i, winners)
			}
		}
		cronsuite.RunClaims(t, fireclaim.NewRedis(client, prefix), "claims-"+prefix)
	}
}

// Claims of another application running this release are not counted in
// the old record, but claims of an older release still are, for every
// application sharing the Redis (as before the prefix scoping).
func TestClaimsOldRecordOtherApplications(t *testing.T) {
	client := redistest.Start(t).Client(t)
	ctx := context.Background()
	billing, mail := fireclaim.NewRedis(client, "billing:"), fireclaim.NewRedis(client, "mail:")
	if got, err := billing.Claim(ctx, "cleanup", t0, "b"); err != nil || !got.Won {
		t.Fatalf("billing: %+v, %v", got, err)
	}
	if got, err := mail.Claim(ctx, "cleanup", t0, "m"); err != nil || !got.Won {
		t.Fatalf("mail, after billing's claim of the same fire: %+v, %v; want won", got, err)
	}
	at := t0.Add(time.Second)
	if got, err := cronsuite.NewOldClaims(client).Claim(ctx, "cleanup", at, "old"); err != nil || !got.Won {
		t.Fatalf("older release: %+v, %v", got, err)
	}
	// Then billing's own claim of the same fire must be refused: the older
	// instance may be one of billing's.
	if got, err := billing.Claim(ctx, "cleanup", at, "b"); err != nil || got.Won || got.By != "old" {
		t.Errorf("billing after an older release's claim: %+v, %v; want refused by old", got, err)
	}
	// A later fire is won again, and names the older claim as the last.
	if got, err := billing.Claim(ctx, "cleanup", at.Add(time.Second), "b"); err != nil || !got.Won || !got.Fire.Equal(at) || got.By != "old" {
		t.Errorf("billing's next fire: %+v, %v; want won after old's claim of %v", got, err, at)
	}
}

// A claim whose reply is lost in a Redis stall, applied once Redis
// resumes, is reported by the next claim of the job as an orphan: won,
// not run. One that was applied but refused is not; one whose record has
// since seen more wins than it keeps is unsettled.
func TestClaimOrphans(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t, func(o *redis.Options) {
		o.MaxRetries = -1
		o.ReadTimeout = 200 * time.Millisecond
	})
	admin := srv.Client(t)
	ctx := context.Background()
	a, b := fireclaim.NewRedis(client, "app:"), fireclaim.NewRedis(admin, "app:")
	claim := func(c fireclaim.Claims, at time.Time, who string) fireclaim.Claim {
		t.Helper()
		got, err := c.Claim(ctx, "job", at, who)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	// stalled claims at while Redis is paused: the reply is lost, and
	// Redis runs the claim's script once resumed.
	scripts := func() int {
		t.Helper()
		info, err := admin.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		var calls int
		if i := strings.Index(info, "cmdstat_evalsha:calls="); i >= 0 {
			fmt.Sscanf(info[i+len("cmdstat_evalsha:calls="):], "%d", &calls)
		}
		return calls
	}
	stalled := func(at time.Time) {
		t.Helper()
		before := scripts()
		srv.Pause(t)
		_, err := a.Claim(ctx, "job", at, "host-a")
		srv.Resume(t)
		if err == nil {
			t.Fatal("a claim during the stall succeeded")
		}
		lockmwtest.Eventually(t, 5*time.Second, "the stalled claim run", func() bool { return scripts() > before })
	}

	claim(a, t0, "host-a")
	stalled(t0.Add(time.Second)) // applied and won
	if got := claim(b, t0.Add(2*time.Second), "host-b"); !got.Won || !got.Fire.Equal(t0.Add(time.Second)) || got.By != "host-a" {
		t.Fatalf("host-b after the stall: %+v; want won after host-a's claim", got)
	}
	got := claim(a, t0.Add(3*time.Second), "host-a")
	if want := []fireclaim.Orphan{{Fire: t0.Add(time.Second), Prev: t0}}; !got.Won || !slices.Equal(got.Orphans, want) || got.Unsettled != nil {
		t.Fatalf("host-a's next claim: %+v; want won, with orphans %v", got, want)
	}
	if got := claim(a, t0.Add(4*time.Second), "host-a"); got.Orphans != nil {
		t.Errorf("orphans reported twice: %+v", got)
	}

	stalled(t0) // an old fire: applied, refused
	if got := claim(a, t0.Add(5*time.Second), "host-a"); !got.Won || got.Orphans != nil || got.Unsettled != nil {
		t.Errorf("after a refused stalled claim: %+v; want won, no orphan", got)
	}

	stalled(t0.Add(6 * time.Second)) // applied and won, then forgotten
	for i := range 16 {
		claim(b, t0.Add(time.Duration(7+i)*time.Second), "host-b")
	}
	if got := claim(a, t0.Add(30*time.Second), "host-a"); got.Orphans != nil || !slices.Equal(got.Unsettled, []time.Time{t0.Add(6 * time.Second)}) {
		t.Errorf("after 16 more wins: %+v; want the stalled claim unsettled", got)
	}
}

// Claim records expire: every claim, won or refused, and every run
// recorded keeps them for the keep (never shortening it), a win for twice
// the time since the fire before it when that is longer, and a record an
// older release wrote without an expiry gets one. For the default prefix
// (one script) and a prefix with a hash tag (the old record's part first).
func TestClaimRecordsExpire(t *testing.T) {
	client := redistest.Start(t).Client(t)
	ctx := context.Background()
	const keep = 2 * time.Hour
	for _, prefix := range []string{"lockmw:", "app{x}:"} {
		t.Run(prefix, func(t *testing.T) {
			job := "expire" + prefix
			keys := []string{fireclaim.Key(prefix, job), fireclaim.LegacyKey(job)}
			// An older release's record, without an expiry.
			if err := client.HSet(ctx, keys[1], "fire", t0.UnixMilli()-1000, "by", "old", "token", "0123").Err(); err != nil {
				t.Fatal(err)
			}
			c := fireclaim.NewRedis(client, prefix).WithKeep(keep)
			ttls := func(step string, atLeast time.Duration) {
				t.Helper()
				for _, k := range keys {
					ttl, err := client.PTTL(ctx, k).Result()
					if err != nil {
						t.Fatal(err)
					}
					if ttl < atLeast-time.Minute || ttl > atLeast {
						t.Errorf("after %s: %s expires in %v, want %v", step, k, ttl, atLeast)
					}
				}
			}
			claim := func(at time.Time, want bool) {
				t.Helper()
				got, err := c.Claim(ctx, job, at, "host")
				if err != nil {
					t.Fatal(err)
				}
				if got.Won != want {
					t.Fatalf("claim of %v: won %v, want %v", at, got.Won, want)
				}
			}
			claim(t0, true)
			ttls("a won claim", keep)
			if err := c.Running(ctx, job, t0, "host"); err != nil {
				t.Fatal(err)
			}
			ttls("a run recorded", keep)
			claim(t0.Add(3*time.Hour), true) // a job firing every 3 hours
			ttls("a won claim 3h after the last", 6*time.Hour)
			claim(t0.Add(3*time.Hour), false)
			ttls("a refused claim", 6*time.Hour)
			// A record gone (expired) leaves a Running write no key
			// without expiry.
			if err := client.Del(ctx, keys...).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.Running(ctx, job, t0, "host"); err != nil {
				t.Fatal(err)
			}
			ttls("a run recorded on no record", keep)
		})
	}
}

// A keep below MinKeep is raised to it.
func TestClaimKeepAtLeastMinKeep(t *testing.T) {
	client := redistest.Start(t).Client(t)
	c := fireclaim.NewNext(client, "p:").WithKeep(time.Second)
	if _, err := c.Claim(context.Background(), "j", t0, "host"); err != nil {
		t.Fatal(err)
	}
	ttl, err := client.PTTL(context.Background(), fireclaim.Key("p:", "j")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl < fireclaim.MinKeep-time.Minute {
		t.Errorf("record expires in %v, want at least %v", ttl, fireclaim.MinKeep)
	}
}
