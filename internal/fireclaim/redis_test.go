package fireclaim_test

import (
	"context"
	"testing"

	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/internal/lockmwtest/cronsuite"
	"github.com/lockmw/lockmw/internal/redistest"
)

// The claim semantics (cronsuite.RunClaims) on Redis, whose record is one
// key per job.
func TestClaimHighWaterMark(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	cronsuite.RunClaims(t, fireclaim.NewRedis(client), "job")
	keys, err := client.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != fireclaim.Key("job") {
		t.Errorf("keys %v, want only %s", keys, fireclaim.Key("job"))
	}
}
