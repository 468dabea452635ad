package store

import "context"

// This file is the capability of stores whose fences are drawn per key.

// FenceRaiser is a store whose fences come from one counter per key, so
// that a key used for the first time can draw a higher fence than one
// used for a while (the Redis stores: counters seeded from the server
// clock). RaiseFence raises k's counter so that k's next fence is above
// every fence the store drew before the call, for any key; it never lowers
// a counter, so k's fences keep rising. The Locker calls it before an
// acquisition made with lockmw.StoreWideFence. Stores whose fences come
// from one sequence for all keys (etcd's revision, ZooKeeper's zxid, the
// SQL stores' sequence) have that property already and do not implement
// it.
type FenceRaiser interface {
	RaiseFence(ctx context.Context, k Key) error
}
