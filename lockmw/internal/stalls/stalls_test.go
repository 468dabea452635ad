package stalls

import (
	"slices"
	"testing"
	"time"
)

// Notes keep each token's sessions until they are forgotten, and drop a
// token last noted longer ago than the keep.
func TestNotes(t *testing.T) {
	var n Notes[int64]
	if got := n.Of("a"); len(got) != 0 {
		t.Fatalf("Of on empty notes = %v", got)
	}
	n.Note("a", 1, time.Hour)
	n.Note("a", 2, time.Hour)
	n.Note("b", 3, time.Hour)
	got := n.Of("a")
	if !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("Of(a) = %v, want [1 2]", got)
	}
	got[0] = 99 // a copy: the notes do not change
	n.Forget("a", []int64{1})
	if got := n.Of("a"); !slices.Equal(got, []int64{2}) {
		t.Fatalf("after Forget(a, [1]): Of(a) = %v, want [2]", got)
	}
	n.Forget("a", []int64{2})
	if got, left := n.Of("a"), len(n.by); len(got) != 0 || left != 1 {
		t.Fatalf("after forgetting all of a: Of(a) = %v, %d tokens left, want none and 1 (b)", got, left)
	}
	// b was noted "long ago" for a keep of 0: the next note drops it.
	time.Sleep(time.Millisecond)
	n.Note("c", 4, 0)
	if got := n.Of("b"); len(got) != 0 {
		t.Fatalf("Of(b) = %v after a note with a keep shorter than its age, want it forgotten", got)
	}
	if got := n.Of("c"); !slices.Equal(got, []int64{4}) {
		t.Fatalf("Of(c) = %v, want [4]", got)
	}
}
