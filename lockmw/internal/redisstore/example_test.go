package redisstore_test

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/lockmw/internal/redisstore"
)

// A store is made on the user's client, then bound to its Locker before
// the Locker's first request (and asked for its policy, Policy, which
// hears the store's releases and grants); lockmw.New does all of it. Nothing is sent to
// Redis until then.
func Example() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379",
		ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, MaxRetries: -1})
	defer client.Close()
	closing := make(chan struct{}) // the Locker's: closed when its Close begins
	defer close(closing)

	s := redisstore.New(client)
	err := s.Bind(redisstore.Config{
		Self:      "0123456789abcdef", // the Locker's id
		Prefix:    "lockmw:",
		Retention: 24 * time.Hour,
		TTL:       10 * time.Second,
		Logger:    slog.Default(),
		Closing:   closing,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	fmt.Println(s.Name())
	// Output: Redis
}
