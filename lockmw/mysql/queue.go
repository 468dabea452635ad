package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"strconv"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is the Fair waiters' queue (lockmw.Fair): the table T_queue,
// one row per waiting token, ordered by seq, and the polls that learn a
// hand-over.
// See the package documentation, "Waiting" and "Safety".
//
// The queue decides only who may try: a queued waiter's attempt is the
// same statement on the lock's row as a plain one (take), with one more
// condition that can hold it back, never let it through. So whatever the
// queue holds (a stale entry, one whose delete was lost, a read that
// raced an insert), at most one token holds the row unexpired, and fences
// come from the same draw under the row's lock.

// holderMark is Reply.Predecessor for a waiter first in the queue: it
// waits for the lock's holder. Tokens are hex, so no entry has this name.
const holderMark = "(holder)"

// maxSeq stands for "after every entry" when a token has no live entry.
const maxSeq = "18446744073709551615"

// QueueIsFairOnly marks the store's queue as Fair waiters' only: lockmw's
// default-mode waiters poll with Acquire, one statement per attempt,
// rather than take turns in the queue, which costs several, and whose
// hand-over waits for one chosen waiter's poll while the lock is idle (16
// default waiters of 16 Lockers queued so kept the lock busy little more
// than half the time, against nine tenths polling).
func (s *sqlStore) QueueIsFairOnly() {}

// keyWhere matches the rows of k in a table aliased a.
func keyWhere(a string, k store.Key) string {
	return a + ".prefix = " + hexLit(k.Prefix) + " AND " + a + ".name = " + hexLit(k.Name)
}

// queueClear is take's condition on the queue: no unexpired entry queued
// before token's (queued), or none at all (!queued). A token without an
// unexpired entry counts as queued last.
func (s *sqlStore) queueClear(k store.Key, token string, queued bool) string {
	live := "SELECT 1 FROM " + s.n.queue + " q WHERE " + keyWhere("q", k) + " AND q.expires_at > UTC_TIMESTAMP(6)"
	if !queued {
		return "NOT EXISTS (" + live + ")"
	}
	return "NOT EXISTS (" + live + " AND q.token <> " + hexLit(token) + " AND q.seq < COALESCE((SELECT me.seq FROM " + s.n.queue +
		" me WHERE " + keyWhere("me", k) + " AND me.token = " + hexLit(token) + " AND me.expires_at > UTC_TIMESTAMP(6)), " + maxSeq + "))"
}

// Enqueue tries to take the lock for token (passing no entry queued
// before it); when busy it queues token's entry, or keeps its place and
// renews it, and reads what token waits for: the entry just before it, or
// the holder when it is first. Uncontended, that is one statement; busy,
// three.
func (s *sqlStore) Enqueue(ctx context.Context, k store.Key, token string, ttl time.Duration, _ bool) (store.Reply, error) {
	r, err := s.take(ctx, k, token, ttl, true)
	if err != nil || r.Acquired {
		if r.Acquired {
			s.settle(ctx, k, token, ttl)
		}
		return r, err
	}
	s.mark(token)
	s.sawWaiter(k)
	// An expired entry (its waiter was slow to renew it, or the sweep
	// deleted it) queues anew, last; a live one keeps its seq. seq is
	// assigned first, reading expires_at before it changes.
	_, err = s.send(ctx, ttl, token, query{text: bounded(ttl, "INSERT INTO "+s.n.queue+" (prefix, name, token, seq, expires_at, handover) VALUES ("+
		hexLit(k.Prefix)+", "+hexLit(k.Name)+", "+hexLit(token)+", NEXTVAL("+s.n.fence+"), UTC_TIMESTAMP(6) + INTERVAL "+micros(ttl)+" MICROSECOND, 1)"+
		" ON DUPLICATE KEY UPDATE seq = IF(expires_at > UTC_TIMESTAMP(6), seq, VALUES(seq)), expires_at = VALUES(expires_at), handover = 1")})
	if err != nil {
		return store.Reply{}, err
	}
	t, err := s.turn(ctx, k, token, ttl)
	if err != nil {
		return store.Reply{}, err
	}
	return t.reply(), nil
}

