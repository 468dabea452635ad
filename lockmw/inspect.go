package lockmw

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file answers an operator's questions about locks (who holds this
// lock, for how long yet, who waits for it): Inspect, Locks, and the holder
// description a Locker leaves beside its holdings (WithHolderInfo). Every
// store answers them through store.Inspector; nothing here takes part in
// a lock, and nothing here is read for safety.
//
// There is no force-release. A lock whose holder is stuck ends with its
// TTL (or the holder's Close); releasing it by hand would be the one way
// to let two holders work at once, and fences make it unnecessary: a
// storage layer that checks them refuses a stale holder's writes anyway.

// MaxHolderInfoLen is the longest description WithHolderInfo accepts, in
// bytes.
const MaxHolderInfoLen = 256

// MaxListLimit is the largest page Locks returns.
const MaxListLimit = 1000

// WithHolderInfo sets a short description of this Locker ("orders-7d9f
// host-a pid 42") that the store keeps beside every lock the Locker holds,
// and that Inspect and Locks report as LockInfo.Holder. It is never read
// for safety. It may name hosts: whoever can read the store, or call
// Inspect, can read it. The description is 1 to MaxHolderInfoLen bytes of
// printable UTF-8. Without it, a Locker stores none, and its lock steps
// cost what they cost without it. With it: etcd, ZooKeeper and
// PostgreSQL write it in the request that takes the lock; MariaDB too,
// plus one UPDATE when a release handed the lock over; the Redis stores
// keep it in a key of its own, written after each acquisition (one more
// round trip, to each master under Redlock) and extended by each renewal.
func WithHolderInfo(info string) Option {
	return optionFunc(func(c *config) {
		if err := checkHolderInfo(info); err != nil {
			c.errs = append(c.errs, err)
			return
		}
		c.holderInfo = info
	})
}

func checkHolderInfo(info string) error {
	switch {
	case info == "":
		return fmt.Errorf("%w: WithHolderInfo(\"\"): give a description such as \"orders-7d9f host-a pid 42\", or leave the option out", ErrInvalidOption)
	case len(info) > MaxHolderInfoLen:
		return fmt.Errorf("%w: WithHolderInfo: the description is %d bytes, the limit is %d", ErrInvalidOption, len(info), MaxHolderInfoLen)
	case !utf8.ValidString(info):
		return fmt.Errorf("%w: WithHolderInfo(%q): the description is not valid UTF-8", ErrInvalidOption, info)
	}
	for _, r := range info {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%w: WithHolderInfo(%q): the description holds %U, which is not printable", ErrInvalidOption, info, r)
		}
	}
	return nil
}

// Exactness says how a LockInfo field relates to the true value, on the
// Locker's store.
type Exactness uint8

// The exactness of a Reading. Each store documents which fields it reports
// how.
const (
	// Unknown: the store does not keep the value; it reads as zero.
	Unknown Exactness = Exactness(store.Unknown)
	// Exact: the value as the store keeps it, when it was read.
	Exact Exactness = Exactness(store.Exact)
	// AtMost: the true value is not above the reported one.
	AtMost Exactness = Exactness(store.AtMost)
	// AtLeast: the true value is not below the reported one.
	AtLeast Exactness = Exactness(store.AtLeast)
)

// String returns "unknown", "exact", "at most" or "at least".
func (e Exactness) String() string {
	switch e {
	case Unknown:
		return "unknown"
	case Exact:
		return "exact"
	case AtMost:
		return "at most"
	case AtLeast:
		return "at least"
	}
	return fmt.Sprintf("Exactness(%d)", uint8(e))
}

// Reading is one field of a LockInfo: the value the store reported, and
// how exact it is. A value that is Unknown is zero.
type Reading[T any] struct {
	Value T
	Is    Exactness
}

// Known reports whether the store reported the value (exactly or as a
// bound).
func (r Reading[T]) Known() bool { return r.Is != Unknown }

// LockInfo is a lock's state, as its store reported it when Inspect or
// Locks read it. It may have changed since.
type LockInfo struct {
	// Key is the lock's key, as given to Acquire (without the prefix).
	Key string
	// Held reports whether the lock was held (under Redlock: by one
	// token on a majority of the masters).
	Held bool
	// TTL is what is left of the holding, by the store's clock.
	TTL Reading[time.Duration]
	// Fence is the holder's fence, or an upper bound of it (AtMost) on a
	// store that keeps only the lock's counter. When not held: the last
	// holder's fence, or the counter; the next holder's fence is above it.
	Fence Reading[uint64]
	// Since is when the holding began, by the store's clock.
	Since Reading[time.Time]
	// Holder is the holding Locker's WithHolderInfo; Unknown when it was
	// given none.
	Holder Reading[string]
	// Waiters counts the waiters the store keeps for the lock (its queue
	// entries), FairWaiters those of them that wait in Fair mode.
	Waiters, FairWaiters Reading[int]
}

