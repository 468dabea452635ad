package lockmw_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// readmeClient is the client the README and the package documentation
// recommend: short timeouts, no retries inside go-redis.
func readmeClient(o *redis.Options) {
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
	o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled = -1, 1, true
	o.PipelinePoolSize = -1
}

// A client that reports a stalled Redis late gets one warning from New and
// NewRedlock, naming its settings, what is wrong with them, what to set
// (every setting the check reads: following the advice gives a client that
// passes) and where to read about it: one whose failed command can outlast
// a third of the TTL (go-redis' defaults), one with no read timeout, and
// one whose pipelines have a pool of their own (go-redis' default
// PipelinePoolSize: the previous release's README client, and the client
// the previous warning's advice gave), on which each acquisition on a
// paused Redis waits out two timeouts. The README's client gets none.
func TestNewWarnsAboutASlowClient(t *testing.T) {
	srvs := redistest.StartN(t, 3)
	// The previous release's README client: no PipelinePoolSize.
	previousReadme := func(o *redis.Options) {
		readmeClient(o)
		o.PipelinePoolSize = 0
	}
	// What the warning advises, and nothing else.
	advised := func(o *redis.Options) {
		o.ReadTimeout, o.WriteTimeout, o.MaxRetries, o.PipelinePoolSize = 300*time.Millisecond, 300*time.Millisecond, -1, -1
	}
	noReadTimeout := func(o *redis.Options) {
		readmeClient(o)
		o.ReadTimeout = -1
	}
	plain, readme := srvs[0].Client(t), srvs[0].Client(t, readmeClient)
	plains := []redis.UniversalClient{plain, srvs[1].Client(t), srvs[2].Client(t)}
	readmes := []redis.UniversalClient{readme, srvs[1].Client(t, readmeClient), srvs[2].Client(t, readmeClient)}
	const warning = "Redis client"
	// Every warning names the settings it checks, and what to set them to.
	always := []string{"ReadTimeout=", "WriteTimeout=", "retries=", "PipelinePoolSize=", "ttl=", "README, Quickstart",
		"give it ReadTimeout and WriteTimeout", "MaxRetries: -1", "PipelinePoolSize: -1"}
	for _, tc := range []struct {
		name    string
		new     func(logger *slog.Logger) (*lockmw.Locker, error)
		want    []string // in the one warning; none if nil
		wantNot []string
	}{
		{"New, go-redis defaults", func(lg *slog.Logger) (*lockmw.Locker, error) { return lockmw.New(plain, lockmw.WithLogger(lg)) },
			[]string{"ReadTimeout=5s", "retries=3", "PipelinePoolSize=0", "one failed command can take 20s", "two timeouts", "at most 3.333s for this TTL"}, nil},
		{"New, README client", func(lg *slog.Logger) (*lockmw.Locker, error) { return lockmw.New(readme, lockmw.WithLogger(lg)) }, nil, nil},
		{"New, the advised client", func(lg *slog.Logger) (*lockmw.Locker, error) {
			return lockmw.New(srvs[0].Client(t, advised), lockmw.WithLogger(lg))
		}, nil, nil},
		{"New, the previous README client", func(lg *slog.Logger) (*lockmw.Locker, error) {
			return lockmw.New(srvs[0].Client(t, previousReadme), lockmw.WithLogger(lg))
		}, []string{"PipelinePoolSize=0", "PipelinePoolSize is not -1", "two timeouts", "ReadTimeout=300ms", "retries=0"}, []string{"longer than a third"}},
		{"New, no read timeout", func(lg *slog.Logger) (*lockmw.Locker, error) {
			return lockmw.New(srvs[0].Client(t, noReadTimeout), lockmw.WithLogger(lg))
		}, []string{"ReadTimeout=none (no timeout)", "WriteTimeout=300ms", "it has no read timeout"}, []string{"ReadTimeout=0s", "two timeouts"}},
		{"New, README client, 600ms TTL", func(lg *slog.Logger) (*lockmw.Locker, error) {
			return lockmw.New(readme, lockmw.WithLogger(lg), lockmw.WithTTL(600*time.Millisecond))
		}, []string{"longer than a third of the lease TTL", "at most 200ms for this TTL", "ttl=600ms"}, []string{"two timeouts"}},
		{"NewRedlock, plain clients", func(lg *slog.Logger) (*lockmw.Locker, error) {
			return lockmw.NewRedlock([]redis.UniversalClient{readmes[0], plains[1], plains[2]}, lockmw.WithLogger(lg))
		}, []string{"masters=[1 2]", "ReadTimeout=5s"}, nil},
		{"NewRedlock, README clients", func(lg *slog.Logger) (*lockmw.Locker, error) {
			return lockmw.NewRedlock(readmes, lockmw.WithLogger(lg))
		}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &lockmwtest.Logs{}
			l, err := tc.new(slog.New(logs))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			got := lockmwtest.Texts(logs.Find(slog.LevelWarn, warning))
			switch {
			case tc.want == nil && len(got) != 0:
				t.Errorf("warned about a client that reports a stalled Redis after one short timeout: %q", got)
			case tc.want != nil && len(got) != 1:
				t.Errorf("%d warnings, want 1: %q", len(got), got)
			case tc.want != nil:
				for _, want := range append(always, tc.want...) {
					if !strings.Contains(got[0], want) {
						t.Errorf("warning %q does not say %q", got[0], want)
					}
				}
				for _, not := range tc.wantNot {
					if strings.Contains(got[0], not) {
						t.Errorf("warning %q says %q", got[0], not)
					}
				}
			}
		})
	}
}

