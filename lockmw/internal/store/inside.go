package store

// Inside carries a Store to lockmw.NewWithStore, which makes a Locker on
// it. Only code inside this repository can name this type (its package is
// internal), so no one outside the repository can call NewWithStore,
// although it is exported: the store boundary is this repository's own,
// and the store packages (lockmw/etcd, lockmw/zookeeper, lockmw/postgres,
// lockmw/mysql) are released in lockstep with the root module.
type Inside struct {
	// Store is the store the Locker keeps its locks in.
	Store Store
}
