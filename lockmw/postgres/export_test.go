package postgres

import "github.com/lockmw/lockmw/lockmw/internal/store"

// RowName is the lease and queue row name of a Locker's key, for the
// tests that read or change rows by hand.
func RowName(prefix, key string) string { return name(store.Key{Prefix: prefix, Name: key}) }

// ClaimKeepLeft reads how long a claim row is kept still, for the tests of
// the Scheduler's claims (sqlsuite.KeepLeft).
var ClaimKeepLeft = claimKeepLeft
