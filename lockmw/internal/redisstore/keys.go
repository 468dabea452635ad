package redisstore

import (
	"github.com/lockmw/lockmw/lockmw/internal/store"
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
