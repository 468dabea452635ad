package ginlock_test

import (
	"os"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/ginsuite"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.ReleaseMode)
	os.Exit(lockmwtest.RunWithRedis(m, &redisAddr)) // the examples' Redis
}

// newLocker and newLockerOn return a Locker closed at cleanup.
var (
	newLocker   = lockmwtest.NewLocker
	newLockerOn = lockmwtest.NewLockerOn
)

// The engine and response helpers are ginsuite's.
var (
	newGin    = ginsuite.NewGin
	newEngine = ginsuite.NewEngine
	serve     = ginsuite.Serve
	problem   = ginsuite.DecodeProblem
	within    = lockmwtest.Within
)

// lockKey is where lockmw stores the owner token of key with prefix.
func lockKey(prefix, key string) string { return prefix + "{" + key + "}" }
