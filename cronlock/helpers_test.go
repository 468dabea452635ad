package cronlock_test

import (
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
)

// The helpers of cronlock's tests: lockmwtest's, and cronsuite's exported
// ones (RecordLogger, FireTally, ...).
var (
	newLocker   = lockmwtest.NewLocker   // a Locker on its own client, closed at cleanup
	newLockerOn = lockmwtest.NewLockerOn // a Locker on a client, closed at cleanup
	eventually  = lockmwtest.Eventually
)