// settle deletes, while the lease runs, the entry of token, which took the
// lock (the next waiter waits for the entry to go and for the lock's
// release anyway). If the delete fails, or the store is closing (a waiter
// may still be in WaitTurn when its Locker closes the store), Release
// deletes it (the token stays marked), or it expires.
func (s *sqlStore) settle(ctx context.Context, k store.Key, token string, ttl time.Duration) {
	s.queuedMu.Lock()
	_, marked := s.queued[token]
	if !marked || s.closing {
		s.queuedMu.Unlock()
		return
	}
	s.dequeuing.Add(1)
	s.queuedMu.Unlock()
	go func() {
		defer s.dequeuing.Done()
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
		defer cancel()
		_ = s.dequeue(dctx, k, token)
	}()
}

// turnState is what a queued token waits for, read in one SELECT.
type turnState struct {
	queued   bool   // token's entry is live
	before   int64  // live entries before token's
	pred     string // the live entry just before token's, if any
	predLeft time.Duration
	held     bool // the lock's row is live (held)
	heldLeft time.Duration
	fence    uint64 // the live row's fence, when held
	mine     bool   // the live row holds token: a release handed it the lock
}

// reply is the Enqueue reply for t: wait for the predecessor, or for the
// holder when first, or (Predecessor "") ask again at once. Seen is the
// number of live entries before token's.
func (t turnState) reply() store.Reply {
	switch {
	case !t.queued:
		return store.Reply{}
	case t.pred != "":
		return store.Reply{Predecessor: t.pred, HolderTTL: t.predLeft, Seen: t.before}
	case t.held:
		return store.Reply{Predecessor: holderMark, HolderTTL: t.heldLeft}
	}
	return store.Reply{}
}

// turn reads token's place: whether its entry is live, the live entry
// just before it, and the lock's row: whether it is held, by token or
// not, and its fence (a plain, non-locking SELECT).
func (s *sqlStore) turn(ctx context.Context, k store.Key, token string, ttl time.Duration) (turnState, error) {
	ctx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	seq := "SELECT me.seq FROM " + s.n.queue + " me WHERE " + keyWhere("me", k) + " AND me.token = " + hexLit(token) + " AND me.expires_at > UTC_TIMESTAMP(6)"
	// The holder's own entry, until its Locker deletes it, is not a
	// place before token's: token waits for the holder then.
	holder := "(SELECT h.token FROM " + s.n.locks + " h WHERE " + keyWhere("h", k) + " AND h.expires_at > UTC_TIMESTAMP(6))"
	others := " AND %[1]s.expires_at > UTC_TIMESTAMP(6) AND %[1]s.token <> " + hexLit(token) + " AND %[1]s.token <> IFNULL(" + holder + ", X'') AND %[1]s.seq < (" + seq + ")"
	q := bounded(ttl, "SELECT ("+seq+") IS NOT NULL, "+
		"(SELECT COUNT(*) FROM "+s.n.queue+" c WHERE "+keyWhere("c", k)+fmt.Sprintf(others, "c")+"), "+
		"TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), l.expires_at), l.fence, l.token = "+hexLit(token)+", "+
		"p.token, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), p.expires_at) FROM (SELECT 1) one "+
		"LEFT JOIN "+s.n.locks+" l ON "+keyWhere("l", k)+" AND l.expires_at > UTC_TIMESTAMP(6) LEFT JOIN ("+
		"SELECT q.token, q.expires_at FROM "+s.n.queue+" q WHERE "+keyWhere("q", k)+fmt.Sprintf(others, "q")+
		" ORDER BY q.seq DESC LIMIT 1) p ON TRUE")
	var (
		t        turnState
		heldUs   sql.NullInt64
		fence    sql.NullInt64
		mine     sql.NullBool
		pred     sql.NullString
		predUs   sql.NullInt64
		queuedOK bool
	)
	if err := s.db.QueryRowContext(ctx, q).Scan(&queuedOK, &t.before, &heldUs, &fence, &mine, &pred, &predUs); err != nil {
		return turnState{}, s.classify(ctx, err)
	}
	t.queued = queuedOK
	if heldUs.Valid {
		t.held, t.heldLeft = true, time.Duration(heldUs.Int64)*time.Microsecond
		t.fence, t.mine = uint64(fence.Int64), mine.Bool
	}
	if pred.Valid {
		t.pred = pred.String
		if predUs.Valid {
			t.predLeft = time.Duration(predUs.Int64) * time.Microsecond
		}
	}
	return t, nil
}

