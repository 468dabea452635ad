package lockmw

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// This file keeps a Locker's waiting rooms: for each key, this Locker's
// waiters (and fair holders) in one room, and the routing of the
// subscriber's messages to them (a release notification to the room's first
// default-mode waiter, a grant to its fair waiter). How each mode waits is
// in wait_default.go and wait_fair.go; how a lock is handed to a waiter is
// in handover.go.

// room is a Locker's waiters (and fair holders) for one key. Guarded by
// Locker.roomsMu.
type room struct {
	keys     lockRef
	refs     int                // waiters and fair holders in the room
	defaults []*waiter          // default-mode waiters; defaults[0] retries on a release
	fair     map[string]*waiter // fair waiters and holders, and default waiters, by token
	fairBusy int                // fair waiters queued or holding: the lock is busy
}

// waiter is one Acquire call waiting in a room.
type waiter struct {
	token     string
	ttl       time.Duration
	wake      chan struct{}  // default mode: a release was heard, or you lead now
	grant     chan grantInfo // fair mode: the lock was handed over
	delivered bool           // fair mode: a grant was sent on grant (or claimed)
	passOn    bool           // default mode: leaves its room to line up in the queue
	// arrived and aheadOfQueue are, in default mode, when w joined its
	// room, and whether a check of the lock made since found no fair
	// waiter queued for it: w then arrived before every fair waiter queued
	// now, and may be handed the lock ahead of them (see handEarly).
	arrived      time.Time
	aheadOfQueue bool
	// busySent and busyCounter are, in fair mode, the sent time of the last
	// attempt that found the lock held (or of the request that queued w)
	// and the fence counter that attempt saw. A grant whose fence is above
	// busyCounter was made after that attempt ran, so after busySent; one
	// whose fence is not was made before it, and had ended by then: it is
	// stale (see handTo).
	busySent    time.Time
	busyCounter uint64
}

// grantInfo is a hand-over: the waiter's fence, and a time no later than
// the moment Redis set the lock for it (its validity counts from there).
type grantInfo struct {
	fence     uint64
	validFrom time.Time
	reserved  uint64    // a fence reserved for the next local hand-over, or 0
	next      string    // fair: the entry of the waiter first in line after this one, or ""
	early     *handover // set instead when the waiter starts before Redis confirms
}

// join returns the room for keys with one more reference. Caller holds
// l.roomsMu.
func (l *Locker) join(keys lockRef) *room {
	r := l.rooms[keys.Key]
	if r == nil {
		r = &room{keys: keys, fair: make(map[string]*waiter)}
		l.rooms[keys.Key] = r
	}
	r.refs++
	return r
}

// unref drops one reference to r. Caller holds l.roomsMu.
func (l *Locker) unref(r *room) {
	if r.refs--; r.refs == 0 {
		delete(l.rooms, r.keys.Key)
	}
}

// deliver routes a message from the subscriber: a release notification
// wakes the first default waiter of the key; a grant wakes its fair waiter.
func (l *Locker) deliver(channel, payload string) {
	if base, ok := strings.CutSuffix(channel, ":n"); ok {
		k, ok := keyOfBase(l.cfg.prefix, base)
		if !ok {
			return
		}
		l.roomsMu.Lock()
		if r := l.rooms[k]; r != nil && len(r.defaults) > 0 {
			signal(r.defaults[0].wake)
		}
		l.roomsMu.Unlock()
		return
	}
	base, ok := strings.CutSuffix(channel, ":g:"+l.id)
	if !ok {
		return
	}
	keys, ok := lockRefOfBase(l.cfg.prefix, base)
	if !ok {
		return
	}
	// "<token> <fence> <reserved> <entry of the waiter next in line>"
	parts := strings.SplitN(payload, " ", 4)
	var fence, reserved uint64
	var err error
	if len(parts) == 4 {
		fence, err = strconv.ParseUint(parts[1], 10, 64)
		if err == nil {
			reserved, err = strconv.ParseUint(parts[2], 10, 64)
		}
	}
	if len(parts) != 4 || err != nil {
		l.logger.Warn("lockmw: ignoring a malformed grant message", slog.String("channel", channel))
		return
	}
	l.handTo(keys, parts[0], fence, time.Time{}, reserved, parts[3])
}

// signal wakes a waiter without blocking; a wake already pending is enough.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// watchUntil subscribes to channel on subs, giving up when ctx ends or,
// for a bounded wait (WithWait), at giveUp. A channel of grants or wakes
// (lingers) stays subscribed for a while after its last waiter (see
// subscriptionLinger).
func watchUntil(ctx context.Context, subs *subscriber, giveUp time.Time, channel string, lingers bool) error {
	if !giveUp.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, giveUp)
		defer cancel()
	}
	return subs.watch(ctx, channel, lingers)
}
