package lockmw_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/lockmwtest"
	"github.com/lockmw/lockmw/internal/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// readmeClient is the client the README and the package documentation
// recommend: short timeouts, no retries inside go-redis.
func readmeClient(o *redis.Options) {
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
	o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled = -1, 1, true
	o.PipelinePoolSize = -1
}

// A client whose failed command can outlast a third of the TTL (go-redis'
// defaults) gets one warning from New and NewRedlock, naming its settings
// and where to read about them; the README's client gets none.
func TestNewWarnsAboutASlowClient(t *testing.T) {
	srvs := redistest.StartN(t, 3)
	plain, readme := srvs[0].Client(t), srvs[0].Client(t, readmeClient)
	plains := []redis.UniversalClient{plain, srvs[1].Client(t), srvs[2].Client(t)}
	readmes := []redis.UniversalClient{readme, srvs[1].Client(t, readmeClient), srvs[2].Client(t, readmeClient)}
	const warning = "Redis client"
	for _, tc := range []struct {
		name  string
		new   func(logger *slog.Logger) (*lockmw.Locker, error)
		warns bool
	}{
		{"New, plain client", func(lg *slog.Logger) (*lockmw.Locker, error) { return lockmw.New(plain, lockmw.WithLogger(lg)) }, true},
		{"New, README client", func(lg *slog.Logger) (*lockmw.Locker, error) { return lockmw.New(readme, lockmw.WithLogger(lg)) }, false},
		{"New, README client, 600ms TTL", func(lg *slog.Logger) (*lockmw.Locker, error) {
			return lockmw.New(readme, lockmw.WithLogger(lg), lockmw.WithTTL(600*time.Millisecond))
		}, true},
		{"NewRedlock, plain clients", func(lg *slog.Logger) (*lockmw.Locker, error) {
			return lockmw.NewRedlock([]redis.UniversalClient{readmes[0], plains[1], plains[2]}, lockmw.WithLogger(lg))
		}, true},
		{"NewRedlock, README clients", func(lg *slog.Logger) (*lockmw.Locker, error) {
			return lockmw.NewRedlock(readmes, lockmw.WithLogger(lg))
		}, false},
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
			case !tc.warns && len(got) != 0:
				t.Errorf("warned about a client with short timeouts: %q", got)
			case tc.warns && len(got) != 1:
				t.Errorf("%d warnings, want 1: %q", len(got), got)
			case tc.warns:
				for _, want := range []string{"ReadTimeout=", "WriteTimeout=", "retries=", "ttl=", "README, Quickstart", "MaxRetries: -1"} {
					if !strings.Contains(got[0], want) {
						t.Errorf("warning %q does not name %q", got[0], want)
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
