package zookeeper

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockmw/lockmw/lockmw"
)

// TestTTLErrorRoundsTheLimit: the longest TTL a session keeps is printed
// to the millisecond, not to the nanosecond of 2/3 of its timeout.
func TestTTLErrorRoundsTheLimit(t *testing.T) {
	s := newStore(Config{Servers: []string{"localhost:2181"}}, "/")
	s.conn = &zk.Conn{} // connected: CheckTTL judges by the session
	s.tr.cur = sessionState{id: 1, timeout: 40 * time.Second, epoch: 1}
	err := s.CheckTTL(30 * time.Second)
	if !errors.Is(err, lockmw.ErrInvalidOption) || !strings.Contains(err.Error(), "at most 24.666s,") || strings.Contains(err.Error(), "24.666666666s") {
		t.Fatalf("CheckTTL(30s) on a 40s session: %v, want ErrInvalidOption with the limit 24.666s", err)
	}
}
