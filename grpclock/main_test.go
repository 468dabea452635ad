package grpclock_test

import (
	"os"
	"testing"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
)

// TestMain starts the redis-server the examples use (redisAddr).
func TestMain(m *testing.M) {
	os.Exit(lockmwtest.RunWithRedis(m, &redisAddr))
}
