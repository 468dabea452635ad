package redisstore

import (
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
