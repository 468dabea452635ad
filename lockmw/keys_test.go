package lockmw_test

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/lockmw"
)

// On a Redis Cluster, a prefix whose first braces are "{}" gives every
// name of every lock an empty hash tag, so Redis would refuse each request
// (CROSSSLOT) as ErrUnavailable: New refuses the prefix instead, before
// anything is sent. Braces with text between them, or none, are fine, and
// one Redis takes any prefix.
func TestClusterPrefixWithEmptyHashTag(t *testing.T) {
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = cluster.Close() })
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = single.Close() })
	for _, c := range []struct {
		client redis.UniversalClient
		prefix string
		bad    bool
	}{
		{cluster, "app{}:", true},
		{cluster, "{}", true},
		{cluster, "a:{}{x}:", true},
		{cluster, "app{1}:", false},
		{cluster, "app:", false},
		{cluster, "x{", false},
		{cluster, "}{", false},
		{single, "app{}:", false},
	} {
		l, err := lockmw.New(c.client, lockmw.WithPrefix(c.prefix))
		if err == nil {
			_ = l.Close()
		}
		if c.bad != errors.Is(err, lockmw.ErrInvalidOption) {
			t.Errorf("New(%T, WithPrefix(%q)): %v, want ErrInvalidOption: %v", c.client, c.prefix, err, c.bad)
		}
	}
}