// timeoutCounter counts the timeouts that pipelines sent with its context
// (see mark) wait out: each connection handshake (HELLO) of the pipeline
// that timed out, or, when none did, the pipeline's own read. (A pipeline
// whose handshake on the pipeline pool timed out and which then timed out
// on an idle connection of the main pool counts one, not two: the count is
// a floor.) Calls made with other contexts (a give-back of the Locker's
// own) are not counted.
type timeoutCounter struct {
	mu sync.Mutex
	n  int
}

type timeoutKey struct{}

// handshakes counts the handshakes of one pipeline that timed out.
type handshakes struct{ n atomic.Int64 }

func (c *timeoutCounter) mark(ctx context.Context) context.Context {
	return context.WithValue(ctx, timeoutKey{}, c)
}

func (c *timeoutCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (c *timeoutCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *timeoutCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h, ok := ctx.Value(handshakes{}).(*handshakes); ok && timedOut(err) {
			h.n.Add(1)
		}
		return err
	}
}
func (c *timeoutCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(timeoutKey{}) != c {
			return next(ctx, cmds)
		}
		h := &handshakes{}
		err := next(context.WithValue(ctx, handshakes{}, h), cmds)
		if timedOut(err) {
			c.mu.Lock()
			c.n += max(1, int(h.n.Load()))
			c.mu.Unlock()
		}
		return err
	}
}

// With the README's client, an acquisition on a paused Redis fails after
// one timeout, not two: with a pipeline pool of its own (go-redis' default),
// the new connection of that pool times out in its handshake and the
// pipeline is run again on the main pool, a second timeout.
func TestPausedRedisTakesOneTimeoutPerAcquisition(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t, readmeClient)
	timeouts := &timeoutCounter{}
	c.AddHook(timeouts)
	l, err := lockmw.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lease, err := l.TryAcquire(context.Background(), "warm")
	if err != nil {
		t.Fatal(err)
	}
	releaseOK(t, lease)
	srv.Pause(t)
	defer srv.Resume(t)
	const n = 4
	for i := range n {
		if _, err := l.TryAcquire(timeouts.mark(context.Background()), fmt.Sprint("paused", i)); !errors.Is(err, lockmw.ErrUnavailable) {
			t.Fatalf("TryAcquire on a paused Redis = %v, want ErrUnavailable", err)
		}
	}
	if got := timeouts.count(); got != n {
		t.Errorf("%d acquisitions on a paused Redis waited out %d timeouts, want one each", n, got)
	}
}

