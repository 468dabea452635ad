package redisstore

import (
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/lockmw/lockmw/lockmw/internal/errs"
	"github.com/lockmw/lockmw/lockmw/internal/store"
	"github.com/redis/go-redis/v9"
)

// lockKeys are the Redis keys and channels of one lock. They share the hash
// tag {key}, so on Redis Cluster they live in one slot and one script can
// touch them all (and sharded pub/sub reaches the node that holds them).
type lockKeys struct {
	lock   string // the owner's token, with the lease's expiry
	fence  string // the fencing counter; expires after the retention (keyExpiry)
	queue  string // fair waiters in arrival order
	notify string // channel: the lock was released (default-mode waiters)
	grants string // channel prefix: + a Locker id, the lock was handed to one of its fair waiters
}

func newLockKeys(prefix, key string) lockKeys {
	// One allocation for all five: each name is a slice of it.
	all := prefix + "{" + key + "}:fence" + prefix + "{" + key + "}:q" + prefix + "{" + key + "}:n" + prefix + "{" + key + "}:g:"
	return keysIn(all, len(prefix)+len(key)+2)
}

// keysIn slices the names out of all, which holds the fence counter, queue,
// notification channel and grant prefix names in a row, for a lock key of
// n bytes.
func keysIn(all string, n int) lockKeys {
	fence := all[:n+len(":fence")]
	rest := all[len(fence):]
	queue := rest[:n+len(":q")]
	rest = rest[len(queue):]
	notify := rest[:n+len(":n")]
	return lockKeys{
		lock:   all[:n],
		fence:  fence,
		queue:  queue,
		notify: notify,
		grants: rest[len(notify):],
	}
}

// lockRef is one lock as the Redis stores name it: its store.Key and its
// Redis names, derived once per request.
type lockRef struct {
	store.Key
	lockKeys
}

// newLockRef returns the lock named key under prefix.
func newLockRef(prefix, key string) lockRef {
	return lockRef{Key: store.Key{Prefix: prefix, Name: key}, lockKeys: newLockKeys(prefix, key)}
}

// keyOfBase returns the lock whose Redis lock key is base (as Redis
// channel names carry it), for a Locker with prefix: base is
// prefix+"{"+key+"}" (newLockKeys). ok is false for a name the Locker did
// not make. It allocates nothing: the Key's Name is a slice of base.
func keyOfBase(prefix, base string) (k store.Key, ok bool) {
	if len(base) < len(prefix)+2 || base[:len(prefix)] != prefix || base[len(prefix)] != '{' || base[len(base)-1] != '}' {
		return store.Key{}, false
	}
	return store.Key{Prefix: prefix, Name: base[len(prefix)+1 : len(base)-1]}, true
}

// naming is how a store names locks: the plain names above (newLockKeys),
// or, on a Redis Cluster (cluster), Cluster names for the keys whose plain
// names share no slot.
//
// Redis Cluster hashes a name by its hash tag, the text between its first
// '{' and the first '}' after it; when that text is empty, by the whole
// name. The plain names prefix+"{K}"+suffix of a key K that starts with
// '}' ("}", "}x", "}{a}"), under a prefix without '{', have the empty tag
// "{}", so they land in different slots and every script naming two of
// them is refused (CROSSSLOT): no version of lockmw could lock such a key
// on a Cluster, and none wrote its plain names there (every write to a
// lock's names is a script naming the lock key and another, but RPUSHX,
// which appends only to a queue such a script made). (A prefix with a '{'
// sets the tag of every name by itself: the plain names of every key then
// share a slot, or, for a prefix whose first '{' is followed by '}', none
// does; either way nothing after the prefix changes it.) On a Cluster such
// a key is named
//
//	prefix+"#{"+H+"}{"+K+"}"+suffix
//
// (clusterBase), H being the CRC-32 (IEEE) of K in 8 hex digits: the tag
// H is never empty, so the key's names share its slot, and H spreads such
// keys over the slots. No other lock has these names: a plain name starts
// with prefix+"{", a Cluster name with prefix+"#"; two Cluster names differ
// where their keys do (H is a function of K, and, as for plain names, the
// suffix is read from the name's end: "}" for the lock, "}:fence",
// "}:q"). The names of every other key, and every name on one Redis or
// under Redlock, are the plain ones, unchanged: the Lockers of one
// deployment agree on every name whichever release they run. They agree
// on which naming they use because they see the same keyspace: a Cluster
// is reached through a *redis.ClusterClient, one Redis (standalone or
// Sentinel) through a *redis.Client, and the two never share a keyspace. A
// ClusterClient given ClusterSlots of its own may route to servers that
// are not a Cluster, where plain names of '}' keys work (and did before):
// it keeps plain names.
type naming struct{ cluster bool }

