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
