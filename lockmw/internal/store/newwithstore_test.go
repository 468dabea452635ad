package store_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// closeCounted is oneProcess counting its Close calls, and refusing TTLs
// above maxTTL when that is set.
type closeCounted struct {
	oneProcess
	maxTTL time.Duration
	closes int
}

func (s *closeCounted) CheckTTL(ttl time.Duration) error {
	if s.maxTTL > 0 && ttl > s.maxTTL {
		return fmt.Errorf("%w: TTL %v is above %v", lockmw.ErrInvalidOption, ttl, s.maxTTL)
	}
	return nil
}

func (s *closeCounted) Close() error {
	s.closes++
	return nil
}

// NewWithStore closes the store it was given whenever it fails, so a store
// package's constructor has nothing to clean up; a Locker it made closes
// the store once, on Close.
func TestNewWithStoreClosesTheStoreWhenItFails(t *testing.T) {
	for _, c := range []struct {
		name   string
		maxTTL time.Duration
		opts   []lockmw.Option
	}{
		{"an invalid option", 0, []lockmw.Option{lockmw.WithTTL(-time.Second)}},
		{"an option the store cannot use", 0, []lockmw.Option{lockmw.WithWaitReplicas(1, time.Second)}},
		{"a TTL the store refuses", time.Minute, []lockmw.Option{lockmw.WithTTL(time.Hour)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &closeCounted{oneProcess: oneProcess{locks: map[store.Key]string{}}, maxTTL: c.maxTTL}
			l, err := lockmw.NewWithStore(store.Inside{Store: s}, c.opts...)
			if !errors.Is(err, lockmw.ErrInvalidOption) {
				t.Fatalf("NewWithStore: Locker %v, error %v; want ErrInvalidOption", l, err)
			}
			if s.closes != 1 {
				t.Errorf("the store was closed %d times after NewWithStore failed, want once", s.closes)
			}
		})
	}
	s := &closeCounted{oneProcess: oneProcess{locks: map[store.Key]string{}}}
	l, err := lockmw.NewWithStore(store.Inside{Store: s})
	if err != nil {
		t.Fatal(err)
	}
	if s.closes != 0 {
		t.Fatalf("the store was closed %d times by a NewWithStore that succeeded", s.closes)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if s.closes != 1 {
		t.Errorf("the store was closed %d times by the Locker's Close, want once", s.closes)
	}
}
