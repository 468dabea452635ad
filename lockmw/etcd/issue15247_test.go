package etcd_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockmw/lockmw/lockmw/etcd/internal/etcdtest"
)

// issue15247Env enables TestEtcdIssue15247; its value, when a number, is how
// many attempts to make (default issue15247Attempts).
const issue15247Env = "LOCKMW_ETCD_15247"

const (
	// issue15247Attempts bounds the attempts of one run.
	issue15247Attempts = 10
	// issue15247TTL is the lease's TTL; issue15247Pause, how long the
	// leader stays paused: long enough for the lease to look expired to
	// it when it resumes.
	issue15247TTL   = 3 * time.Second
	issue15247Pause = issue15247TTL + 1500*time.Millisecond
	// issue15247Watch is how long an attempt watches the lease after the
	// old leader resumed.
	issue15247Watch = 3 * time.Second
	// issue15247RenewEvery is how often the lease is renewed, each renewal
	// bounded by issue15247RenewTimeout.
	issue15247RenewEvery   = 200 * time.Millisecond
	issue15247RenewTimeout = time.Second
)

// TestEtcdIssue15247 checks the promise lockmw's etcd store rests on (see
// etcd.go): a lease confirmed by a renewal sent at s lives until s + TTL.
// etcd servers without the fix for etcd issue 15247 (etcd PR 16822, in
// later 3.4 and 3.5 releases, and in 3.6) break it: a leader that was
// stalled, here paused for longer than the TTL, still counts itself leader
// for a moment when it resumes, finds the leases it stopped hearing about
// expired, and proposes their revocation, which, once it has stepped down,
// its raft forwards to the new leader, who commits it. Each attempt renews
// a lease through a follower (one KeepAliveOnce every 200 ms), pauses the
// leader for 4.5 s (the TTL is 3 s), resumes it and watches the lease for
// 3 s: the test fails, saying "etcd issue 15247", if the lease is gone
// before the end of the TTL that its last confirmed renewal promised.
//
// It runs only when LOCKMW_ETCD_15247 is set, outside make test: `make
// etcd-15247` runs it on the etcd the tests run (it usually passes; 3.6.16
// revoked early in 2 of 21 pauses, see etcd.go) and on Debian's
// etcd 3.4.23 (it fails, reproducing the README's caveat). It makes at most
// 10 attempts (or LOCKMW_ETCD_15247=N) and stops at the first early
// revocation.
func TestEtcdIssue15247(t *testing.T) {
	attempts := attemptsFrom(t, issue15247Env, "a reproduction of etcd issue 15247, run by make etcd-15247")
	c := etcdtest.StartCluster(t, 3)
	inconclusive := 0
	for attempt := 1; attempt <= attempts; attempt++ {
		verdict, err := issue15247Attempt(t, c, attempt, false)
		if err != nil {
			t.Fatalf("attempt %d: etcd issue 15247: %v", attempt, err)
		}
		if verdict != "" {
			inconclusive++
		}
		t.Logf("attempt %d: %s", attempt, cmp.Or(verdict, "lease kept, as promised"))
	}
	if inconclusive == attempts {
		t.Fatalf("every attempt was inconclusive: the lease was never renewed through the new leader")
	}
	t.Logf("etcd kept every renewed lease through %d leader pauses (%d inconclusive)", attempts, inconclusive)
}

// leaderBackEnv enables TestEtcdLeaseLeaderMovedBack; its value, when a
// number, is how many attempts to make (default issue15247Attempts).
const leaderBackEnv = "LOCKMW_ETCD_LEADER_BACK"

// TestEtcdLeaseLeaderMovedBack is TestEtcdIssue15247 with one more step:
// as soon as the paused leader resumes, leadership is moved back to it
// (etcd's MoveLeader), as the randomized checker's "leader" fault may do.
// On etcd 3.6.16 the resumed member then revokes leases that were renewed
// through the new leader meanwhile, before the TTL their last confirmed
// renewal promised: the guard of etcd PR 16822 asks whether the member
// leads when it revokes, and it does again by then. This breaks the promise
// lockmw's etcd store rests on (etcd.go, "the argument rests on"), as issue
// 15247 does on older servers: the test fails, saying so, when it
// reproduces. It runs only when LOCKMW_ETCD_LEADER_BACK is set.
func TestEtcdLeaseLeaderMovedBack(t *testing.T) {
	attempts := attemptsFrom(t, leaderBackEnv, "a reproduction of an etcd lease revocation after leadership moves back to a resumed leader")
	c := etcdtest.StartCluster(t, 3)
	for attempt := 1; attempt <= attempts; attempt++ {
		verdict, err := issue15247Attempt(t, c, attempt, true)
		if err != nil {
			t.Fatalf("attempt %d: leadership moved back to the resumed leader: %v", attempt, err)
		}
		t.Logf("attempt %d: %s", attempt, cmp.Or(verdict, "lease kept, as promised"))
	}
}

