package lockmw_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// Bad input gets an error matched by errors.Is, and nothing reaches Redis.
func TestBadInputSendsNothing(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	stats := srv.Client(t)
	ctx := context.Background()
	// Connect both clients now, so that connection set-up is not counted.
	for _, c := range []*redis.Client{client, stats} {
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	l := newLockerOn(t, client)
	closed, err := lockmw.New(client)
	if err != nil {
		t.Fatal(err)
	}
	_ = closed.Close()
	noop := func(context.Context) error { return nil }
	var nilClient *redis.Client

	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"empty key", func() error { _, err := l.TryAcquire(ctx, ""); return err }, lockmw.ErrInvalidKey},
		{"oversized key", func() error {
			_, err := l.Acquire(ctx, strings.Repeat("k", lockmw.MaxKeyLen+1))
			return err
		}, lockmw.ErrInvalidKey},
		{"empty key in Do", func() error { return l.Do(ctx, "", noop) }, lockmw.ErrInvalidKey},
		{"zero lease TTL", func() error { _, err := l.Acquire(ctx, "k", lockmw.WithLeaseTTL(0)); return err }, lockmw.ErrInvalidOption},
		{"negative lease TTL", func() error {
			_, err := l.TryAcquire(ctx, "k", lockmw.WithLeaseTTL(-time.Second))
			return err
		}, lockmw.ErrInvalidOption},
		{"TTL under MinTTL", func() error {
			_, err := l.TryAcquire(ctx, "k", lockmw.WithLeaseTTL(time.Millisecond))
			return err
		}, lockmw.ErrInvalidOption},
		{"negative wait", func() error { _, err := l.Acquire(ctx, "k", lockmw.WithWait(-1)); return err }, lockmw.ErrInvalidOption},
		{"zero Locker TTL", func() error { _, err := lockmw.New(client, lockmw.WithTTL(0)); return err }, lockmw.ErrInvalidOption},
		{"negative Locker TTL", func() error { _, err := lockmw.New(client, lockmw.WithTTL(-time.Second)); return err }, lockmw.ErrInvalidOption},
		{"drift factor too large", func() error { _, err := lockmw.New(client, lockmw.WithDriftFactor(0.5)); return err }, lockmw.ErrInvalidOption},
		{"negative drift factor", func() error { _, err := lockmw.New(client, lockmw.WithDriftFactor(-0.1)); return err }, lockmw.ErrInvalidOption},
		{"oversized prefix", func() error {
			_, err := lockmw.New(client, lockmw.WithPrefix(strings.Repeat("p", lockmw.MaxPrefixLen+1)))
			return err
		}, lockmw.ErrInvalidOption},
		{"nil client", func() error { _, err := lockmw.New(nil); return err }, lockmw.ErrNilClient},
		{"typed nil client", func() error { _, err := lockmw.New(nilClient); return err }, lockmw.ErrNilClient},
		{"TryAcquire after Close", func() error { _, err := closed.TryAcquire(ctx, "k"); return err }, lockmw.ErrClosed},
		{"Acquire after Close", func() error { _, err := closed.Acquire(ctx, "k"); return err }, lockmw.ErrClosed},
		{"Do after Close", func() error { return closed.Do(ctx, "k", noop) }, lockmw.ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := commandsProcessed(t, stats)
			err := tc.call()
			if !errors.Is(err, tc.want) {
				t.Fatalf("error = %v, want one matching %v", err, tc.want)
			}
			if errors.Is(err, lockmw.ErrNotAcquired) || errors.Is(err, lockmw.ErrUnavailable) {
				t.Errorf("error %v is confused with busy or unavailable", err)
			}
			if !strings.Contains(err.Error(), "lockmw") || len(err.Error()) < 20 {
				t.Errorf("error %q does not say what is wrong", err)
			}
			// The INFO call itself is the one command between the two reads.
			if after := commandsProcessed(t, stats); after != before+1 {
				t.Errorf("%d commands reached Redis, want none", after-before-1)
			}
		})
	}
}

func commandsProcessed(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("INFO stats has no total_commands_processed")
	return 0
}