// Inspect reports the state of the lock named key: whether it is held, for
// how long yet, by which holder, with which fence, and how many wait for
// it. It is read-only and never delays a lock step; it takes one round
// trip where the store allows (a round trip to each master under Redlock).
// A key never used reads as not held. Errors: ErrInvalidKey, ErrClosed,
// ctx's error, or ErrUnavailable when the store did not answer within the
// Locker's TTL.
func (l *Locker) Inspect(ctx context.Context, key string) (LockInfo, error) {
	in, err := l.inspector()
	if err != nil {
		return LockInfo{}, err
	}
	if err := checkKey(key); err != nil {
		return LockInfo{}, err
	}
	rctx, cancel := bound(ctx, l.cfg.ttl)
	defer cancel()
	got, err := in.Inspect(rctx, store.Key{Prefix: l.cfg.prefix, Name: key})
	if err != nil {
		return LockInfo{}, readErr(ctx, "inspect", key, err)
	}
	return lockInfo(got), nil
}

// Locks lists the locks under the Locker's prefix that are held, or that
// waiters wait for, a page at a time: at most limit (1 to MaxListLimit)
// from cursor ("" for the first page), and the cursor of the next page, ""
// after the last. Each page costs the store a bounded amount of work,
// however many keys it keeps under the prefix. A lock held throughout the
// listing is listed (rarely twice); one taken or released during it may
// be listed or not. Errors: ErrInvalidOption for a limit out of range or a
// cursor that Locks on this store did not return, ErrClosed, ctx's error,
// ErrUnavailable.
func (l *Locker) Locks(ctx context.Context, cursor string, limit int) (locks []LockInfo, next string, err error) {
	in, err := l.inspector()
	if err != nil {
		return nil, "", err
	}
	if limit < 1 || limit > MaxListLimit {
		return nil, "", fmt.Errorf("%w: Locks limit %d: give 1 to %d locks per page", ErrInvalidOption, limit, MaxListLimit)
	}
	rctx, cancel := bound(ctx, l.cfg.ttl)
	defer cancel()
	page, next, err := in.List(rctx, l.cfg.prefix, cursor, limit)
	if err != nil {
		if errors.Is(err, store.ErrBadCursor) {
			return nil, "", fmt.Errorf("%w: Locks cursor %.40q: %w: pass \"\" or a cursor this Locker's store returned", ErrInvalidOption, cursor, err)
		}
		return nil, "", readErr(ctx, "list locks under", l.cfg.prefix, err)
	}
	locks = make([]LockInfo, len(page))
	for i, p := range page {
		locks[i] = lockInfo(p)
	}
	return locks, next, nil
}

// inspector returns the Locker's store as a store.Inspector.
func (l *Locker) inspector() (store.Inspector, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	in, ok := l.st.(store.Inspector)
	if !ok {
		return nil, fmt.Errorf("lockmw: %s cannot report its locks: %w", l.store, errors.ErrUnsupported)
	}
	return in, nil
}

// readErr is the error of a read op on name that failed with err.
func readErr(ctx context.Context, op, name string, err error) error {
	switch {
	case ctx.Err() != nil:
		if cause := context.Cause(ctx); cause != ctx.Err() {
			return fmt.Errorf("lockmw: %s %q: %w: %w", op, name, ctx.Err(), cause)
		}
		return fmt.Errorf("lockmw: %s %q: %w", op, name, ctx.Err())
	case errors.Is(err, ErrClosed), errors.Is(err, ErrInvalidOption):
		return err
	}
	return unavailable(op, name, err)
}

func lockInfo(in store.Inspection) LockInfo {
	return LockInfo{
		Key:         in.Name,
		Held:        in.Held,
		TTL:         reading(in.TTL),
		Fence:       reading(in.Fence),
		Since:       reading(in.Since),
		Holder:      reading(in.Holder),
		Waiters:     reading(in.Waiters),
		FairWaiters: reading(in.FairWaiters),
	}
}

func reading[T any](r store.Reading[T]) Reading[T] {
	if r.Is == store.Unknown {
		var zero T
		return Reading[T]{Value: zero}
	}
	return Reading[T]{Value: r.Value, Is: Exactness(r.Is)}
}
