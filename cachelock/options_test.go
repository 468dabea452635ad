package cachelock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockmw/lockmw/cachelock"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// Nil options are skipped by New and by Update.
func TestNilOptionsAreSkipped(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	db := openDB(t)
	var nilOpt cachelock.Option
	c := newCache(t, srv, nil, cachelock.WithPrefix("nilopts:"), nilOpt)
	ctx := context.Background()
	if _, err := c.Fetch(ctx, "product:1", time.Minute, func(ctx context.Context) ([]byte, error) { return loadPrice(ctx, db, 1) }); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, "nilopts:product:1").Val(); n != 1 {
		t.Errorf("entry nilopts:product:1 exists: %d, want the prefix given beside the nil options", n)
	}
	var nilUpdate cachelock.UpdateOption
	if err := c.Update(ctx, "products/1", func(ctx context.Context, fence uint64) error {
		return setPrice(ctx, db, 1, 7, fence)
	}, nil, cachelock.Invalidating("product:1"), nilUpdate); err != nil {
		t.Fatalf("Update with nil options: %v", err)
	}
	if n := rdb.Exists(ctx, "nilopts:product:1").Val(); n != 0 {
		t.Errorf("entry nilopts:product:1 still cached after the Update invalidating it")
	}
}

// Option mistakes are found by New (which returns them, all of them,
// matching lockmw.ErrInvalidOption and naming each option), never by the
// option functions.
func TestNewReturnsEveryOptionMistake(t *testing.T) {
	srv := redistest.Start(t)
	locker, err := lockmw.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Close() })
	_, err = cachelock.New(srv.Client(t), locker,
		cachelock.WithFillLease(0), cachelock.WithStaleReads(0), cachelock.WithTTLJitter(1))
	if !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Fatalf("New = %v, want ErrInvalidOption", err)
	}
	for _, name := range []string{"cachelock.WithFillLease", "cachelock.WithStaleReads", "cachelock.WithTTLJitter"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("New = %q, want it to name %s", err, name)
		}
	}
	// A later valid value replaces an invalid one: options are checked once
	// applied.
	if _, err := cachelock.New(srv.Client(t), locker, cachelock.WithFillLease(0), cachelock.WithFillLease(time.Second)); err != nil {
		t.Errorf("New with WithFillLease(0) then WithFillLease(1s) = %v, want nil", err)
	}
}
