package lockmw

import "fmt"

// lockKeys are the Redis keys and channels of one lock. They share the hash
// tag {key}, so on Redis Cluster they live in one slot and one script can
// touch them all (and sharded pub/sub reaches the node that holds them).
type lockKeys struct {
	lock   string // the owner's token, with the lease's expiry
	fence  string // the fencing counter; never expires
	queue  string // fair waiters in arrival order
	notify string // channel: the lock was released (default-mode waiters)
	grants string // channel prefix: + a Locker id, the lock was handed to one of its fair waiters
}

func newLockKeys(prefix, key string) lockKeys {
	return newLockKeysFromBase(prefix + "{" + key + "}")
}

// newLockKeysFromBase returns the keys of the lock whose lock key is base.
func newLockKeysFromBase(base string) lockKeys {
	return lockKeys{
		lock:   base,
		fence:  base + ":fence",
		queue:  base + ":q",
		notify: base + ":n",
		grants: base + ":g:",
	}
}

func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: the key is empty: name the resource to lock, e.g. \"order:42\"", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: the key is %d bytes, the limit is %d: hash long keys before locking", ErrInvalidKey, len(key), MaxKeyLen)
	}
	return nil
}
