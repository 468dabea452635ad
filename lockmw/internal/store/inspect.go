package store

import (
	"context"
	"errors"
	"time"
)

// This file is the boundary's read-only side: what a store reports of a
// lock's state to an operator (Locker.Inspect, Locker.Locks), and the
// holder description it keeps beside a holding (lockmw.WithHolderInfo).

// Inspector is a store that reports the state of its locks without taking
// part in them. Every store offers it. Nothing it does is read for safety,
// and nothing it does delays a lock step: it reads without locks, row
// locks or transactions that a lock step would wait on, and writes
// nothing.
type Inspector interface {
	// UseHolderInfo gives the store the Locker's holder description
	// (lockmw.WithHolderInfo), before the Locker's first acquisition: the
	// store keeps it beside each holding of the Locker (with the holding's
	// token, so that it is never shown for another holder), where it
	// expires or is deleted with the holding. "" (never called): the store
	// keeps none, and its lock steps cost what they cost without it.
	UseHolderInfo(info string)
	// Inspect reports the state of k's lock, in one round trip where the
	// store allows. A lock never used reads as not held, every other field
	// Unknown or zero.
	Inspect(ctx context.Context, k Key) (Inspection, error)
	// List returns the locks under prefix that are held, or that waiters
	// wait for, in the store's own order: at most limit (limit >= 1) from
	// cursor ("" for the first page), and the cursor of the next page, ""
	// after the last. Each page costs a bounded amount of the store's work
	// whatever the number of keys under prefix, idle or not. A lock held
	// throughout the listing is listed at least once (a store may list a
	// lock twice); one taken or released during it may be listed or not.
	// A cursor the store did not make gives an error matching
	// ErrBadCursor.
	List(ctx context.Context, prefix, cursor string, limit int) (page []Inspection, next string, err error)
}

// ErrBadCursor is what Inspector.List returns, wrapped, for a cursor it
// did not make (lockmw maps it to lockmw.ErrInvalidOption).
var ErrBadCursor = errors.New("not a cursor of this store's listing")

// Exactness says how a reported value relates to the true one.
type Exactness uint8

// The exactness of a Reading.
const (
	// Unknown: the store does not keep the value; it reads as zero.
	Unknown Exactness = iota
	// Exact: the value as the store keeps it, at the moment it was read.
	Exact
	// AtMost: the true value is not above the reported one.
	AtMost
	// AtLeast: the true value is not below the reported one.
	AtLeast
)

// Reading is a value a store reports, with its exactness.
type Reading[T any] struct {
	Value T
	Is    Exactness
}

// Inspection is one lock's state as a store reports it.
type Inspection struct {
	// Name is the user's key (Key.Name).
	Name string
	// Held reports whether a holding is live now, by the store's clock
	// (Redlock: on a majority of its masters, for one token).
	Held bool
	// TTL is what is left of the holding by the store's clock.
	TTL Reading[time.Duration]
	// Fence is the holder's fence (Exact), or, where the store keeps only
	// the lock's counter, the counter, which the holder's fence is not
	// above (AtMost). When not held: the last holding's fence, or the
	// counter; the next holder's fence will be above it.
	Fence Reading[uint64]
	// Since is when the holding began, by the store's clock.
	Since Reading[time.Time]
	// Holder is the holding Locker's description (Inspector.UseHolderInfo);
	// Unknown when it gave none, or when the store cannot tell it.
	Holder Reading[string]
	// Waiters counts the waiters the store keeps for the lock (queue
	// entries); FairWaiters those of them that are Fair.
	Waiters, FairWaiters Reading[int]
}
