package zookeeper

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-zookeeper/zk"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file reports locks to an operator (store.Inspector): a lock's
// state read from its parent's children and its first node, the listing
// of a prefix's locks, and the holder description kept as the data of a
// Locker's lock nodes. It only reads; doc.go, "Inspecting", says what each
// field means here.

var _ store.Inspector = (*zkStore)(nil)

// UseHolderInfo makes every lock node the store creates from now on carry
// info as its data (written by the node's create itself), so that it ends
// with the node. Without it, nodes are created with no data, as before.
func (s *zkStore) UseHolderInfo(info string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if info == "" {
		s.info = nil
		return
	}
	s.info = []byte(info)
}

// Inspect syncs the session's server with the leader, then reads k's
// parent's children, then the first lock node's data and stat: three
// requests while the lock is held, two while it is not.
func (s *zkStore) Inspect(ctx context.Context, k store.Key) (store.Inspection, error) {
	if s.tr.now().id == 0 {
		return store.Inspection{}, s.noSession()
	}
	parent := s.parentOf(k)
	if err := s.sync(ctx, parent); err != nil {
		return store.Inspection{}, err
	}
	in, _, err := s.inspectAt(ctx, parent, k.Name)
	return in, err
}

// sync makes the session's server catch up with the leader: a follower
// answers reads from what it has applied, which may be behind a holding
// another session's server has confirmed; the session's reads after the
// sync see every write committed before it.
func (s *zkStore) sync(ctx context.Context, p string) error {
	_, err := s.do(ctx, "sync", p, func() error {
		_, err := s.conn.Sync(p)
		return err
	})
	return err
}

// inspectRetries bounds the re-reads when the first node goes between the
// read of the children and the read of the node.
const inspectRetries = 4

// inspectAt reports the lock whose parent node is parent; queued says
// whether it had lock nodes (held or waited for).
func (s *zkStore) inspectAt(ctx context.Context, parent, name string) (in store.Inspection, queued bool, err error) {
	for try := 0; ; try++ {
		in = store.Inspection{Name: name}
		var (
			children []string
			pstat    *zk.Stat
		)
		_, err := s.do(ctx, "children", parent, func() error {
			var err error
			children, pstat, err = s.conn.Children(parent)
			return err
		})
		switch {
		case errors.Is(err, zk.ErrNoNode):
			return in, false, nil // never used, or idle and deleted
		case err != nil:
			return store.Inspection{}, false, err
		}
		first, n := firstNode(children)
		if n == 0 {
			// Not held. The parent's pzxid is the zxid of its last child
			// change: not below the last holder's fence (its node's
			// czxid), and below the next holder's.
			in.Fence = store.Reading[uint64]{Value: uint64(pstat.Pzxid), Is: store.AtMost}
			in.Waiters = store.Reading[int]{Is: store.Exact}
			return in, false, nil
		}
		in.Held = true
		in.Waiters = store.Reading[int]{Value: n - 1, Is: store.Exact}
		var (
			data []byte
			stat *zk.Stat
		)
		p := parent + "/" + first.name
		_, err = s.do(ctx, "get", p, func() error {
			var err error
			data, stat, err = s.conn.Get(p)
			return err
		})
		switch {
		case errors.Is(err, zk.ErrNoNode) && try < inspectRetries:
			continue // released between the two reads: read again
		case errors.Is(err, zk.ErrNoNode):
			return in, true, nil // a busy queue: held, the holder unknown
		case err != nil:
			return store.Inspection{}, false, err
		}
		in.Fence = store.Reading[uint64]{Value: uint64(stat.Czxid), Is: store.Exact}
		// The holding began at its node's creation if the node was first
		// then. It was when it is the only child and no child of the
		// parent changed since its create: the parent's pzxid (the zxid of
		// its last child change) is the node's czxid. Otherwise (waiters
		// came since, or nodes went) the holding began at or after the
		// creation. (A sequence is not a count of the parent's changes to
		// rely on: deletes move the cversion, not always the sequence.)
		since := store.Reading[time.Time]{Value: time.UnixMilli(stat.Ctime), Is: store.AtLeast}
		if len(children) == 1 && pstat.Pzxid == stat.Czxid {
			since.Is = store.Exact
		}
		in.Since = since
		if len(data) > 0 && utf8.Valid(data) {
			in.Holder = store.Reading[string]{Value: string(data), Is: store.Exact}
		}
		return in, true, nil
	}
}

// firstNode returns the lock node queued first among children, and how
// many lock nodes there are (names that are not lock nodes are ignored).
func firstNode(children []string) (first lockNode, n int) {
	for _, c := range children {
		node, ok := parseNode(c)
		if !ok {
			continue
		}
		if n == 0 || before(node.seq, first.seq) {
			first = node
		}
		n++
	}
	return first, n
}

