package adapt

import (
	"errors"
	"fmt"

	"github.com/lockmw/lockmw/lockmw"
)

// The misuse rule of every adapter:
//
//   - Option functions (With...) only record what they are given; they
//     never validate, panic or fail. A nil Option is skipped (Apply).
//   - The constructor validates the options once applied, gathering the
//     mistakes in a Misuse.
//   - Middleware constructors (ginlock.New, grpclock's interceptors), whose
//     misuse is a programming error found when the routes are set up, panic
//     with the mistakes (MustSetup). Constructors of long-lived objects
//     (cachelock.New, cronlock.New and NewScheduler, gocronlock.New)
//     return them (Misuse.Err); cronlock.Singleton, for program setup,
//     panics with New's error. Either way the options'
//     error matches lockmw.ErrInvalidOption.

// Apply calls apply with each option of opts in order, skipping nil ones.
func Apply[O comparable](opts []O, apply func(O)) {
	var none O
	for _, o := range opts {
		if o != none {
			apply(o)
		}
	}
}

// Misuse gathers the mistakes a constructor finds in its options. The zero
// Misuse holds none.
type Misuse struct {
	errs []error
}

// Addf records a mistake in what (the option as the caller wrote it, such
// as "ginlock.WithWait(-1s)"), described by format and args. The error
// matches lockmw.ErrInvalidOption.
func (m *Misuse) Addf(what, format string, args ...any) {
	m.errs = append(m.errs, fmt.Errorf("%w: %s: %s", lockmw.ErrInvalidOption, what, fmt.Sprintf(format, args...)))
}

// Add records err, from a parser such as ParseTemplate, as a mistake in
// what. The error matches both err and lockmw.ErrInvalidOption.
func (m *Misuse) Add(what string, err error) {
	m.errs = append(m.errs, fmt.Errorf("%w: %s: %w", lockmw.ErrInvalidOption, what, err))
}

// Err returns the mistakes recorded, joined, or nil.
func (m *Misuse) Err() error {
	return errors.Join(m.errs...)
}

// MustSetup is the misuse rule of a middleware constructor named what (as
// in "ginlock.New"): it panics if its Locker or KeyFunc is nil (nilLocker,
// nilKey), or with optionsErr, the mistakes found in its options.
func MustSetup(what string, nilLocker, nilKey bool, optionsErr error) {
	switch {
	case nilLocker:
		panic(what + ": nil *lockmw.Locker")
	case nilKey:
		panic(what + ": nil KeyFunc")
	case optionsErr != nil:
		panic(optionsErr)
	}
}
