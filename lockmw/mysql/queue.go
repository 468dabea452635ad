package mysql

import (
	"context"
	"database/sql"
	mathrand "math/rand/v2"
	"strconv"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is the Fair waiters' queue (lockmw.Fair): the table T_queue,
// one row per waiting token, ordered by seq. See the package
// documentation, "Waiting" and "Safety".
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
// rather than take turns in the queue, which costs several.
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
		if r.Acquired && s.isMarked(token) {
			// The holder's entry is done: deleted while the lease runs
			// (the next waiter waits for the entry to go and for the
			// lock's release anyway). If the delete fails, Release
			// deletes it (the token stays marked), or it expires.
			s.dequeuing.Go(func() {
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
				defer cancel()
				_ = s.dequeue(dctx, k, token)
			})
		}
		return r, err
	}
	s.mark(token)
	// An expired entry (its waiter was slow to renew it, or the sweep
	// deleted it) queues anew, last; a live one keeps its seq. seq is
	// assigned first, reading expires_at before it changes.
	_, err = s.send(ctx, ttl, token, bounded(ttl, "INSERT INTO "+s.n.queue+" (prefix, name, token, seq, expires_at) VALUES ("+
		hexLit(k.Prefix)+", "+hexLit(k.Name)+", "+hexLit(token)+", NEXTVAL("+s.n.fence+"), UTC_TIMESTAMP(6) + INTERVAL "+micros(ttl)+" MICROSECOND)"+
		" ON DUPLICATE KEY UPDATE seq = IF(expires_at > UTC_TIMESTAMP(6), seq, VALUES(seq)), expires_at = VALUES(expires_at)"))
	if err != nil {
		return store.Reply{}, err
	}
	t, err := s.turn(ctx, k, token, ttl)
	if err != nil {
		return store.Reply{}, err
	}
	return t.reply(), nil
}

// turnState is what a queued token waits for, read in one SELECT.
type turnState struct {
	queued   bool   // token's entry is live
	before   int64  // live entries before token's
	pred     string // the live entry just before token's, if any
	predLeft time.Duration
	held     bool // the lock's row is live (held)
	heldLeft time.Duration
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
// just before it, and whether the lock is held (a plain, non-locking
// SELECT).
func (s *sqlStore) turn(ctx context.Context, k store.Key, token string, ttl time.Duration) (turnState, error) {
	ctx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	mine := "SELECT me.seq FROM " + s.n.queue + " me WHERE " + keyWhere("me", k) + " AND me.token = " + hexLit(token) + " AND me.expires_at > UTC_TIMESTAMP(6)"
	q := bounded(ttl, "SELECT ("+mine+") IS NOT NULL, "+
		"(SELECT COUNT(*) FROM "+s.n.queue+" c WHERE "+keyWhere("c", k)+" AND c.expires_at > UTC_TIMESTAMP(6) AND c.token <> "+hexLit(token)+" AND c.seq < ("+mine+")), "+
		"(SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), l.expires_at) FROM "+s.n.locks+" l WHERE "+keyWhere("l", k)+" AND l.expires_at > UTC_TIMESTAMP(6)), "+
		"p.token, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), p.expires_at) FROM (SELECT 1) one LEFT JOIN ("+
		"SELECT q.token, q.expires_at FROM "+s.n.queue+" q WHERE "+keyWhere("q", k)+" AND q.expires_at > UTC_TIMESTAMP(6) AND q.token <> "+hexLit(token)+
		" AND q.seq < ("+mine+") ORDER BY q.seq DESC LIMIT 1) p ON TRUE")
	var (
		t        turnState
		heldUs   sql.NullInt64
		pred     sql.NullString
		predUs   sql.NullInt64
		queuedOK bool
	)
	if err := s.db.QueryRowContext(ctx, q).Scan(&queuedOK, &t.before, &heldUs, &pred, &predUs); err != nil {
		return turnState{}, s.classify(ctx, err)
	}
	t.queued = queuedOK
	if heldUs.Valid {
		t.held, t.heldLeft = true, time.Duration(heldUs.Int64)*time.Microsecond
	}
	if pred.Valid {
		t.pred = pred.String
		if predUs.Valid {
			t.predLeft = time.Duration(predUs.Int64) * time.Microsecond
		}
	}
	return t, nil
}

// WaitTurn polls token's place until token may take the lock (it is
// first and the lock is free: the caller's Enqueue then takes it), or its
// own entry ended, keeping the entry alive every ttl/3. Each poll is one
// SELECT that reads token's entry, the one just before it, how many are
// before it, and the lock's row. How long it sleeps between polls:
//
//   - first or second in line: BackoffMin doubling to BackoffMax
//     (jittered), from when it became so, never past the holder's (or
//     the first's) expiry;
//   - p entries before it: the hand-overs it saw (its place rose by d in
//     time s) tell how long p more take; it sleeps half of p·s/d, within
//     [BackoffMin, BackoffMax], or doubles its sleep up to BackoffMax while
//     its place does not move, never past its predecessor's expiry.
//
// So the waiters next in line poll often while the lock changes hands
// quickly, and every waiter polls at most every BackoffMax while it does
// not.
func (s *sqlStore) WaitTurn(ctx context.Context, k store.Key, token string, ttl time.Duration, r store.Reply) (store.Reply, error) {
	if r.Predecessor == "" {
		return store.Reply{}, nil // ask again at once
	}
	place := r.Seen // entries before token's; 0: first
	backoff, left := BackoffMin, r.HolderTTL
	polled := time.Now()
	renewAt := polled.Add(ttl / 3)
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		d := backoff/2 + mathrand.N(backoff/2+1)
		if left > 0 {
			d = min(d, left)
		}
		d = max(min(d, time.Until(renewAt)), 0)
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
		t, err := s.turn(ctx, k, token, ttl)
		switch {
		case ctx.Err() != nil:
			return store.Reply{}, ctx.Err()
		case err != nil:
			return store.Reply{}, err
		}
		now := t.reply()
		if now.Predecessor == "" {
			return store.Reply{}, nil // free for token, or its entry ended: ask again
		}
		since := time.Since(polled)
		polled = time.Now()
		switch {
		case t.before <= 1 && t.before != place:
			backoff = BackoffMin // just became first or second
		case t.before > 1 && t.before < place:
			per := since / time.Duration(place-t.before)
			backoff = min(max(per*time.Duration(t.before)/2, BackoffMin), BackoffMax)
		default:
			backoff = min(2*backoff, BackoffMax)
		}
		place, left = t.before, now.HolderTTL
	}
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
