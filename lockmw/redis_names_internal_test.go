package lockmw

import "github.com/lockmw/lockmw/lockmw/internal/store"

// lockKeys are the Redis names of one lock, spelled out here as the Redis
// store makes them (package lockmw/internal/redisstore, whose TestLockKeys
// pins them), for the internal tests that read or write a lock's keys and
// channels in Redis.
type lockKeys struct {
	lock   string // the owner's token
	fence  string // the fencing counter
	queue  string // fair waiters (Redlock: the wait queue, on the first master)
	notify string // channel: the lock was released
	grants string // channel prefix: + a Locker id
}

func newLockKeys(prefix, key string) lockKeys {
	base := prefix + "{" + key + "}"
	return lockKeys{lock: base, fence: base + ":fence", queue: base + ":q", notify: base + ":n", grants: base + ":g:"}
}

// lockRef is one lock: its store.Key and its Redis names.
type lockRef struct {
	store.Key
	lockKeys
}

func newLockRef(prefix, key string) lockRef {
	return lockRef{Key: store.Key{Prefix: prefix, Name: key}, lockKeys: newLockKeys(prefix, key)}
}

// lockKeyOf is the Redis key of k's lock.
func lockKeyOf(k store.Key) string { return newLockKeys(k.Prefix, k.Name).lock }
