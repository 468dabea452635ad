package zookeeper

import (
	"context"
	"errors"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file takes, queues, keeps and gives back lock nodes. Safety: it
// makes leases live; the argument is in doc.go ("Safety"), not repeated
// here.

var (
	_ store.Store        = (*zkStore)(nil)
	_ store.Queue        = (*zkStore)(nil)
	_ store.LossNotifier = (*zkStore)(nil)
	_ store.Named        = (*zkStore)(nil)
)

// Name is the store's name in the Locker's messages.
func (s *zkStore) Name() string { return "ZooKeeper" }

// NotifyLoss registers the Locker's callback for holdings that end with
// their session (sessionExpired).
func (s *zkStore) NotifyLoss(lost func(tokens []string, why error)) {
	s.mu.Lock()
	s.lost = lost
	s.mu.Unlock()
}

// sessionExpired ends, at the StateExpired event, every lease whose node
// was created in the session old: the server deleted those nodes with the
// session, so waiting for the next renewal tick to find them gone would
// leave the leases live after another holder may have the lock.
func (s *zkStore) sessionExpired(old sessionState) {
	s.mu.Lock()
	var tokens []string
	for token, e := range s.held {
		if e.sess.id == old.id && e.sess.epoch == old.epoch {
			tokens = append(tokens, token)
		}
	}
	lost := s.lost
	s.mu.Unlock()
	if lost != nil {
		lost(tokens, errExpired)
	}
}

// Acquire creates token's node and keeps it only when it is the first lock
// node of the parent; otherwise it deletes it again and reports busy.
func (s *zkStore) Acquire(ctx context.Context, k store.Key, token string, ttl time.Duration, renewed bool) (store.Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	e, err := s.create(ctx, s.parentOf(k), token, ttl)
	if err != nil {
		return store.Reply{}, err
	}
	if pos, ok := s.takeAlone(e); ok {
		s.acquired(e, pos, ttl, renewed)
		return store.Reply{Acquired: true, Fence: uint64(pos.czxid), ValidFrom: pos.sent}, nil
	}
	pos, err := s.position(ctx, e)
	if err != nil {
		s.giveUp(e)
		return store.Reply{}, err
	}
	if pos.pred != "" {
		// Not first: a single attempt leaves no entry behind. If the
		// delete fails the error says so, and lockmw gives the token back
		// through Release, which tries again.
		if _, err := s.Release(ctx, k, token); err != nil {
			return store.Reply{}, err
		}
		return store.Reply{}, nil
	}
	s.acquired(e, pos, ttl, renewed)
	return store.Reply{Acquired: true, Fence: uint64(pos.czxid), ValidFrom: pos.sent}, nil
}

// Enqueue creates token's node unless it has one, and says whether it is
// first, or which node is just before it.
func (s *zkStore) Enqueue(ctx context.Context, k store.Key, token string, ttl time.Duration, renewed bool) (store.Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	parent := s.parentOf(k)
	for try := 0; ; try++ {
		s.mu.Lock()
		e := s.held[token]
		s.mu.Unlock()
		switch {
		case e != nil && e.unknown:
			return store.Reply{}, errUnknownCreate
		case e != nil && !s.tr.same(e.sess):
			// The entry went with its session: queue anew, in the
			// current one (a waiter loses its place, never its safety).
			s.drop(e)
			e = nil
		}
		if e == nil {
			var err error
			if e, err = s.create(ctx, parent, token, ttl); err != nil {
				return store.Reply{}, err
			}
			if pos, ok := s.takeAlone(e); ok {
				s.acquired(e, pos, ttl, renewed)
				return store.Reply{Acquired: true, Fence: uint64(pos.czxid), ValidFrom: pos.sent}, nil
			}
		}
		pos, err := s.position(ctx, e)
		switch {
		case errors.Is(err, errEntryGone) && try < 2:
			s.drop(e) // deleted by someone else: queue anew
			continue
		case err != nil:
			return store.Reply{}, err
		case pos.pred != "":
			return store.Reply{Predecessor: parent + "/" + pos.pred}, nil
		}
		s.acquired(e, pos, ttl, renewed)
		return store.Reply{Acquired: true, Fence: uint64(pos.czxid), ValidFrom: pos.sent}, nil
	}
}

// acquired records that e holds the lock. A holding that nobody asks to
// renew for its TTL is deleted (expire): lockmw has given it up (it was
// acquired WithoutWatchdog, or its lease was lost at its deadline), and a
// node of a live session would otherwise hold the lock forever.
func (s *zkStore) acquired(e *entry, pos position, ttl time.Duration, renewed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.czxid = pos.czxid
	if e.timer == nil {
		e.timer = time.AfterFunc(time.Until(pos.sent.Add(ttl)), func() { s.expire(e, ttl) })
	}
}

// expire deletes the node of a holding whose TTL passed with no renewal
// asked for; if ZooKeeper cannot be reached, the session's end deletes it.
// lockmw's lease deadline (the last renewal's send time + TTL − drift)
// came before: the lease was over.
func (s *zkStore) expire(e *entry, ttl time.Duration) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), max(ttl, time.Second))
		s.mu.Lock()
		gone := s.held[e.token] != e || s.closed
		s.mu.Unlock()
		if gone || !s.tr.same(e.sess) {
			cancel()
			return
		}
		_, err := s.do(ctx, "delete", e.parent+"/"+e.name, func() error { return s.conn.Delete(e.parent+"/"+e.name, -1) })
		cancel()
		if err == nil || errors.Is(err, zk.ErrNoNode) {
			s.drop(e)
			s.dropParent(e.parent)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WaitTurn watches the predecessor until it is deleted, and, while the
// last read of the queue found other lock nodes below token's, the node
// just before the predecessor too (two watchers per node at most: no herd):
// when that one goes, it reads the queue again, during the predecessor's
// turn, so that the predecessor's deletion finds the predecessor the only
// node below. If the predecessor was the only lock node below token's at
// the last read of the queue, token's is first at its deletion, and
// WaitTurn reports the holding with no request more; else (or after
// another event of the watch) it reads the queue once: when token's node
// is first, it reports the holding; when another node is now just before
// it, it watches that one (doc.go, "Safety": Hand-over seen by the
// waiter). It returns a zero reply, for the Locker to ask Enqueue, when
// the session changes (token's own entry went with it) or a read fails.
func (s *zkStore) WaitTurn(ctx context.Context, k store.Key, token string, ttl time.Duration, r store.Reply) (store.Reply, error) {
	s.mu.Lock()
	e := s.held[token]
	s.mu.Unlock()
	if e == nil || !s.tr.same(e.sess) || r.Predecessor == "" {
		return store.Reply{}, nil
	}
	changed := s.tr.changes()
	if !s.tr.same(e.sess) {
		return store.Reply{}, nil
	}
	pred := r.Predecessor
	for {
		var (
			exists  bool
			ch      <-chan zk.Event
			deleted bool // the answer or the event says pred is gone
		)
		sent, err := s.do(ctx, "existsw", pred, func() error {
			var err error
			exists, _, ch, err = s.conn.ExistsW(pred)
			return err
		})
		// last is the send time of the last request answered since the
		// watch on pred: a read of the queue, or the watch itself.
		last := sent
		switch {
		case err == nil && exists:
			var (
				next  string    // the node now before token's, when a read found another
				first *position // a read found token's node first
			)
			deleted, next, first, err = s.watchTurn(ctx, e, pred, ch, changed, &last)
			switch {
			case errors.Is(err, errReadAgain):
				return store.Reply{}, nil
			case err != nil:
				return store.Reply{}, err
			case first != nil:
				s.acquired(e, *first, ttl, true)
				return store.Reply{Acquired: true, Fence: uint64(first.czxid), ValidFrom: first.sent}, nil
			case next != "":
				pred = next
				continue
			case !deleted && !s.tr.same(e.sess):
				return store.Reply{}, nil // the session changed
			}
		case err == nil:
			deleted = true
		case ctx.Err() != nil:
			return store.Reply{}, ctx.Err()
		case definite(err):
			return store.Reply{}, err
		default:
			// The connection is down: wait for it, or for the session's
			// end.
			select {
			case <-changed:
				return store.Reply{}, nil
			case <-ctx.Done():
				return store.Reply{}, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		// If the predecessor is gone and was the only lock node below
		// token's at the last read of the queue, token's is first now, and
		// the last request answered in e's session before the deletion
		// (the watch, or a read after it) dates the holding; unless that
		// leaves less than 3/4 of the TTL (a read dates it).
		s.mu.Lock()
		first := deleted && e.head != "" && pred == e.parent+"/"+e.head && e.fence != 0
		pos := position{czxid: e.fence, sent: last}
		s.mu.Unlock()
		if first && s.tr.same(e.sess) && time.Since(last) < ttl/4 {
			s.acquired(e, pos, ttl, true)
			return store.Reply{Acquired: true, Fence: uint64(pos.czxid), ValidFrom: pos.sent}, nil
		}
		// Where is token's node now?
		pos, err = s.position(ctx, e)
		switch {
		case err != nil && ctx.Err() != nil:
			return store.Reply{}, ctx.Err()
		case err != nil:
			return store.Reply{}, nil // Enqueue asks again, and says why
		case pos.pred != "":
			pred = e.parent + "/" + pos.pred
			continue
		}
		s.acquired(e, pos, ttl, true)
		return store.Reply{Acquired: true, Fence: uint64(pos.czxid), ValidFrom: pos.sent}, nil
	}
}

// errReadAgain is watchTurn's error for a read of the queue that failed:
// WaitTurn returns, and the Locker asks Enqueue, which reads it again.
var errReadAgain = errors.New("zookeeper: the read of the queue failed")

// watchTurn waits for the event of ch, the watch on pred (e's predecessor,
// which existed when the watch was set): deleted says whether it was
// pred's deletion. Meanwhile, while the last read of the queue found
// another lock node just before pred, it watches that one too, and reads
// the queue again when it goes: then first is e's holding when the read
// found e's node first, and next the node now before e's when it is not
// pred; *last is that read's send time when it found pred still before
// e's node. It returns with neither when the session changes, ctx's
// error when ctx ends, and errReadAgain when the read failed.
func (s *zkStore) watchTurn(ctx context.Context, e *entry, pred string, ch <-chan zk.Event, changed <-chan struct{}, last *time.Time) (deleted bool, next string, first *position, err error) {
	for {
		var sch <-chan zk.Event // the watch on the node before pred
		s.mu.Lock()
		second := ""
		if e.second != "" && pred == e.parent+"/"+e.pred {
			second = e.parent + "/" + e.second
		}
		s.mu.Unlock()
		read := false
		if second != "" {
			// A data watch (GetW), which the server sets only on a node
			// that exists: no watch is left on a name that is gone.
			_, err := s.do(ctx, "getw", second, func() error {
				var err error
				_, _, sch, err = s.conn.GetW(second)
				return err
			})
			switch {
			case errors.Is(err, zk.ErrNoNode):
				read = true // gone already
			case err != nil:
				sch = nil // pred's watch is enough: the read comes at its event
			}
		}
		if !read {
			select {
			case ev := <-ch:
				return ev.Type == zk.EventNodeDeleted, "", nil, nil
			case <-sch:
			case <-changed:
				return false, "", nil, nil
			case <-ctx.Done():
				return false, "", nil, ctx.Err()
			}
		}
		// The node before pred went: where is e's node now?
		pos, err := s.position(ctx, e)
		switch {
		case err != nil && ctx.Err() != nil:
			return false, "", nil, ctx.Err()
		case err != nil:
			return false, "", nil, errReadAgain // Enqueue asks again, and says why
		case pos.pred == "":
			return false, "", &pos, nil
		case e.parent+"/"+pos.pred != pred:
			return false, e.parent + "/" + pos.pred, nil, nil
		}
		*last = pos.sent
	}
}

// Leave deletes token's entry.
func (s *zkStore) Leave(ctx context.Context, k store.Key, token string) error {
	_, err := s.Release(ctx, k, token)
	return err
}

// Release deletes token's node. Its name is token's alone, so the delete
// never touches another holder's node.
func (s *zkStore) Release(ctx context.Context, k store.Key, token string) (store.Ownership, error) {
	s.mu.Lock()
	e := s.held[token]
	if e == nil {
		e = s.abandoned[token]
	}
	if e != nil && e.timer != nil {
		e.timer.Stop()
	}
	s.mu.Unlock()
	if e == nil {
		return store.Missing, nil
	}
	if !s.tr.same(e.sess) {
		s.drop(e) // it went with its session
		return store.Missing, nil
	}
	if e.unknown {
		found, err := s.find(ctx, e)
		if err != nil {
			return 0, err
		}
		if !found {
			// The create may still be applied: a later listing of the
			// parent deletes it (position), until the session ends.
			s.abandon(e)
			return store.Missing, nil
		}
	}
	p := e.parent + "/" + e.name
	_, err := s.do(ctx, "delete", p, func() error { return s.conn.Delete(p, -1) })
	switch {
	case err == nil:
		s.drop(e)
		s.dropParent(e.parent)
		return store.Owned, nil
	case errors.Is(err, zk.ErrNoNode):
		s.drop(e)
		return store.Missing, nil
	}
	return 0, err
}

// Renew proves that each request's node still exists in the current
// session, with one Multi of version checks (chunks of 512) sent after
// lockmw's renewal time: a confirmed check is a request the session's
// server answered, which ZooKeeper counts as the session being alive.
func (s *zkStore) Renew(ctx context.Context, reqs []store.RenewRequest) []store.RenewResult {
	res := make([]store.RenewResult, len(reqs))
	st := s.tr.now()
	type check struct {
		i    int
		path string
	}
	var checks []check
	// gone collects the tokens whose nodes went with their session: they
	// are reported lost with the expiry as cause (as sessionExpired does),
	// whichever of the two comes first.
	var (
		goneMu sync.Mutex
		gone   []string
	)
	s.mu.Lock()
	lost := s.lost
	for i, r := range reqs {
		e := s.held[r.Token]
		switch {
		case e == nil || e.name == "" || e.unknown || e.czxid == 0:
			res[i].Ownership = store.Missing
		case st.id == 0 || e.sess.epoch < st.epoch:
			if st.id == 0 && e.sess.epoch == st.epoch {
				res[i].Err = s.noSession() // disconnected: maybe back in time
			} else {
				res[i].Ownership = store.Missing // went with its session
				gone = append(gone, r.Token)
			}
		case r.TTL > s.maxTTL(st.timeout):
			res[i].Err = s.renewTTLErr(r.TTL, st.timeout)
		default:
			if e.timer != nil {
				e.timer.Reset(r.TTL) // asked to renew: not given up
			}
			checks = append(checks, check{i, e.parent + "/" + e.name})
		}
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for lo := 0; lo < len(checks); lo += 512 {
		chunk := checks[lo:min(lo+512, len(checks))]
		wg.Go(func() {
			pending := chunk
			for len(pending) > 0 {
				ops := make([]any, len(pending))
				for j, c := range pending {
					ops[j] = &zk.CheckVersionRequest{Path: c.path, Version: -1}
				}
				out := make(chan []zk.MultiResponse, 1)
				_, err := s.do(ctx, "multi", pending[0].path, func() error {
					mr, err := s.conn.Multi(ops...)
					out <- mr
					return err
				})
				var mr []zk.MultiResponse
				select {
				case mr = <-out: // the request completed: its per-op answers
				default:
				}
				if !s.tr.same(st) {
					goneMu.Lock()
					for _, c := range pending {
						res[c.i].Ownership = store.Missing
						gone = append(gone, reqs[c.i].Token)
					}
					goneMu.Unlock()
					return
				}
				if err == nil {
					for _, c := range pending {
						res[c.i].Ownership = store.Owned
					}
					return
				}
				if len(mr) != len(pending) {
					for _, c := range pending {
						res[c.i].Err = err
					}
					return
				}
				// The Multi failed as a whole: the checks before the
				// failing one passed, the failing one names a missing
				// node; the rest are asked again.
				var again []check
				for j, c := range pending {
					switch {
					case mr[j].Error == nil:
						res[c.i].Ownership = store.Owned
					case errors.Is(mr[j].Error, zk.ErrNoNode), errors.Is(mr[j].Error, zk.ErrBadVersion):
						res[c.i].Ownership = store.Missing
					default:
						again = append(again, c)
					}
				}
				if len(again) == len(pending) {
					for _, c := range again {
						res[c.i].Err = err
					}
					return
				}
				pending = again
			}
		})
	}
	wg.Wait()
	if len(gone) > 0 && lost != nil {
		lost(gone, errExpired)
	}
	return res
}

// renewTTLErr is Renew's error for ttl under a session of timeout.
func (s *zkStore) renewTTLErr(ttl, timeout time.Duration) error {
	return errors.New("zookeeper: the session timeout granted on reconnection (" + timeout.String() + ") no longer keeps the lease TTL " + ttl.String())
}

// Close ends the session: ZooKeeper deletes every node the store still
// has (lockmw has released its leases before).
func (s *zkStore) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for _, e := range s.held {
		if e.timer != nil {
			e.timer.Stop()
		}
	}
	conn := s.conn
	s.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
	return nil
}

// create creates token's node under parent in the current session (and
// parent, a container node, when missing).
func (s *zkStore) create(ctx context.Context, parent, token string, ttl time.Duration) (*entry, error) {
	st := s.tr.now()
	if st.id != 0 && ttl > s.maxTTL(st.timeout) {
		return nil, s.CheckTTL(ttl) // a session granted after lockmw's own check
	}
	return s.createIn(ctx, parent, token, st)
}

// createIn creates token's node in session st, and in no other: the
// create is one Multi with a check that st's guard node exists (guard),
// so a request go-zookeeper sends on a later session (it queues requests
// across reconnections, and a new session follows an expiry) creates
// nothing. A create whose reply is lost is looked for by token; a node
// found is taken only if its ephemeral owner is st, still current.
func (s *zkStore) createIn(ctx context.Context, parent, token string, st sessionState) (*entry, error) {
	if st.id == 0 {
		return nil, s.noSession()
	}
	guard, err := s.guard(ctx, st)
	if err != nil {
		return nil, err
	}
	e := &entry{token: token, parent: parent, sess: st, since: time.Now()}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, lockmw.ErrClosed
	}
	s.held[token] = e
	s.mu.Unlock()
	prefix := parent + "/" + nodePrefix(token)
	for try := 0; ; try++ {
		s.mu.Lock()
		ro, parentRO, info := s.guardRO, s.parentRO, s.info
		s.mu.Unlock()
		// The guard's op: a SetData of its (empty) data, which fails as a
		// version check does when the guard is gone, and whose answer
		// carries the guard's new mzxid: the zxid of this transaction,
		// the node's czxid (the fence, without a read of the node's stat).
		var check any = &zk.SetDataRequest{Path: guard, Version: -1}
		if ro {
			check = &zk.CheckVersionRequest{Path: guard, Version: -1}
		}
		ops := []any{check, &zk.CreateRequest{Path: prefix, Data: info, Acl: s.acl, Flags: zk.FlagEphemeral | zk.FlagSequence}}
		if !parentRO {
			// The parent's op: a SetData of its (empty) data after the
			// create, whose answer carries the parent's stat in this
			// transaction: its number of children, the node's included
			// (a free lock needs no read of the queue: see doc.go,
			// "Safety"), and its new mzxid, the node's czxid.
			ops = append(ops, &zk.SetDataRequest{Path: parent, Version: -1})
		}
		out := make(chan []zk.MultiResponse, 1)
		sent, err := s.do(ctx, "create", prefix, func() error {
			mr, err := s.conn.Multi(ops...)
			out <- mr
			return err
		})
		var mr []zk.MultiResponse
		select {
		case mr = <-out:
		default:
		}
		if len(mr) == len(ops) {
			switch {
			case !ro && errors.Is(mr[0].Error, zk.ErrNoAuth) && try < 3:
				// Config.ACL does not let this client write the guard:
				// nothing was created; check its version from now on.
				s.mu.Lock()
				s.guardRO = true
				s.mu.Unlock()
				continue
			case mr[0].Error != nil && !isInconsistency(mr[0].Error):
				// st's guard is gone: st ended, and this went out on a
				// later session. Nothing was created.
				s.drop(e)
				return nil, errSessionChanged
			case mr[1].Error != nil && !isInconsistency(mr[1].Error):
				err = mr[1].Error
			case !parentRO && errors.Is(mr[2].Error, zk.ErrNoAuth) && try < 3:
				// The parent's ACL does not let this client write it:
				// nothing was created; read the queue after each create
				// from now on.
				s.mu.Lock()
				s.parentRO = true
				s.mu.Unlock()
				continue
			}
		}
		var (
			name  string
			fence int64
			alone bool
		)
		if err == nil && len(mr) == len(ops) {
			name = mr[1].String
			if !ro && mr[0].Stat != nil && mr[0].Stat.EphemeralOwner == st.id {
				fence = mr[0].Stat.Mzxid
			}
			if !parentRO && mr[2].Stat != nil {
				if fence == 0 {
					fence = mr[2].Stat.Mzxid
				}
				alone = mr[2].Stat.NumChildren == 1
			}
		}
		switch {
		case err == nil && name != "":
			s.mu.Lock()
			e.name, e.fence = path.Base(name), fence
			if alone && fence != 0 {
				e.alone = sent
			}
			s.mu.Unlock()
			if !s.tr.same(st) {
				s.giveUp(e) // cannot be, by the guard; never kept
				return nil, errSessionChanged
			}
			return e, nil
		case err == nil:
			s.drop(e)
			return nil, errors.New("zookeeper: a create was answered without the node's path")
		case errors.Is(err, zk.ErrNoNode) && !s.tr.same(st):
			// The guard's check failed: the Multi went out on a later
			// session, and created nothing.
			s.drop(e)
			return nil, errSessionChanged
		case errors.Is(err, zk.ErrNoNode) && try < 3:
			if try > 0 {
				// The guard (or the parent) went missing in a live
				// session: make both again.
				s.mu.Lock()
				s.guarded = 0
				s.mu.Unlock()
				if guard, err = s.guard(ctx, st); err != nil {
					s.drop(e)
					return nil, err
				}
			}
			if err := s.makeParent(ctx, parent); err != nil {
				s.drop(e)
				return nil, err
			}
			continue
		case definite(err):
			s.drop(e)
			return nil, err
		}
		// The reply was lost: the node may exist.
		s.mu.Lock()
		e.unknown = true
		s.mu.Unlock()
		if ctx.Err() != nil {
			return nil, err // lockmw gives the token back through Release
		}
		found, ferr := s.find(ctx, e)
		switch {
		case ferr != nil:
			return nil, err
		case found:
			return e, nil
		case !s.tr.same(st):
			s.drop(e)
			return nil, errSessionChanged
		}
		s.abandon(e)
		return nil, errUnknownCreate
	}
}

// isInconsistency reports ZooKeeper's error for the operations of a
// failed Multi that did not fail themselves (ZRUNTIMEINCONSISTENCY).
func isInconsistency(err error) bool { return strings.Contains(err.Error(), "-2") }

// guard returns the path of st's guard node, an ephemeral node of st
// created once per session: while it exists, st is alive. It is created
// in st or not at all (a guard created on a later session is deleted).
func (s *zkStore) guard(ctx context.Context, st sessionState) (string, error) {
	p := s.root + "lockmw%session%" + strconv.FormatInt(st.id, 16)
	s.mu.Lock()
	ok := s.guarded == st.epoch
	s.mu.Unlock()
	if ok {
		return p, nil
	}
	_, err := s.do(ctx, "create", p, func() error {
		_, err := s.conn.Create(p, nil, zk.FlagEphemeral, s.acl)
		return err
	})
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return "", err
	}
	out := make(chan *zk.Stat, 1)
	_, err = s.do(ctx, "exists", p, func() error {
		_, stat, err := s.conn.Exists(p)
		out <- stat
		return err
	})
	if err != nil {
		return "", err
	}
	if stat := <-out; stat == nil || stat.EphemeralOwner != st.id || !s.tr.same(st) {
		if stat != nil && stat.EphemeralOwner != 0 && stat.EphemeralOwner != st.id {
			_, _ = s.do(ctx, "delete", p, func() error { return s.conn.Delete(p, -1) })
		}
		return "", errSessionChanged
	}
	s.mu.Lock()
	s.guarded = st.epoch
	s.mu.Unlock()
	return p, nil
}

// find looks for the node of e, whose create's outcome is unknown, by its
// token. A node carrying the token whose ephemeral owner is not e's
// session (the create went out on a later session) is deleted, never
// taken.
func (s *zkStore) find(ctx context.Context, e *entry) (bool, error) {
	var children []string
	_, err := s.do(ctx, "children", e.parent, func() error {
		var err error
		children, _, err = s.conn.Children(e.parent)
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	want := nodePrefix(e.token)
	for _, c := range children {
		if !strings.HasPrefix(c, want) {
			continue
		}
		p := e.parent + "/" + c
		var (
			ok   bool
			stat *zk.Stat
		)
		if _, err := s.do(ctx, "exists", p, func() error {
			var err error
			ok, stat, err = s.conn.Exists(p)
			return err
		}); err != nil {
			return false, err
		}
		if !ok {
			continue
		}
		if stat.EphemeralOwner == e.sess.id && s.tr.same(e.sess) {
			s.mu.Lock()
			e.name, e.unknown, e.fence = c, false, stat.Czxid
			s.mu.Unlock()
			return true, nil
		}
		// Not e's session (CURATOR-498): never treated as held.
		_, _ = s.do(ctx, "delete", p, func() error { return s.conn.Delete(p, -1) })
	}
	return false, nil
}

// position is where an entry stands in its lock's queue.
type position struct {
	pred  string    // the node just before it; "" when first
	czxid int64     // the entry's node's czxid: its fence
	sent  time.Time // send time of the confirmed reads
}

// position reads e's parent's children after e's create: one request
// when e's fence (its node's czxid) is known from the create's answer;
// else the node's stat too (two requests, one round trip), for the fence.
func (s *zkStore) position(ctx context.Context, e *entry) (position, error) {
	own, ok := parseNode(e.name)
	if !ok {
		return position{}, errEntryGone
	}
	s.mu.Lock()
	fence := e.fence
	s.mu.Unlock()
	p := e.parent + "/" + e.name
	var (
		wg                sync.WaitGroup
		children          []string
		exists            = true
		stat              *zk.Stat
		childErr, exErr   error
		childSent, exSent time.Time
	)
	if fence == 0 {
		wg.Go(func() {
			exSent, exErr = s.do(ctx, "exists", p, func() error {
				var err error
				exists, stat, err = s.conn.Exists(p)
				return err
			})
		})
	}
	childSent, childErr = s.do(ctx, "children", e.parent, func() error {
		var err error
		children, _, err = s.conn.Children(e.parent)
		return err
	})
	wg.Wait()
	switch {
	case childErr != nil && !errors.Is(childErr, zk.ErrNoNode):
		return position{}, childErr
	case exErr != nil:
		return position{}, exErr
	case !s.tr.same(e.sess):
		return position{}, errSessionChanged
	case !exists || errors.Is(childErr, zk.ErrNoNode) || !slices.Contains(children, e.name):
		return position{}, errEntryGone
	case stat != nil && stat.EphemeralOwner != e.sess.id:
		return position{}, errEntryGone // cannot be: its name is token's
	}
	s.sweep(ctx, e.parent, children)
	sent := childSent
	if stat != nil {
		fence = stat.Czxid
		s.mu.Lock()
		e.fence = fence
		s.mu.Unlock()
		if exSent.Before(sent) {
			sent = exSent
		}
	}
	pred, second, below := predecessors(children, own)
	s.mu.Lock()
	e.head, e.pred, e.second = "", pred, second
	if below == 1 {
		e.head = pred
	}
	s.mu.Unlock()
	return position{pred: pred, czxid: fence, sent: sent}, nil
}

// takeAlone returns e's holding when its create's answer showed its node
// as the parent's only child: first at that transaction, dated from the
// create's send time (a request answered in e's session), fenced by the
// node's czxid. It reports it once.
func (s *zkStore) takeAlone(e *entry) (position, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.alone.IsZero() {
		return position{}, false
	}
	pos := position{czxid: e.fence, sent: e.alone}
	e.alone = time.Time{}
	e.head, e.pred, e.second = "", "", ""
	return pos, true
}

// sweep deletes nodes of abandoned creates found among children, and
// forgets abandoned creates of ended sessions.
func (s *zkStore) sweep(ctx context.Context, parent string, children []string) {
	s.mu.Lock()
	if len(s.abandoned) == 0 {
		s.mu.Unlock()
		return
	}
	cur := s.tr.now()
	var doomed []string
	for tok, e := range s.abandoned {
		if e.sess.epoch != cur.epoch {
			delete(s.abandoned, tok)
			continue
		}
		if e.parent != parent {
			continue
		}
		for _, c := range children {
			if strings.HasPrefix(c, nodePrefix(tok)) {
				doomed = append(doomed, parent+"/"+c)
				delete(s.abandoned, tok)
			}
		}
	}
	s.mu.Unlock()
	for _, p := range doomed {
		_, _ = s.do(ctx, "delete", p, func() error { return s.conn.Delete(p, -1) })
	}
}

// makeParent creates parent as a container node, which ZooKeeper deletes
// once it is empty; on servers without containers, a persistent node that
// releases delete when empty.
func (s *zkStore) makeParent(ctx context.Context, parent string) error {
	s.mu.Lock()
	noContain := s.noContain
	s.mu.Unlock()
	if !noContain {
		_, err := s.do(ctx, "create", parent, func() error {
			_, err := s.conn.CreateContainer(parent, nil, zk.FlagContainer, s.acl)
			return err
		})
		switch {
		case err == nil, errors.Is(err, zk.ErrNodeExists):
			return nil
		case errors.Is(err, zk.ErrNoNode):
			return errors.New("zookeeper: the root node " + strings.TrimSuffix(s.root, "/") + " does not exist: create it, or change zookeeper.Config.Root")
		case !strings.Contains(err.Error(), "-6"): // ZUNIMPLEMENTED
			return err
		}
		s.mu.Lock()
		s.noContain = true
		s.mu.Unlock()
	}
	_, err := s.do(ctx, "create", parent, func() error {
		_, err := s.conn.Create(parent, nil, 0, s.acl)
		return err
	})
	if err == nil || errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return err
}

// dropParent deletes an empty persistent parent, on servers without
// container nodes (which delete empty containers themselves).
func (s *zkStore) dropParent(parent string) {
	s.mu.Lock()
	noContain := s.noContain
	s.mu.Unlock()
	if !noContain {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = s.do(ctx, "delete", parent, func() error { return s.conn.Delete(parent, -1) })
}

// giveUp deletes e's node after a failed step, in the background and
// bounded; lockmw's own give-back (Release) retries what this misses.
func (s *zkStore) giveUp(e *entry) {
	s.mu.Lock()
	name := e.name
	s.mu.Unlock()
	if name == "" {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.tr.now().timeout)
		defer cancel()
		p := e.parent + "/" + name
		if _, err := s.do(ctx, "delete", p, func() error { return s.conn.Delete(p, -1) }); err == nil || errors.Is(err, zk.ErrNoNode) {
			s.drop(e)
		}
	}()
}

// drop forgets e.
func (s *zkStore) drop(e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[e.token] == e {
		delete(s.held, e.token)
	}
	if s.abandoned[e.token] == e {
		delete(s.abandoned, e.token)
	}
	if e.timer != nil {
		e.timer.Stop()
	}
}

// abandon moves e, a create whose outcome is unknown and whose node was
// not found, to the abandoned creates.
func (s *zkStore) abandon(e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[e.token] == e {
		delete(s.held, e.token)
	}
	s.abandoned[e.token] = e
}