// pollFast is how often a waiter polls once its hand-over is due (see
// WaitTurn); it backs off from there while the hand-over does not come.
const pollFast = 250 * time.Microsecond

// row is turn for a token first in line: what the lock's row says, read
// by its key alone.
func (s *sqlStore) row(ctx context.Context, k store.Key, token string, ttl time.Duration) (turnState, error) {
	ctx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	t := turnState{queued: true}
	var leftUs int64
	err := s.db.QueryRowContext(ctx, "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), fence, token = "+hexLit(token)+" FROM "+s.n.locks+
		" WHERE prefix = "+hexLit(k.Prefix)+" AND name = "+hexLit(k.Name)+" AND expires_at > UTC_TIMESTAMP(6)").Scan(&leftUs, &t.fence, &t.mine)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return t, nil
	case err != nil:
		return turnState{}, s.classify(ctx, err)
	}
	t.held, t.heldLeft = true, time.Duration(leftUs)*time.Microsecond
	return t, nil
}

// WaitTurn polls token's place until a release handed token the lock
// (reported: Acquired, dated from the poll), or token may take it (it is
// first and the lock is free: the caller's Enqueue then takes it), or its
// own entry ended, keeping the entry alive every ttl/3. Each poll is one
// SELECT that reads token's entry, the one just before it, how many are
// before it, and the lock's row (its fence and whether it holds token).
// When it polls is poller's schedule.
func (s *sqlStore) WaitTurn(ctx context.Context, k store.Key, token string, ttl time.Duration, r store.Reply) (store.Reply, error) {
	if r.Predecessor == "" {
		return store.Reply{}, nil // ask again at once
	}
	start := time.Now()
	w := poller{from: start, first: r.Seen, place: r.Seen, left: r.HolderTTL, backoff: pollFast, per: s.paceOf(k)}
	renewAt := start.Add(ttl / 3)
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		d := max(min(w.next(), time.Until(renewAt)), 0)
		timer.Reset(d)
		select {
		case <-ctx.Done():
			return store.Reply{}, ctx.Err()
		case <-timer.C:
		}
		if !time.Now().Before(renewAt) {
			alive, err := s.renewEntry(ctx, k, token, ttl)
			switch {
			case ctx.Err() != nil:
				return store.Reply{}, ctx.Err()
			case err != nil:
				return store.Reply{}, err
			case !alive:
				return store.Reply{}, nil // the entry expired: queue anew
			}
			renewAt = time.Now().Add(ttl / 3)
		}
		sent := time.Now()
		var (
			t   turnState
			err error
		)
		if w.place == 0 {
			// First in line, it waits for the holder only: the row
			// tells all (its entry is kept alive, and none can queue
			// before it).
			t, err = s.row(ctx, k, token, ttl)
		} else {
			t, err = s.turn(ctx, k, token, ttl)
		}
		switch {
		case ctx.Err() != nil:
			return store.Reply{}, ctx.Err()
		case err != nil:
			return store.Reply{}, err
		case t.mine:
			// A release handed token the lock (releaseStmt): the row
			// holds it, live, with the fence drawn in that release. The
			// lease counts from this poll's send time plus what the row
			// has left, minus ttl: it ends no later than the row.
			s.settle(ctx, k, token, ttl)
			s.keepPace(k, w.sample(sent))
			s.describeHanded(ctx, k, token, ttl)
			return handedReply(sent, t.fence, t.heldLeft, ttl), nil
		}
		now := t.reply()
		if now.Predecessor == "" {
			s.keepPace(k, w.sample(sent))
			return store.Reply{}, nil // free for token, or its entry ended: ask again
		}
		w.saw(sent, t.before, t.fence, now.HolderTTL)
	}
}

