package lockmw

import "fmt"

// lockKeys are the Redis keys of one lock. They share the hash tag {key}, so
// on Redis Cluster they live in one slot and one script can touch them all.
type lockKeys struct {
	lock  string // the owner's token, with the lease's expiry
	fence string // the fencing counter; never expires
}

func newLockKeys(prefix, key string) lockKeys {
	base := prefix + "{" + key + "}"
	return lockKeys{lock: base, fence: base + ":fence"}
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
