package lockmw_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/chaos"
)

// TestChaos runs the seeded randomized safety checker (internal/testkit/chaos)
// against the Redis stores of chaos_store_test.go; lockmw/etcd's TestChaos
// runs it against etcd. See internal/testkit/chaos for what it checks and how to
// replay a failure:
//
//	go test -race -run '^TestChaos$' ./lockmw/                         # short: 10s per store
//	go test -race -run '^TestChaos$/^redis$' ./lockmw/ -args -chaos.seed=42 -chaos.duration=30m
//	make chaos CHAOS_DURATION=30m
//
// Flags: -chaos.seed, -chaos.duration, -chaos.store, -chaos.disable,
// -chaos.drift (environment equivalents: LOCKMW_CHAOS_SEED,
// LOCKMW_CHAOS_DURATION, LOCKMW_CHAOS_STORE, LOCKMW_CHAOS_DISABLE).
func TestChaos(t *testing.T) {
	// Links are cut and servers killed all the time: go-redis would log
	// every failed dial.
	redis.SetLogger(chaosRedisLogger{})
	defer redis.SetLogger(chaosRedisLogger{all: true})
	chaos.RunStores(t, chaosStores...)
}

// chaosRedisLogger is go-redis' logger during TestChaos: it leaves out the
// failed dials the faults cause (all: it does not), and writes the rest to
// stderr as go-redis does by default.
type chaosRedisLogger struct{ all bool }

var chaosRedisLog = log.New(os.Stderr, "redis: ", log.LstdFlags)

func (l chaosRedisLogger) Printf(_ context.Context, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !l.all && strings.Contains(msg, "failed to dial") {
		return
	}
	chaosRedisLog.Print(msg)
}
