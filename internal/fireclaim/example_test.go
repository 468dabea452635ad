package fireclaim_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/fireclaim"
)

// An instance claims the fire it is about to run; only the first claim of
// a fire wins.
func ExampleRedis_Claim() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	store := fireclaim.NewRedis(rdb, "lockmw:") // the Locker's prefix
	at := time.Now().Truncate(time.Minute)
	c, err := store.Claim(context.Background(), "invoice-sweep", at, "host-a")
	if err != nil {
		log.Fatal(err) // skip the fire: never run unguarded
	}
	if !c.Won {
		fmt.Printf("fire %v taken: %s claimed %v\n", at, c.By, c.Fire)
		return
	}
	fmt.Println("run the fire of", at)
}