// longTimeouts gives a client 1s read and write timeouts.
func longTimeouts(o *redis.Options) { o.ReadTimeout, o.WriteTimeout = time.Second, time.Second }

// trip is one round trip of acquisitions seen by a tripRecorder.
type trip struct {
	start, end time.Time
	timedOut   bool
}

// tripRecorder records the round trips that carry an acquisition (a SET,
// or the acquire script, of a lock key that lock accepts): when each
// started and ended, and whether it timed out.
type tripRecorder struct {
	lock       func(key string) bool
	acquireSHA string
	started    atomic.Int64 // round trips started
	mu         sync.Mutex
	trips      []trip
}

func newTripRecorder(t *testing.T, lock func(key string) bool) *tripRecorder {
	t.Helper()
	var src []byte
	for _, f := range []string{"fence.lua", "grant.lua", "acquire.lua"} { // acquireScript's parts
		b, err := os.ReadFile("internal/redisstore/scripts/" + f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	sum := sha1.Sum(src)
	return &tripRecorder{lock: lock, acquireSHA: hex.EncodeToString(sum[:])}
}

func (r *tripRecorder) acquires(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		a := c.Args()
		switch {
		case len(a) > 1 && strings.EqualFold(fmt.Sprint(a[0]), "set") && r.lock(fmt.Sprint(a[1])):
			return true
		case len(a) > 3 && strings.EqualFold(fmt.Sprint(a[0]), "evalsha") && a[1] == r.acquireSHA && r.lock(fmt.Sprint(a[3])):
			return true
		}
	}
	return false
}

func (r *tripRecorder) record(cmds []redis.Cmder, send func() error) error {
	if !r.acquires(cmds) {
		return send()
	}
	start := time.Now()
	r.started.Add(1)
	err := send()
	out := timedOut(err)
	for _, c := range cmds {
		out = out || timedOut(c.Err())
	}
	r.mu.Lock()
	r.trips = append(r.trips, trip{start, time.Now(), out})
	r.mu.Unlock()
	return err
}

func (r *tripRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *tripRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return r.record([]redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}
func (r *tripRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return r.record(cmds, func() error { return next(ctx, cmds) })
	}
}

// timeoutsInARow is the longest chain of timed-out trips each of which
// started after the one before it had timed out: how many timeouts one
// after the other the acquisitions waited out.
func (r *tripRecorder) timeoutsInARow() (longest, timedOut int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []trip
	for _, t := range r.trips {
		if t.timedOut {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b trip) int { return a.start.Compare(b.start) })
	chain := make([]int, len(out))
	for i, t := range out {
		chain[i] = 1
		for j := range i {
			if !out[j].end.After(t.start) {
				chain[i] = max(chain[i], chain[j]+1)
			}
		}
		longest = max(longest, chain[i])
	}
	return longest, len(out)
}

// Concurrent acquisitions on a paused Redis each fail after one timeout:
// those queued behind a round trip that timed out are failed with it, not
// sent after it to wait out a timeout of their own.
func TestPausedRedisConcurrentAcquisitionsTakeOneTimeout(t *testing.T) {
	srv := redistest.Start(t)
	for _, n := range []int{20, 100} {
		t.Run(fmt.Sprint(n, " at once"), func(t *testing.T) {
			// The README's client, with a longer timeout: the count does not
			// depend on it, and callers that a loaded machine starts late
			// still start within the first one.
			c := srv.Client(t, readmeClient, longTimeouts)
			trips := newTripRecorder(t, func(k string) bool { return strings.HasPrefix(k, lockmw.DefaultPrefix+"{paused") })
			c.AddHook(trips)
			l, err := lockmw.New(c)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			lease, err := l.TryAcquire(context.Background(), "warm")
			if err != nil {
				t.Fatal(err)
			}
			releaseOK(t, lease)
			srv.Pause(t)
			defer srv.Resume(t)
			start := make(chan struct{})
			errs := make([]error, n)
			took := make([]time.Duration, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					<-start
					t0 := time.Now()
					_, errs[i] = l.TryAcquire(context.Background(), fmt.Sprint("paused", i))
					took[i] = time.Since(t0)
				})
			}
			close(start)
			wg.Wait()
			for i, err := range errs {
				if !errors.Is(err, lockmw.ErrUnavailable) {
					t.Errorf("TryAcquire %d on a paused Redis = %v, want ErrUnavailable", i, err)
				}
			}
			slices.Sort(took)
			inARow, all := trips.timeoutsInARow()
			t.Logf("%d acquisitions: %d round trips timed out, at most %d in a row; took median %v, max %v", n, all, inARow, took[n/2], took[n-1])
			if inARow != 1 {
				t.Errorf("%d acquisitions at once on a paused Redis waited out %d timeouts in a row, want 1", n, inARow)
			}
		})
	}
}

