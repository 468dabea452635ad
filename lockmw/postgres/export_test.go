package postgres

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// RowName is the lease and queue row name of a Locker's key, for the
// tests that read or change rows by hand.
func RowName(prefix, key string) string { return name(store.Key{Prefix: prefix, Name: key}) }

// ClaimKeepLeft reads how long a claim row is kept still, for the tests of
// the Scheduler's claims (sqlsuite.KeepLeft).
var ClaimKeepLeft = claimKeepLeft

// NewDrawingLater is New for the default Schema with a store whose plain
// attempts draw the fence in a statement after the upsert, as Lockers of
// releases before "Fences drawn in the upsert" (doc.go) do, and as a role
// that may not read the sequence does: the checker's mixed fleet.
func NewDrawingLater(pool *pgxpool.Pool, opts ...lockmw.Option) (*lockmw.Locker, error) {
	n, err := Schema{}.names()
	if err != nil {
		return nil, err
	}
	s := newStore(pool, n)
	s.freshFrom.Store(drawLater)
	return newLocker(s, opts...)
}

// SetLaterAfterRefusal sets how long a store draws after the upsert once
// its upsert's draw was refused, for the checker, whose many draws would
// otherwise keep its stores off the upsert's draw; cleanup restores it.
func SetLaterAfterRefusal(d time.Duration) (cleanup func()) {
	was := laterAfterRefusal
	laterAfterRefusal = d
	return func() { laterAfterRefusal = was }
}
