package redisstore

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
	"github.com/redis/go-redis/v9"
)

// This file is the Redis stores' store.Inspector: a lock's state read in
// one script (inspect.lua), the holder description kept beside a lock
// (describe.lua), and the listing of a prefix's locks by SCAN.
//
// What Inspect reports, and how exactly:
//   - Held, TTL: the lock key and its PTTL (Exact). Under Redlock: held
//     when a majority of the masters hold it for one token; TTL is what is
//     left until fewer than a majority do (Exact, by each master's clock).
//   - Fence: the lock's fence counter, which a grant may move one past the
//     holder's fence to reserve the next hand-over (AtMost; under Redlock
//     the highest counter of the masters).
//   - Holder, Since: from the holder info key (lock key + ":i"), written
//     after each acquisition of a Locker given WithHolderInfo, only while
//     its token holds the lock, with the server's TIME; extended by each
//     renewal, expiring with the lock's PTTL. Shown only while its token
//     is the lock's (Exact); Unknown otherwise, and without the option.
//   - Waiters: the queue's entries, with the first waiter's entry that
//     the lock's value may carry (Exact as a count of entries: one entry
//     may stand for several waiters of one Locker, and an entry of a
//     process that died stays until a grant skips it or the queue
//     expires). Under Redlock, the first master's wake queue. FairWaiters:
//     Unknown (entries do not say their mode).

// infoKey is the holder info key of the lock whose Redis key is lock: the
// same hash tag, a suffix no other name of a lock ends with.
func infoKey(lock string) string { return lock + ":i" }

// UseHolderInfo keeps info beside each lock this Locker takes.
func (b *Store) UseHolderInfo(info string) { b.holderInfo = info }

// describe writes the holder info of token's holding of the lock whose
// Redis key is lock, on c.
func describe(ctx context.Context, c processor, lock, token, info string) error {
	return evalOnce(ctx, c, describeScript, []string{lock, infoKey(lock)}, token, info).Err()
}

// describingHost is the Host of a Locker given WithHolderInfo: each lease
// the policy makes from a hand-over or a grant gets its holder info
// written (Store.Acquire writes that of a plain attempt).
type describingHost struct {
	store.Host
	c    processor
	lock func(store.Key) string
	info string
}

// NewLease makes the lease and describes its holding.
func (h describingHost) NewLease(a *store.Acquisition, token string, fence uint64, validFrom time.Time, fair bool, state any) (store.Lease, error) {
	s, err := h.Host.NewLease(a, token, fence, validFrom, fair, state)
	if err == nil {
		_ = describe(a.Ctx, h.c, h.lock(a.Key), token, h.info)
	}
	return s, err
}

// NewEarlyLease makes the lease and describes its holding.
func (h describingHost) NewEarlyLease(a *store.Acquisition, token string, fence uint64, deadline time.Time, fair bool, state any, e store.Settling) (store.Lease, error) {
	s, err := h.Host.NewEarlyLease(a, token, fence, deadline, fair, state, e)
	if err == nil {
		_ = describe(a.Ctx, h.c, h.lock(a.Key), token, h.info)
	}
	return s, err
}

// lockState is what inspect.lua read on one server.
type lockState struct {
	owner      string // the holder's token; "" when free
	next       bool   // the lock's value carries the first waiter's entry
	pttl       int64
	counter    uint64
	hasCounter bool
	queued     int64
	infoToken  string
	infoSince  int64 // ms since the epoch, by the server's clock
	info       string
}

