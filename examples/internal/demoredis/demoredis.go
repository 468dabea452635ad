// Package demoredis gives the examples a Redis to talk to: the one at
// REDIS_ADDR when that is set, otherwise an embedded in-process Redis
// (miniredis) whose TTLs run on the real clock, so that every example runs
// on a machine with no Redis installed.
package demoredis

import (
	"fmt"
	"log"
	"os"

	"github.com/alicebob/miniredis/v2"
)

// Addr returns REDIS_ADDR, or starts an embedded in-process Redis whose TTLs
// run on the real clock, and returns its address and how to stop it.
func Addr() (string, func()) {
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