// clusterNaming reports whether client reaches a Redis Cluster whose
// slots Redis reports (see naming).
func clusterNaming(client redis.UniversalClient) naming {
	cc, ok := client.(*redis.ClusterClient)
	return naming{cluster: ok && cc.Options().ClusterSlots == nil}
}

// checkPrefix refuses, on a Cluster, a prefix whose first '{' is followed
// by '}': that empty hash tag comes first in every name, so Redis would
// hash each name whole and refuse every script (CROSSSLOT), whatever the
// key.
func (n naming) checkPrefix(prefix string) error {
	i := strings.IndexByte(prefix, '{')
	if !n.cluster || i < 0 || !strings.HasPrefix(prefix[i:], "{}") {
		return nil
	}
	return fmt.Errorf("%w: WithPrefix(%q): on a Redis Cluster its \"{}\" is an empty hash tag, so the keys of a lock would land in different slots and Redis refuse every request (CROSSSLOT): put text between the braces, or leave them out", errs.ErrInvalidOption, prefix)
}

// ownTag reports whether the plain names of key under prefix have an empty
// hash tag, so that a Cluster names the key by clusterBase.
func ownTag(prefix, key string) bool {
	return key != "" && key[0] == '}' && strings.IndexByte(prefix, '{') < 0
}

// clusterBase is the Cluster name of the lock key of key under prefix,
// for a key whose plain names have an empty hash tag (ownTag).
func clusterBase(prefix, key string) string {
	return prefix + "#{" + clusterTag(key) + "}{" + key + "}"
}

// clusterTag is the hash tag of clusterBase: key's CRC-32 (IEEE) in 8
// lower-case hex digits.
func clusterTag(key string) string {
	const digits = "0123456789abcdef"
	h := crc32.ChecksumIEEE([]byte(key))
	var b [8]byte
	for i := range b {
		b[7-i] = digits[h>>(4*i)&15]
	}
	return string(b[:])
}

// keys returns the names of the lock key under prefix.
func (n naming) keys(prefix, key string) lockKeys {
	if !n.cluster || !ownTag(prefix, key) {
		return newLockKeys(prefix, key)
	}
	base := clusterBase(prefix, key)
	return keysIn(base+":fence"+base+":q"+base+":n"+base+":g:", len(base))
}

// ref returns the lock k with its names.
func (n naming) ref(k store.Key) lockRef {
	return lockRef{Key: k, lockKeys: n.keys(k.Prefix, k.Name)}
}

// lockKey is the Redis key of k's lock.
func (n naming) lockKey(k store.Key) string {
	if !n.cluster || !ownTag(k.Prefix, k.Name) {
		return lockKeyOf(k)
	}
	return clusterBase(k.Prefix, k.Name)
}

// keyOf returns the lock whose lock key is base, for a Locker with prefix
// (keyOfBase, and the Cluster names); ok is false for a name this naming
// does not make.
func (n naming) keyOf(prefix, base string) (k store.Key, ok bool) {
	const head, hexLen = "#{", 8
	if !n.cluster {
		return keyOfBase(prefix, base)
	}
	if rest, found := strings.CutPrefix(base, prefix); found && strings.HasPrefix(rest, head) {
		// rest is "#{" H "}{" K "}".
		i := len(head) + hexLen
		if len(rest) < i+4 || rest[i:i+2] != "}{" || rest[len(rest)-1] != '}' {
			return store.Key{}, false
		}
		key := rest[i+2 : len(rest)-1]
		if !ownTag(prefix, key) || rest[len(head):i] != clusterTag(key) {
			return store.Key{}, false
		}
		return store.Key{Prefix: prefix, Name: key}, true
	}
	k, ok = keyOfBase(prefix, base)
	if ok && ownTag(prefix, k.Name) {
		return store.Key{}, false // a Cluster names such a key by clusterBase
	}
	return k, ok
}