// poller is WaitTurn's schedule. per, how long one hand-over takes, comes
// from the waits before (the store keeps it per key: paceOf): a wait that
// began with p entries before the waiter's and ended after time d saw p+1
// hand-overs. With p entries before it, a waiter sleeps half of p·per (its
// place moves meanwhile, and it looks again). First in line, when its
// polls saw the holding it waits for begin (a new fence in the row, seen
// within 2·pollFast), it sleeps until half of per has passed since, then
// polls every pollFast; after twice per it backs off (×1.5, jittered) to
// per/4 until eight per have passed, then, as at once without per, to
// BackoffMax. A shorter wait pulls per down at once, a longer one lifts it
// by an eighth at most (sample). Before it knows per, a waiter further back polls from
// pollFast doubling. Never past BackoffMax, nor past the expiry of what it
// waits for. So the waiter next in line polls a few times per hand-over,
// around when it is due, the others a few times per wait, and every waiter
// polls at least every BackoffMax while the lock does not change hands.
type poller struct {
	from    time.Time     // when the wait began
	first   int64         // entries before the waiter's when it began
	place   int64         // entries before the waiter's at the last poll
	fence   uint64        // the row's fence at the last poll (0: free or not read)
	began   time.Time     // about when the holding of fence began; zero: not seen
	precise bool          // began is known within pollFast
	firstAt time.Time     // when the waiter was first seen first in line
	polled  time.Time     // the last poll's send time
	left    time.Duration // what the waiter waits for has left to run; 0: unknown
	per     time.Duration // how long a hand-over takes; 0: not known
	backoff time.Duration // the next pause when nothing better is known
}

// next is the pause before the next poll.
func (w *poller) next() time.Duration {
	d := w.backoff/2 + mathrand.N(w.backoff/2+1)
	switch {
	case w.per > 0 && w.place > 0:
		d = max(d, time.Duration(w.place)*w.per/2)
	case w.place == 0:
		// First in line: the hand-over comes when the holding ends. When
		// the poll that saw it begin came soon after the one before, the
		// waiter knows when it began and sleeps until half of per has
		// passed (a pace that overestimates costs polls, not a hand-over
		// left waiting); else it polls every pollFast for two per, then
		// backs off.
		if w.firstAt.IsZero() {
			w.firstAt = time.Now()
		}
		early := time.Until(w.began.Add(w.per / 2))
		switch {
		case w.per > 0 && w.precise && early > d:
			d = early
		case w.per > 0 && time.Since(w.firstAt) < 2*w.per:
		case w.per > 0 && time.Since(w.firstAt) < 8*w.per:
			// Late, but not by much: a holding slower than the pace
			// (under load, a holder slow to learn its own hand-over).
			// The hand-over is near; each poll is one read by the key.
			w.backoff = min(w.backoff*3/2, max(2*pollFast, w.per/4))
		default:
			w.backoff = min(w.backoff*3/2, BackoffMax)
		}
	default:
		w.backoff = min(2*w.backoff, BackoffMax)
	}
	d = min(d, BackoffMax)
	if w.left > 0 {
		d = min(d, w.left)
	}
	return d
}

// saw takes in a poll sent at sent: the waiter's place, the row's fence
// (0: free), and what the waiter waits for has left.
func (w *poller) saw(sent time.Time, place int64, fence uint64, left time.Duration) {
	if fence != w.fence && fence != 0 && !w.polled.IsZero() {
		w.began, w.backoff = w.polled.Add(sent.Sub(w.polled)/2), pollFast
		w.precise = sent.Sub(w.polled) <= 2*pollFast
	}
	w.place, w.fence, w.left, w.polled = place, fence, left, sent
}

// sample is per with the wait that ended at the poll sent at end taken in.
func (w *poller) sample(end time.Time) time.Duration {
	s := end.Sub(w.from) / time.Duration(w.first+1)
	if w.per == 0 {
		return min(s, BackoffMax)
	}
	// A shorter wait pulls the pace down at once; a longer one lifts it
	// slowly, and a stall (a waiter slow to learn its hand-over) counts
	// at most twice the pace. A pace too long makes the waiter first in
	// line sleep through its hand-over, the lock handed and idle, and that
	// late learning lengthens the next waits, lifting the pace further. A
	// pace too short costs polls only.
	if s < w.per {
		return (w.per + s) / 2
	}
	return (7*w.per + min(s, 2*w.per)) / 8
}

// maxPaces bounds the keys whose pace the store keeps; past it, the paces
// are forgotten (and learnt again).
const maxPaces = 4096

