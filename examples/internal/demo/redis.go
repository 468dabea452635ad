// The examples' Redis: the one at REDIS_ADDR when that is set, otherwise an
// embedded in-process Redis (miniredis) whose TTLs run on the real clock
// (RedisAddr); and a client of it with the settings a lock needs
// (RedisClient).

package demo

import (
	"fmt"
	"log"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// RedisAddr returns REDIS_ADDR, or starts an embedded in-process Redis whose
// TTLs run on the real clock, and returns its address and how to stop it.
func RedisAddr() (string, func()) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		fmt.Println("using Redis at", addr)
		return addr, func() {}
	}
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	m.ClockTTL(true)
	fmt.Println("REDIS_ADDR not set: using an embedded in-process Redis")
	return m.Addr(), m.Close
}

// RedisClient returns a client of the Redis at addr with the settings a lock
// needs: Redis calls bounded by short timeouts, and no retries inside
// go-redis, so that an outage is reported (ErrUnavailable, gRPC
// Unavailable) after one timeout, not after MaxRetries of them.
func RedisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		DialTimeout:           300 * time.Millisecond,
		ReadTimeout:           300 * time.Millisecond,
		WriteTimeout:          300 * time.Millisecond,
		MaxRetries:            -1,
		DialerRetries:         1,
		PipelinePoolSize:      -1,
		ContextTimeoutEnabled: true,
	})
}
