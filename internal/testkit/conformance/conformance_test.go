package conformance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// brokenEnv makes TestSuiteFailsABrokenStore run the suite itself (in a
// child process) instead of checking a child's result.
const brokenEnv = "LOCKMW_CONFORMANCE_BROKEN"

// TestSuiteFailsABrokenStore runs the suite, in a child process, against a
// store that does not exclude: every Locker gets a key prefix of its own,
// so Lockers never see each other's locks or fences. The suite must fail
// the subtests that such a store breaks.
func TestSuiteFailsABrokenStore(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		Run(t, brokenStore(t))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteFailsABrokenStore$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), brokenEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the suite passed a store without mutual exclusion:\n%s", out)
	}
	for _, sub := range []string{"Exclusion", "Fences", "LostWhenLinkCut", "Keys", "Inspect"} {
		if want := "--- FAIL: TestSuiteFailsABrokenStore/" + sub + " "; !strings.Contains(string(out), want) {
			t.Errorf("subtest %s did not fail against the broken store", sub)
		}
	}
	if t.Failed() {
		t.Logf("child output:\n%s", out)
	}
}

// brokenStore is one Redis where each Locker uses its own key prefix.
func brokenStore(t *testing.T) Store {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	var n atomic.Int64
	prefix := func() lockmw.Option { return lockmw.WithPrefix(fmt.Sprintf("p%d:", n.Add(1))) }
	return Store{
		Name: "broken",
		NewLocker: func(t testing.TB, opts ...lockmw.Option) (*lockmw.Locker, error) {
			return lockmw.New(srv.Client(t), append([]lockmw.Option{prefix()}, opts...)...)
		},
		NewCuttableLocker: func(t testing.TB, opts ...lockmw.Option) (*lockmw.Locker, func(testing.TB), func(testing.TB), error) {
			p := redistest.StartProxy(t, srv.Addr())
			c := redis.NewClient(&redis.Options{Addr: p.Addr()})
			t.Cleanup(func() { _ = c.Close() })
			l, err := lockmw.New(c, append([]lockmw.Option{prefix()}, opts...)...)
			return l, p.Cut, p.Heal, err
		},
		Leftovers: func(t testing.TB, key string) []string {
			keys, err := admin.Keys(context.Background(), "*{"+key+"}").Result()
			if err != nil {
				t.Fatal(err)
			}
			return keys
		},
		// As on Redis: but each Locker reads only its own prefix.
		Inspects: &Inspects{TTL: lockmw.Exact, Fence: lockmw.AtMost, Holder: lockmw.Exact, SinceWithInfo: lockmw.Exact, Waiters: lockmw.Exact},
	}
}