// paceOf is how long a hand-over of k took, as the store's waits saw it;
// 0 when unknown.
func (s *sqlStore) paceOf(k store.Key) time.Duration {
	s.pacesMu.Lock()
	defer s.pacesMu.Unlock()
	return s.paces[k]
}

// sawWaiter notes that a waiter of the store queued for k: releases of k
// hand the lock over from now on (contended).
func (s *sqlStore) sawWaiter(k store.Key) {
	s.pacesMu.Lock()
	defer s.pacesMu.Unlock()
	if _, ok := s.paces[k]; !ok {
		s.keepPaceLocked(k, 0)
	}
}

// contended reports whether a waiter of the store queued for k (since
// the store last forgot its paces).
func (s *sqlStore) contended(k store.Key) bool {
	s.pacesMu.Lock()
	defer s.pacesMu.Unlock()
	_, ok := s.paces[k]
	return ok
}

// keepPace keeps per as k's pace.
func (s *sqlStore) keepPace(k store.Key, per time.Duration) {
	s.pacesMu.Lock()
	defer s.pacesMu.Unlock()
	s.keepPaceLocked(k, per)
}

func (s *sqlStore) keepPaceLocked(k store.Key, per time.Duration) {
	if s.paces == nil || len(s.paces) >= maxPaces {
		s.paces = make(map[store.Key]time.Duration)
	}
	s.paces[k] = per
}

// renewEntry extends token's live entry; false when it has none.
func (s *sqlStore) renewEntry(ctx context.Context, k store.Key, token string, ttl time.Duration) (bool, error) {
	res, err := s.exec(ctx, ttl, bounded(ttl, "UPDATE "+s.n.queue+" q SET q.expires_at = UTC_TIMESTAMP(6) + INTERVAL "+micros(ttl)+" MICROSECOND"+
		" WHERE "+keyWhere("q", k)+" AND q.token = "+hexLit(token)+" AND q.expires_at > UTC_TIMESTAMP(6)"))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// Leave deletes token's entry and ends its holding, if it had taken the
// lock.
func (s *sqlStore) Leave(ctx context.Context, k store.Key, token string) error {
	s.mark(token)
	_, err := s.Release(ctx, k, token)
	return err
}

// mark notes that token may have a queue entry, so that its Release
// deletes it.
func (s *sqlStore) mark(token string) {
	s.queuedMu.Lock()
	defer s.queuedMu.Unlock()
	if s.queued == nil {
		s.queued = make(map[string]time.Time)
	}
	s.queued[token] = time.Now()
}

// isMarked reports whether token may have a queue entry.
func (s *sqlStore) isMarked(token string) bool {
	s.queuedMu.Lock()
	defer s.queuedMu.Unlock()
	_, ok := s.queued[token]
	return ok
}

// dequeue deletes token's entry when token may have one.
func (s *sqlStore) dequeue(ctx context.Context, k store.Key, token string) error {
	if !s.isMarked(token) {
		return nil
	}
	if _, err := s.exec(ctx, time.Minute, "DELETE FROM "+s.n.queue+" WHERE prefix = "+hexLit(k.Prefix)+" AND name = "+hexLit(k.Name)+" AND token = "+hexLit(token)); err != nil {
		return err
	}
	s.queuedMu.Lock()
	delete(s.queued, token)
	s.queuedMu.Unlock()
	return nil
}

// sweepQueue deletes expired entries (of waiters that stopped renewing
// them: a crash, a lost link, a delete that failed), up to ten batches,
// and forgets marks older than Retention (their entries expired long
// ago, every TTL being at most Retention).
func (s *sqlStore) sweepQueue() {
	for range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := s.exec(ctx, time.Minute, "DELETE FROM "+s.n.queue+" WHERE expires_at <= UTC_TIMESTAMP(6) LIMIT "+strconv.Itoa(cleanupBatch))
		cancel()
		if err != nil {
			break
		}
		if n, _ := res.RowsAffected(); n < cleanupBatch {
			break
		}
	}
	s.queuedMu.Lock()
	defer s.queuedMu.Unlock()
	for token, at := range s.queued {
		if time.Since(at) > s.retention {
			delete(s.queued, token)
		}
	}
}