// listIdleBudget bounds the lock parents without lock nodes (idle: a
// container the server has not deleted yet) that one page of List reads
// beyond its limit; a page may then hold fewer locks than its limit, even
// none, with a cursor for the rest.
const listIdleBudget = 256

// listParallel bounds the reads List has in flight at once.
const listParallel = 32

// List syncs the session's server with the leader, reads the root's
// children (one response, every name under the root), keeps the lock parents of prefix after the cursor's name in byte
// order, and inspects them in that order, at most limit + listIdleBudget
// of them, until limit are held or waited for.
func (s *zkStore) List(ctx context.Context, prefix, cursor string, limit int) ([]store.Inspection, string, error) {
	ep := escape(prefix)
	after := ""
	if cursor != "" {
		var err error
		if after, err = decodeCursor(cursor, ep); err != nil {
			return nil, "", err
		}
	}
	if s.tr.now().id == 0 {
		return nil, "", s.noSession()
	}
	root := strings.TrimSuffix(s.root, "/")
	if root == "" {
		root = "/"
	}
	if err := s.sync(ctx, root); err != nil {
		return nil, "", err
	}
	var names []string
	_, err := s.do(ctx, "children", root, func() error {
		var err error
		names, _, err = s.conn.Children(root)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	type cand struct{ node, key string }
	var cands []cand
	for _, n := range names {
		if n <= after || !strings.HasPrefix(n, ep) || (s.root == "/" && n == "zookeeper") {
			continue
		}
		if key, ok := unescape(n[len(ep):]); ok {
			cands = append(cands, cand{n, key})
		}
	}
	slices.SortFunc(cands, func(a, b cand) int { return strings.Compare(a.node, b.node) })

	var page []store.Inspection
	i, budget := 0, limit+listIdleBudget
	for i < len(cands) && len(page) < limit && budget > 0 {
		// No more reads than locks still wanted: the page never finds
		// more than limit, so the cursor is the last name read.
		window := cands[i:min(len(cands), i+limit-len(page), i+budget)]
		got := make([]store.Inspection, len(window))
		queued := make([]bool, len(window))
		errs := make([]error, len(window))
		var wg sync.WaitGroup
		sem := make(chan struct{}, listParallel)
		for j, c := range window {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				got[j], queued[j], errs[j] = s.inspectAt(ctx, s.root+c.node, c.key)
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, "", err
		}
		for j := range window {
			if queued[j] {
				page = append(page, got[j])
			}
		}
		i += len(window)
		budget -= len(window)
	}
	next := ""
	if i < len(cands) {
		next = encodeCursor(ep, cands[i-1].node)
	}
	return page, next, nil
}

// unescape reverses escape on a lock parent's name (after the prefix):
// false for a name escape never writes (a '%' not followed by two
// upper-case hex digits, as in the guard and cron record names, or no
// key at all).
func unescape(s string) (string, bool) {
	if s == "" {
		return "", false
	}
	if !strings.Contains(s, "%") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		hi, ok1 := unhex(s[i+1])
		lo, ok2 := unhex(s[i+2])
		if !ok1 || !ok2 {
			return "", false
		}
		b.WriteByte(hi<<4 | lo)
		i += 2
	}
	return b.String(), true
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// cursorVersion starts every cursor List makes.
const cursorVersion = "zk1."

// encodeCursor is the cursor resuming a listing of the escaped prefix ep
// after the lock parent node: its name, with a checksum over ep and the
// name, so that a cursor of another prefix's listing, or a changed one, is
// refused.
func encodeCursor(ep, node string) string {
	b := binary.BigEndian.AppendUint32(nil, cursorSum(ep, node))
	return cursorVersion + base64.RawURLEncoding.EncodeToString(append(b, node...))
}

// decodeCursor returns the node name of a cursor encodeCursor made for the
// escaped prefix ep.
func decodeCursor(cursor, ep string) (string, error) {
	rest, ok := strings.CutPrefix(cursor, cursorVersion)
	if !ok {
		return "", fmt.Errorf("zookeeper: the cursor does not start with %q: %w", cursorVersion, store.ErrBadCursor)
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil || len(b) < 5 {
		return "", fmt.Errorf("zookeeper: the cursor is not encoded as this store's: %w", store.ErrBadCursor)
	}
	node := string(b[4:])
	if binary.BigEndian.Uint32(b) != cursorSum(ep, node) || !strings.HasPrefix(node, ep) {
		return "", fmt.Errorf("zookeeper: the cursor is not one of a listing of this prefix: %w", store.ErrBadCursor)
	}
	return node, nil
}

func cursorSum(ep, node string) uint32 {
	return crc32.ChecksumIEEE([]byte(ep + "\x00" + node))
}
