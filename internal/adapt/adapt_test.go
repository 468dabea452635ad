package adapt

import (
	"errors"
	"testing"
	"time"
)

func TestCheckID(t *testing.T) {
	for id, ok := range map[string]bool{"42": true, "ünï": true, "": false, "a\x00b": false, "a\nb": false, "\xff": false, "a\u0085": false} {
		if err := CheckID("id", id); (err == nil) != ok || (err != nil && !errors.Is(err, ErrBadID)) {
			t.Errorf("CheckID(%q) = %v, want ok=%v", id, err, ok)
		}
	}
}

func TestHoldWait(t *testing.T) {
	type locker struct{ _ int }
	l1, l2 := new(locker), new(locker)
	h := NewHolds(l1).For("order:{id}")
	if _, known := h.Wait(0, false); known {
		t.Error("an estimate with no holds and no TTL")
	}
	if w, _ := h.Wait(10*time.Second, true); w != FirstWait {
		t.Errorf("no holds yet, 10s left: wait %v, want FirstWait (%v), not the remaining TTL", w, FirstWait)
	}
	if w, _ := h.Wait(300*time.Millisecond, true); w != 300*time.Millisecond {
		t.Errorf("no holds yet, 300ms left: wait %v, want the 300ms left", w)
	}
	for range 10 {
		h.Observe(200 * time.Millisecond)
	}
	if w, _ := NewHolds(l1).For("order:{id}").Wait(3*time.Second, true); w != 200*time.Millisecond {
		t.Errorf("wait %v, want the 200ms holds", w)
	}
	if w, _ := h.Wait(50*time.Millisecond, true); w != 50*time.Millisecond {
		t.Errorf("wait %v, want it bounded by the 50ms left", w)
	}
	if _, known := NewHolds(l2).For("order:{id}").Wait(0, false); known {
		t.Error("another Locker shares the estimate")
	}
	if _, known := NewHolds(l1).For("item:{id}").Wait(0, false); known {
		t.Error("another name shares the estimate")
	}
}