// parseState reads inspect.lua's reply.
func parseState(v any) (lockState, error) {
	vals, ok := v.([]any)
	if !ok || len(vals) != 5 {
		return lockState{}, fmt.Errorf("inspect.lua answered %v, want 5 values", v)
	}
	var s lockState
	if owner, ok := vals[0].(string); ok {
		tok, rest, _ := strings.Cut(owner, "+")
		s.owner, s.next = tok, rest != ""
	}
	s.pttl, _ = vals[1].(int64)
	if c, ok := vals[2].(string); ok {
		if n, err := strconv.ParseUint(c, 10, 64); err == nil {
			s.counter, s.hasCounter = n, true
		}
	}
	s.queued, _ = vals[3].(int64)
	if in, ok := vals[4].(string); ok {
		tok, rest, ok1 := strings.Cut(in, " ")
		ms, info, ok2 := strings.Cut(rest, " ")
		if n, err := strconv.ParseInt(ms, 10, 64); ok1 && ok2 && err == nil {
			s.infoToken, s.infoSince, s.info = tok, n, info
		}
	}
	return s, nil
}

// inspection is what s says of the lock named name.
func (s lockState) inspection(name string) store.Inspection {
	in := store.Inspection{Name: name}
	if s.hasCounter {
		in.Fence = store.Reading[uint64]{Value: s.counter, Is: store.AtMost}
	}
	waiters := int(s.queued)
	if s.next {
		waiters++
	}
	in.Waiters = store.Reading[int]{Value: waiters, Is: store.Exact}
	if s.owner == "" || s.pttl == -2 {
		return in
	}
	in.Held = true
	if s.pttl > 0 {
		in.TTL = store.Reading[time.Duration]{Value: time.Duration(s.pttl) * time.Millisecond, Is: store.Exact}
	}
	if s.infoToken != "" && s.infoToken == s.owner {
		in.Holder = store.Reading[string]{Value: s.info, Is: store.Exact}
		in.Since = store.Reading[time.Time]{Value: time.UnixMilli(s.infoSince), Is: store.Exact}
	}
	return in
}

// inspectKeys are inspect.lua's keys for the lock r.
func inspectKeys(r lockRef) []string {
	return []string{r.lock, r.fence, r.queue, infoKey(r.lock)}
}

// Inspect reads k's lock in one script.
func (b *Store) Inspect(ctx context.Context, k store.Key) (store.Inspection, error) {
	v, err := evalOnce(ctx, b.client, inspectScript, inspectKeys(b.names.ref(k))).Result()
	if err != nil {
		return store.Inspection{}, err
	}
	s, err := parseState(v)
	if err != nil {
		return store.Inspection{}, err
	}
	return s.inspection(k.Name), nil
}

// List lists the held locks under prefix by SCAN (on each master of a
// Cluster, in the order of their addresses), at most scansPerPage SCAN
// calls of scanCount keys per page, then reads each lock found with
// inspect.lua in one pipeline. A page may hold fewer locks than limit,
// even none, while more follow.
func (b *Store) List(ctx context.Context, prefix, cursor string, limit int) ([]store.Inspection, string, error) {
	nodes, err := scanNodes(ctx, b.client)
	if err != nil {
		return nil, "", err
	}
	found, next, err := scanLocks(ctx, nodes, prefix, cursor, limit, b.names)
	if err != nil {
		return nil, "", err
	}
	names := make([]store.Key, len(found))
	pipe := b.client.Pipeline()
	cmds := make([]*redis.Cmd, len(found))
	for i, f := range found {
		names[i], _ = b.names.keyOf(prefix, f.Key)
		cmds[i] = inspectScript.Eval(ctx, pipe, inspectKeys(b.names.ref(names[i])))
	}
	if len(cmds) > 0 {
		_, _ = pipe.Exec(ctx)
	}
	page := make([]store.Inspection, 0, len(names))
	for i, c := range cmds {
		v, err := c.Result()
		if err != nil {
			return nil, "", err
		}
		s, err := parseState(v)
		if err != nil {
			return nil, "", err
		}
		if in := s.inspection(names[i].Name); in.Held {
			page = append(page, in)
		}
	}
	return page, next, nil
}

// A listing's SCAN calls: COUNT per call, and calls per page, so that a
// page costs Redis a bounded amount of work however many keys (say, idle
// fence counters) share the prefix.
const (
	scanCount    = 1000
	scansPerPage = 8
)

