package lockmw_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/internal/errs"
)

// The sentinels the stores' internals use are lockmw's own values: an
// error wrapped on either side of the store boundary matches both names.
func TestSentinelsShared(t *testing.T) {
	for _, c := range []struct {
		name           string
		public, shared error
	}{
		{"ErrClosed", lockmw.ErrClosed, errs.ErrClosed},
		{"ErrInvalidOption", lockmw.ErrInvalidOption, errs.ErrInvalidOption},
		{"ErrUnavailable", lockmw.ErrUnavailable, errs.ErrUnavailable},
		{"ErrNotReplicated", lockmw.ErrNotReplicated, errs.ErrNotReplicated},
	} {
		if c.public != c.shared {
			t.Errorf("lockmw.%s != errs.%s", c.name, c.name)
		}
		if err := fmt.Errorf("store: %w", c.shared); !errors.Is(err, c.public) {
			t.Errorf("an error wrapping errs.%s does not match lockmw.%s", c.name, c.name)
		}
		if err := fmt.Errorf("locker: %w", c.public); !errors.Is(err, c.shared) {
			t.Errorf("an error wrapping lockmw.%s does not match errs.%s", c.name, c.name)
		}
	}
}
