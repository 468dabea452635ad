package etcd

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is the store's read-only side (store.Inspector): Inspect and
// List read lock directories and the leases of their holders' keys, and
// the holder description a Locker writes as the value of its keys. What
// they report, and how exactly, is in the package documentation
// ("Inspecting").

var _ store.Inspector = (*etcdStore)(nil)

// holderTag starts the value of a key whose Locker gave a holder
// description: the value is holderTag + description. A value without it
// ("", what Lockers without a description and every earlier release
// write) describes no holder. A later format takes another tag, which
// this release reads as no description.
const holderTag = "lockmw-holder/1 "

// ttlReads is how many TimeToLive requests List sends at once.
const ttlReads = 8

// UseHolderInfo makes the values of the store's keys carry info. The
// Locker calls it before its first acquisition; "" keeps the values empty.
func (s *etcdStore) UseHolderInfo(info string) {
	if info != "" {
		s.value = holderTag + info
	}
}

// holderOf is the description in kv's value, Unknown when it has none.
func holderOf(kv *mvccpb.KeyValue) store.Reading[string] {
	if info, ok := strings.CutPrefix(string(kv.Value), holderTag); ok && info != "" {
		return store.Reading[string]{Value: info, Is: store.Exact}
	}
	return store.Reading[string]{}
}

// Inspect reads k's directory: its key of lowest create revision, with its
// value, and the number of its keys (one range read: etcd counts the keys
// of a range whatever its limit); then, when the lock is held, the time
// left of that key's etcd lease (TimeToLive, a second request, which a
// member that does not lead forwards to the leader).
func (s *etcdStore) Inspect(ctx context.Context, k store.Key) (store.Inspection, error) {
	resp, err := s.c.Get(ctx, dir(k), clientv3.WithFirstCreate()...)
	if err != nil {
		return store.Inspection{}, err
	}
	if len(resp.Kvs) == 0 {
		return store.Inspection{
			Name: k.Name,
			// Every fence of an earlier holding is a revision up to this
			// one, and the next holder's is above it.
			Fence: store.Reading[uint64]{Value: uint64(resp.Header.Revision), Is: store.AtMost},
		}, nil
	}
	in := held(k.Name, resp.Kvs[0], resp.Count)
	if in.TTL, err = s.leaseTTL(ctx, resp.Kvs[0].Lease); err != nil {
		return store.Inspection{}, err
	}
	return in, nil
}

// held is the state of the lock name whose directory holds n keys, the
// lowest of them (by create revision) kv: the holder's.
func held(name string, kv *mvccpb.KeyValue, n int64) store.Inspection {
	return store.Inspection{
		Name:    name,
		Held:    true,
		Fence:   store.Reading[uint64]{Value: uint64(kv.CreateRevision), Is: store.Exact},
		Holder:  holderOf(kv),
		Waiters: store.Reading[int]{Value: int(n - 1), Is: store.Exact},
	}
}

// leaseTTL is what is left of etcd lease id, by the leader's clock. etcd
// answers in whole seconds, cut down (int64 of the seconds left), so what
// is left is below the answer plus a second: that is reported, AtMost. A
// lease gone since the read has nothing left; a key under no lease (none
// of the store's) has no TTL: Unknown.
func (s *etcdStore) leaseTTL(ctx context.Context, id int64) (store.Reading[time.Duration], error) {
	if id == 0 {
		return store.Reading[time.Duration]{}, nil
	}
	resp, err := s.c.TimeToLive(ctx, clientv3.LeaseID(id))
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return store.Reading[time.Duration]{Is: store.AtMost}, nil
	case err != nil:
		return store.Reading[time.Duration]{}, err
	case resp.TTL < 0:
		return store.Reading[time.Duration]{Is: store.AtMost}, nil
	}
	return store.Reading[time.Duration]{Value: time.Duration(resp.TTL+1) * time.Second, Is: store.AtMost}, nil
}

