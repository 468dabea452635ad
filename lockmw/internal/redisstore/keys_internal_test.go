package redisstore

import (
	"strings"
	"testing"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// TestLockKeys checks the names of one lock's keys and channels, built in
// one allocation and sliced.
func TestLockKeys(t *testing.T) {
	want := lockKeys{
		lock:   "lockmw:{order:42}",
		fence:  "lockmw:{order:42}:fence",
		queue:  "lockmw:{order:42}:q",
		notify: "lockmw:{order:42}:n",
		grants: "lockmw:{order:42}:g:",
	}
	if got := newLockKeys("lockmw:", "order:42"); got != want {
		t.Fatalf("newLockKeys = %+v, want %+v", got, want)
	}
	if got := lockKeyOf(store.Key{Prefix: "lockmw:", Name: "order:42"}); got != want.lock {
		t.Fatalf("lockKeyOf = %q, want %q", got, want.lock)
	}
}

// The user's key comes back from a lock's Redis lock key (as channel names
// carry it) whatever braces the prefix and key hold: the Locker's rooms are
// found by it.
func TestKeyOfBase(t *testing.T) {
	for _, c := range []struct{ prefix, key string }{
		{"lockmw:", "order:42"},
		{"", "k"},
		{"app{1}:", "{a}b}"},
		{"{", "}"},
	} {
		want := store.Key{Prefix: c.prefix, Name: c.key}
		got, ok := keyOfBase(c.prefix, newLockKeys(c.prefix, c.key).lock)
		if !ok || got != want {
			t.Errorf("keyOfBase(%q, newLockKeys(%q, %q).lock) = %+v, %v, want %+v", c.prefix, c.prefix, c.key, got, ok, want)
		}
	}
	// Names another prefix made are not this Locker's.
	for _, base := range []string{"other:{k}", "lockmw:k", "lockmw:{k", "", "lockmw:"} {
		if k, ok := keyOfBase("lockmw:", base); ok {
			t.Errorf("keyOfBase(%q, %q) = %+v, true, want false", "lockmw:", base, k)
		}
	}
}

// On a Cluster, a key starting with '}' (under a prefix without '{') is
// named prefix+"#{H}{key}", H its CRC-32 in hex, so that its names share
// the slot of H; every other key, and every key on one Redis or under
// Redlock, keeps its plain names (TestLockKeys). No Cluster name is a
// plain name, and the Locker's rooms find the key again from a channel.
func TestClusterNames(t *testing.T) {
	cluster, single := naming{cluster: true}, naming{}
	want := lockKeys{
		lock:   "lockmw:#{8596ec4a}{}x}",
		fence:  "lockmw:#{8596ec4a}{}x}:fence",
		queue:  "lockmw:#{8596ec4a}{}x}:q",
		notify: "lockmw:#{8596ec4a}{}x}:n",
		grants: "lockmw:#{8596ec4a}{}x}:g:",
	}
	if got := cluster.keys("lockmw:", "}x"); got != want {
		t.Errorf("Cluster names of }x = %+v, want %+v", got, want)
	}
	for _, c := range []struct {
		n           naming
		prefix, key string
	}{
		{single, "lockmw:", "}x"}, {single, "lockmw:", "}"},
		{cluster, "lockmw:", "order:42"}, {cluster, "lockmw:", "a}x"}, {cluster, "lockmw:", "{}x"},
		{cluster, "app{1}:", "}x"}, {cluster, "x{", "}x"},
	} {
		if got, plain := c.n.keys(c.prefix, c.key), newLockKeys(c.prefix, c.key); got != plain {
			t.Errorf("naming %+v of %q, %q = %+v, want the plain names %+v", c.n, c.prefix, c.key, got, plain)
		}
	}
	for _, key := range []string{"}", "}}", "}x", "}{a}", "}" + strings.Repeat("\xff", 511)} {
		k := cluster.keys("lockmw:", key)
		tag := hashTag(k.lock)
		if tag == "" || tag == k.lock {
			t.Errorf("%q: lock name %q has no hash tag", key, k.lock)
		}
		for _, name := range []string{k.fence, k.queue, k.notify, k.grants + "id"} {
			if hashTag(name) != tag {
				t.Errorf("%q: %q is not in the slot of %q (tags %q, %q)", key, name, k.lock, hashTag(name), tag)
			}
		}
		if strings.HasPrefix(k.lock, "lockmw:{") {
			t.Errorf("%q: Cluster name %q starts as plain names do", key, k.lock)
		}
		if got, ok := cluster.keyOf("lockmw:", k.lock); !ok || got != (store.Key{Prefix: "lockmw:", Name: key}) {
			t.Errorf("keyOf(%q) = %+v, %v, want %q", k.lock, got, ok, key)
		}
		if cluster.lockKey(store.Key{Prefix: "lockmw:", Name: key}) != k.lock {
			t.Errorf("%q: lockKey differs from keys().lock", key)
		}
	}
	// Names the Cluster naming does not make are not the Locker's.
	for _, base := range []string{"lockmw:{}x}", "lockmw:#{00000000}{}x}", "lockmw:#{8596ec4a}{x}", "lockmw:#{8596ec4a}", "lockmw:#{"} {
		if k, ok := cluster.keyOf("lockmw:", base); ok {
			t.Errorf("keyOf(%q) = %+v, true, want false", base, k)
		}
	}
}

// hashTag is the part of name Redis Cluster hashes: the text between the
// first '{' and the first '}' after it when not empty, else name.
func hashTag(name string) string {
	if i := strings.IndexByte(name, '{'); i >= 0 {
		if j := strings.IndexByte(name[i+1:], '}'); j > 0 {
			return name[i+1 : i+1+j]
		}
	}
	return name
}
