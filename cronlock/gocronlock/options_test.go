package gocronlock_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lockmw/lockmw/cronlock/gocronlock"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// Nil options are skipped; option mistakes are found by New (which returns
// them, all of them, matching lockmw.ErrInvalidOption and naming each
// option), never by the option functions.
func TestNewOptions(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	locker := lockmwtest.NewLockerOn(t, client)
	var nilOpt gocronlock.Option
	if _, err := gocronlock.New(locker, client, nil, gocronlock.WithInstance("host-a"), nilOpt); err != nil {
		t.Errorf("New with nil options: %v", err)
	}
	_, err := gocronlock.New(locker, client, gocronlock.WithInstance(""), gocronlock.WithLogger(nil), gocronlock.WithClock(nil))
	if !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Fatalf("New = %v, want ErrInvalidOption", err)
	}
	for _, name := range []string{`gocronlock.WithInstance("")`, "gocronlock.WithLogger(nil)", "gocronlock.WithClock(nil)"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("New = %q, want it to name %s", err, name)
		}
	}
	if _, err := gocronlock.New(locker, client, gocronlock.WithInstance(""), gocronlock.WithInstance("host-a")); err != nil {
		t.Errorf("New with WithInstance(\"\") then WithInstance(\"host-a\") = %v, want nil", err)
	}
}