// List reads the keys under prefix from the cursor's key on, at most
// 2*limit of them (a range read with a limit, the values included), and
// reports the locks whose directories it read whole, at most limit; when
// the read holds only part of one directory (a long queue), it reads
// that directory as Inspect does instead. Then it reads the TTL of each
// distinct lease of the holders' keys (TimeToLive, ttlReads at a time).
//
// The keys of one directory are contiguous in etcd's key order: a key
// between two keys of a directory D has D as its prefix, and no other
// directory's key does, as escaped names hold no '/'. The keys under
// prefix that are not in a directory (cronlock's records) are skipped.
//
// The next page's cursor is the key its read starts from: the directory
// left out of this page, or the end of the one read alone.
func (s *etcdStore) List(ctx context.Context, prefix, cursor string, limit int) ([]store.Inspection, string, error) {
	ep := escape(prefix)
	start := ep
	if cursor != "" {
		var err error
		if start, err = readCursor(cursor, ep); err != nil {
			return nil, "", err
		}
	}
	end := clientv3.GetPrefixRangeEnd(ep)
	resp, err := s.c.Get(ctx, start, clientv3.WithRange(end), clientv3.WithLimit(int64(2*limit)))
	if err != nil {
		return nil, "", err
	}

	type group struct {
		dir string
		kvs []*mvccpb.KeyValue
	}
	var groups []group
	lastInGroup := false
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		i := strings.IndexByte(key[len(ep):], '/')
		if lastInGroup = i >= 0; !lastInGroup {
			continue
		}
		d := key[:len(ep)+i+1]
		if n := len(groups); n > 0 && groups[n-1].dir == d {
			groups[n-1].kvs = append(groups[n-1].kvs, kv)
		} else {
			groups = append(groups, group{dir: d, kvs: []*mvccpb.KeyValue{kv}})
		}
	}

	var page []store.Inspection
	var leases []int64
	add := func(d string, kv *mvccpb.KeyValue, n int64) {
		page = append(page, held(unescape(d[len(ep):len(d)-1]), kv, n))
		leases = append(leases, kv.Lease)
	}
	next := ""
	switch {
	case len(groups) > limit:
		next, groups = groups[limit].dir, groups[:limit]
	case resp.More && lastInGroup && len(groups) > 1:
		// The last directory may go on past the read.
		next, groups = groups[len(groups)-1].dir, groups[:len(groups)-1]
	case resp.More && lastInGroup:
		// One directory longer than the read: read it alone.
		d := groups[0].dir
		one, err := s.c.Get(ctx, d, clientv3.WithFirstCreate()...)
		if err != nil {
			return nil, "", err
		}
		if len(one.Kvs) > 0 {
			add(d, one.Kvs[0], one.Count)
		}
		groups = nil
		if next = clientv3.GetPrefixRangeEnd(d); next >= end && end != "\x00" {
			next = ""
		}
	case resp.More:
		next = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	for _, g := range groups {
		low := g.kvs[0]
		for _, kv := range g.kvs[1:] {
			if kv.CreateRevision < low.CreateRevision {
				low = kv
			}
		}
		add(g.dir, low, int64(len(g.kvs)))
	}
	if err := s.leaseTTLs(ctx, page, leases); err != nil {
		return nil, "", err
	}
	if next != "" {
		next = makeCursor(next)
	}
	return page, next, nil
}

// leaseTTLs sets the TTL of page[i] to what is left of lease leases[i],
// reading each distinct lease once.
func (s *etcdStore) leaseTTLs(ctx context.Context, page []store.Inspection, leases []int64) error {
	ttl := make(map[int64]store.Reading[time.Duration], len(leases))
	var ids []int64
	for _, id := range leases {
		if _, seen := ttl[id]; !seen {
			ttl[id] = store.Reading[time.Duration]{}
			ids = append(ids, id)
		}
	}
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		err error
		sem = make(chan struct{}, ttlReads)
	)
	for _, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			r, e := s.leaseTTL(ctx, id)
			mu.Lock()
			defer mu.Unlock()
			ttl[id] = r
			if e != nil && err == nil {
				err = e
			}
		})
	}
	wg.Wait()
	if err != nil {
		return err
	}
	for i, id := range leases {
		page[i].TTL = ttl[id]
	}
	return nil
}

// cursorTag starts every cursor of List: the format's version.
const cursorTag = "etcd1."

// makeCursor encodes the key a listing goes on from: cursorTag, then
// base64 of the key's CRC-32 and the key.
func makeCursor(key string) string {
	b := binary.BigEndian.AppendUint32(nil, crc32.ChecksumIEEE([]byte(key)))
	return cursorTag + base64.RawURLEncoding.EncodeToString(append(b, key...))
}

// readCursor decodes a cursor of makeCursor for a listing of the escaped
// prefix ep.
func readCursor(cursor, ep string) (string, error) {
	raw, ok := strings.CutPrefix(cursor, cursorTag)
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if !ok || err != nil || len(b) < 4 || binary.BigEndian.Uint32(b) != crc32.ChecksumIEEE(b[4:]) {
		return "", fmt.Errorf("%w: an etcd listing's cursor is %q and the base64 of a checksummed key", store.ErrBadCursor, cursorTag)
	}
	key := string(b[4:])
	if !strings.HasPrefix(key, ep) || len(key) == len(ep) {
		return "", fmt.Errorf("%w: the cursor is of a listing of another prefix", store.ErrBadCursor)
	}
	return key, nil
}

var unescaper = strings.NewReplacer("%2F", "/", "%25", "%")

// unescape undoes escape.
func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	return unescaper.Replace(s)
}
