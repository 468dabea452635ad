// Package redispeers benchmarks lockmw on Redis beside the libraries its
// users would pick instead (github.com/go-redsync/redsync/v4 and
// github.com/redis/rueidis/rueidislock) and beside raw SET NX polling,
// on the same redis-server in the same run (make bench), with the harness
// the other stores use (internal/testkit/lockmwtest/benchsuite).
//
// It is a module of its own so that those libraries, and the Redis
// clients redsync requires, never enter the root module's requirements:
// only this benchmark uses them. It holds no code but its benchmarks.
package redispeers
