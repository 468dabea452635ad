// Package demo is the one helper of the examples: a Redis to talk to
// (RedisAddr: the one at REDIS_ADDR, otherwise an embedded in-process
// Redis, so that every example runs on a machine with no Redis installed),
// a client of it with the settings a lock needs (RedisClient), and the
// demonstration that the examples on other stores share (Run: two Lockers
// take turns with rising fences, then an unrenewed lease expires and its
// holder notices first).
//
// It lives in the examples' module, so that what only the demos use (the
// embedded Redis, miniredis) is not a requirement of the module users
// import; the examples that are modules of their own (examples/etcd,
// examples/zookeeper, examples/sql) require this module for it.
package demo
