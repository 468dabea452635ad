// Package errs holds the sentinel errors that package lockmw and the
// stores behind its internal store boundary both need. Package lockmw
// re-exports each as the same value (lockmw.ErrUnavailable ==
// errs.ErrUnavailable), so errors.Is matches whichever side wrapped it;
// their documentation is lockmw's.
package errs

import "errors"

// The sentinels shared across the store boundary; see lockmw's variables
// of the same names.
var (
	ErrClosed        = errors.New("lockmw: locker closed")
	ErrInvalidOption = errors.New("lockmw: invalid option")
	ErrUnavailable   = errors.New("lockmw: store unavailable")
	ErrNotReplicated = errors.New("lockmw: lock not acknowledged by enough replicas")
	ErrStoreSetup    = errors.New("lockmw: store not set up for lockmw")
)