// sentHook closes sent when a round trip carrying a command for key
// starts.
type sentHook struct {
	key  string
	once sync.Once
	sent chan struct{}
}

func (h *sentHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *sentHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *sentHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if a := c.Args(); len(a) > 1 && fmt.Sprint(a[1]) == h.key {
				h.once.Do(func() { close(h.sent) })
			}
		}
		return next(ctx, cmds)
	}
}

// Only a timeout of the client's own fails the calls queued behind it: on
// a Redis that is slow but answers within the client's timeout (paused for
// 150ms, under its 1s), an acquisition whose own context deadline cut its round
// trip short, and twenty acquisitions at once, leave the calls queued
// behind them to be sent and answered.
func TestSlowRedisFailsNoQueuedAcquisition(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t, readmeClient, longTimeouts)
	sent := &sentHook{key: "lockmw:{slow}", sent: make(chan struct{})}
	c.AddHook(sent)
	l, err := lockmw.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lease, err := l.TryAcquire(context.Background(), "warm")
	if err != nil {
		t.Fatal(err)
	}
	releaseOK(t, lease)

	srv.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume(t)
		}
	}()
	// The first call for "slow" goes alone, under a deadline of its
	// caller's far shorter than the client's timeout; the next five, for
	// the same lock, queue behind it; twenty others go at once.
	short, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := l.TryAcquire(short, "slow")
		first <- err
	}()
	<-sent.sent
	const queued, others = 5, 20
	errs := make([]error, queued+others)
	leases := make([]*lockmw.Lease, queued+others)
	var wg sync.WaitGroup
	for i := range queued + others {
		key := "slow"
		if i >= queued {
			key = fmt.Sprint("slow", i)
		}
		wg.Go(func() { leases[i], errs[i] = l.TryAcquire(context.Background(), key) })
	}
	// Its error is the deadline's, or ErrUnavailable when the client's
	// read, cut at the deadline, returned before the context's own timer
	// fired.
	if err := <-first; !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, lockmw.ErrUnavailable) {
		t.Errorf("TryAcquire under a 30ms deadline on a paused Redis = %v, want context.DeadlineExceeded or ErrUnavailable", err)
	}
	time.Sleep(150 * time.Millisecond) // well under the client's 1s timeout
	srv.Resume(t)
	resumed = true
	wg.Wait()
	for i, err := range errs {
		switch {
		case err == nil:
			releaseOK(t, leases[i])
		case errors.Is(err, lockmw.ErrNotAcquired) && i < queued:
			// "slow" is held by the first call's late request, or by one
			// of the queued ones.
		default:
			t.Errorf("acquisition %d on a Redis slow by 150ms, under the client's timeout = %v, want a lease", i, err)
		}
	}
}