// attemptsFrom is how many attempts the environment variable env asks
// for (issue15247Attempts unless a number above 1); it skips the test,
// named by what, when env is not set.
func attemptsFrom(t *testing.T, env, what string) int {
	v := os.Getenv(env)
	if v == "" {
		t.Skip(what + ": set " + env + "=1 (or a number of attempts)")
	}
	if n, err := strconv.Atoi(v); err == nil && n > 1 {
		return n
	}
	return issue15247Attempts
}

// issue15247Attempt runs one attempt; moveBack hands leadership back to the
// paused leader as soon as it resumes. It returns an error when the lease
// was revoked early, and a non-empty verdict when the attempt proves
// nothing (the lease's renewals failed for a whole TTL, so it could expire
// by right).
func issue15247Attempt(t *testing.T, c *etcdtest.Cluster, attempt int, moveBack bool) (verdict string, err error) {
	leader := c.Leader(t)
	var via *etcdtest.Server
	for _, m := range c.Members() {
		if m != leader {
			via = m
			break
		}
	}
	cli := via.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	grant, err := cli.Grant(ctx, int64(issue15247TTL/time.Second))
	if err != nil {
		t.Fatalf("attempt %d: grant: %v", attempt, err)
	}
	key := fmt.Sprintf("issue15247/%d", attempt)
	if _, err := cli.Put(ctx, key, "v", clientv3.WithLease(grant.ID)); err != nil {
		t.Fatalf("attempt %d: put: %v", attempt, err)
	}

	// Renew through via, recording the TTL each confirmed renewal
	// promised from its send time, until stop or the lease is gone.
	type result struct {
		goneAt, promised, sentAt time.Time
		renewedAfterResume       bool
	}
	stop := make(chan struct{})
	resumed := make(chan time.Time, 1)
	done := make(chan result, 1)
	go func() {
		var r result
		var resumedAt time.Time
		for {
			select {
			case <-stop:
				done <- r
				return
			case resumedAt = <-resumed:
			case <-time.After(issue15247RenewEvery):
			}
			sent := time.Now()
			rctx, rcancel := context.WithTimeout(ctx, issue15247RenewTimeout)
			resp, err := cli.KeepAliveOnce(rctx, grant.ID)
			rcancel()
			switch {
			case errors.Is(err, rpctypes.ErrLeaseNotFound):
				r.goneAt = time.Now()
				done <- r
				return
			case err != nil:
				// No answer (an election, or a forward to the paused
				// leader): no promise either way.
			case resp.TTL > 0:
				r.sentAt, r.promised = sent, sent.Add(time.Duration(resp.TTL)*time.Second)
				if !resumedAt.IsZero() && sent.After(resumedAt) {
					r.renewedAfterResume = true
				}
			}
		}
	}()
	// Let a few renewals through before the pause.
	time.Sleep(3 * issue15247RenewEvery)
	leader.Pause(t)
	time.Sleep(issue15247Pause)
	leader.Resume(t)
	resumed <- time.Now()
	if moveBack {
		c.MoveLeader(t, leader)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(issue15247Watch):
		close(stop)
		r = <-done
	}
	if !r.goneAt.IsZero() {
		if r.goneAt.Before(r.promised) {
			return "", fmt.Errorf("lease %x revoked at %v, %v before the end of the %v TTL its renewal sent at %v promised "+
				"(leader %s paused for %v and resumed; renewals through %s)",
				grant.ID, r.goneAt.Format(time.StampMilli), r.promised.Sub(r.goneAt).Round(time.Millisecond), issue15247TTL,
				r.sentAt.Format(time.StampMilli), leader.Name(), issue15247Pause, via.Name())
		}
		return fmt.Sprintf("inconclusive: lease gone at %v, after the %v its last renewal promised (no renewal confirmed for a TTL)",
			r.goneAt.Format(time.StampMilli), r.promised.Format(time.StampMilli)), nil
	}
	if !r.renewedAfterResume {
		return "inconclusive: no renewal confirmed after the old leader resumed", nil
	}
	if _, err := cli.Revoke(ctx, grant.ID); err != nil {
		t.Fatalf("attempt %d: revoke: %v", attempt, err)
	}
	return "", nil
}