// scanNode is one server a listing scans, named by its address.
type scanNode struct {
	addr   string
	client redis.UniversalClient
}

// scanNodes returns the servers that hold client's keys: its masters, by
// address, on a Cluster; else client itself.
func scanNodes(ctx context.Context, client redis.UniversalClient) ([]scanNode, error) {
	cc, ok := client.(*redis.ClusterClient)
	if !ok {
		return []scanNode{{client: client}}, nil
	}
	var mu sync.Mutex
	var nodes []scanNode
	err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		nodes = append(nodes, scanNode{addr: c.Options().Addr, client: c})
		mu.Unlock()
		return nil
	})
	slices.SortFunc(nodes, func(a, b scanNode) int { return strings.Compare(a.addr, b.addr) })
	return nodes, err
}

// listCursor is where a listing goes on: the server (its address) and
// SCAN cursor, or Done when every server was scanned, and the lock keys
// found but not yet listed. It travels as "r1." and the base64 of its
// JSON.
type listCursor struct {
	Node    string     `json:"n,omitempty"`
	Scan    uint64     `json:"c,omitempty"`
	Done    bool       `json:"d,omitempty"`
	Pending []foundKey `json:"p,omitempty"`
}

// foundKey is a lock key a listing found, and the index of the node it
// found it on.
type foundKey struct {
	Node int    `json:"i"`
	Key  string `json:"k"`
}

const cursorMark = "r1."

func (c listCursor) encode() string {
	b, _ := json.Marshal(c)
	return cursorMark + base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (listCursor, error) {
	var c listCursor
	if s == "" {
		return c, nil
	}
	rest, ok := strings.CutPrefix(s, cursorMark)
	if !ok {
		return c, store.ErrBadCursor
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return c, fmt.Errorf("%w: %w", store.ErrBadCursor, err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%w: %w", store.ErrBadCursor, err)
	}
	return c, nil
}

// globEscape escapes the characters SCAN's MATCH treats specially.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// scanLocks returns up to limit lock keys that SCAN finds under prefix on
// nodes, from cursor, and the next cursor ("" after the last). A lock key
// is a name under prefix that ends with '}' and that names.keyOf reads.
func scanLocks(ctx context.Context, nodes []scanNode, prefix, cursor string, limit int, names naming) ([]foundKey, string, error) {
	cur, err := decodeCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	i := len(nodes)
	if !cur.Done {
		i = slices.IndexFunc(nodes, func(n scanNode) bool { return n.addr >= cur.Node })
		if i < 0 {
			i = len(nodes)
		} else if nodes[i].addr != cur.Node {
			cur.Scan = 0 // that master left the Cluster: go on with the next
		}
	}
	found := cur.Pending
	match := globEscape(prefix) + "*}"
	count := int64(max(limit, 100))
	for scans := 0; len(found) < limit && i < len(nodes) && scans < scansPerPage; scans++ {
		keys, next, err := nodes[i].client.Scan(ctx, cur.Scan, match, count).Result()
		if err != nil {
			return nil, "", err
		}
		for _, key := range keys {
			if _, ok := names.keyOf(prefix, key); ok {
				found = append(found, foundKey{Node: i, Key: key})
			}
		}
		cur.Scan = next
		if next == 0 {
			i++
		}
	}
	n := min(limit, len(found))
	out, rest := found[:n], found[n:]
	if i >= len(nodes) && len(rest) == 0 {
		return out, "", nil
	}
	next := listCursor{Scan: cur.Scan, Pending: rest, Done: i >= len(nodes)}
	if !next.Done {
		next.Node = nodes[i].addr
	} else {
		next.Scan = 0
	}
	return out, next.encode(), nil
}

var (
	_ store.Inspector = (*Store)(nil)
	_ store.Inspector = (*Redlock)(nil)
)
