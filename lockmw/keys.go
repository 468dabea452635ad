package lockmw

import "fmt"

// lockKeys are the Redis keys and channels of one lock. They share the hash
// tag {key}, so on Redis Cluster they live in one slot and one script can
// touch them all (and sharded pub/sub reaches the node that holds them).
type lockKeys struct {
	lock   string // the owner's token, with the lease's expiry
	fence  string // the fencing counter; expires after the retention (retention.go)
	queue  string // fair waiters in arrival order
	notify string // channel: the lock was released (default-mode waiters)
	grants string // channel prefix: + a Locker id, the lock was handed to one of its fair waiters
}

func newLockKeys(prefix, key string) lockKeys {
	// One allocation for all five: each name is a slice of it.
	all := prefix + "{" + key + "}:fence" + prefix + "{" + key + "}:q" + prefix + "{" + key + "}:n" + prefix + "{" + key + "}:g:"
	return keysIn(all, len(prefix)+len(key)+2)
}

// newLockKeysFromBase returns the keys of the lock whose lock key is base.
func newLockKeysFromBase(base string) lockKeys {
	return keysIn(base+":fence"+base+":q"+base+":n"+base+":g:", len(base))
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

// name returns the user's key of the lock whose keys are k, for a Locker
// with prefix: k.lock is prefix+"{"+key+"}" (newLockKeys).
func (k lockKeys) name(prefix string) string {
	if len(k.lock) < len(prefix)+2 {
		return k.lock // not made by newLockKeys with prefix
	}
	return k.lock[len(prefix)+1 : len(k.lock)-1]
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
