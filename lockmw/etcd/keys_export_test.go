package etcd

import "github.com/lockmw/lockmw/lockmw/internal/store"

// This file lends the tests of package etcd_test the store's naming of
// locks, so that what they read in etcd is what the store wrote, whatever
// the key's bytes.

// LockDir is the etcd key prefix of the lock key under prefix.
func LockDir(prefix, key string) string { return dir(store.Key{Prefix: prefix, Name: key}) }

// HolderTag starts the value of a key whose Locker gave a holder
// description.
const HolderTag = holderTag
