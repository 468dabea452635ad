package lockmw

import "testing"

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
	if got := newLockKeysFromBase("lockmw:{order:42}"); got != want {
		t.Fatalf("newLockKeysFromBase = %+v, want %+v", got, want)
	}
}

// The user's key comes back from a lock's keys whatever braces the prefix
// and key hold: store keys and log lines are named by it.
func TestLockKeysName(t *testing.T) {
	for _, c := range []struct{ prefix, key string }{
		{"lockmw:", "order:42"},
		{"", "k"},
		{"app{1}:", "{a}b}"},
		{"{", "}"},
	} {
		if got := newLockKeys(c.prefix, c.key).name(c.prefix); got != c.key {
			t.Errorf("newLockKeys(%q, %q).name = %q, want %q", c.prefix, c.key, got, c.key)
		}
	}
}
