package zookeeper

import "github.com/lockmw/lockmw/lockmw/internal/store"

// This file lends the tests of package zookeeper_test the store's naming
// of locks, so that what they read in ZooKeeper is what the store wrote,
// whatever the key's bytes.

// LockParent is the node under which the nodes of the lock key under
// prefix live, with the default root "/".
func LockParent(prefix, key string) string {
	return (&zkStore{root: "/"}).parentOf(store.Key{Prefix: prefix, Name: key})
}
