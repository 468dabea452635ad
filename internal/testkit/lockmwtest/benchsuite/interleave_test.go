// This file tests Interleave's order of turns and its summary.

package benchsuite

import (
	"slices"
	"strings"
	"testing"
)

// TestTurnsAlternate: the kinds run forward in rounds 1, 3, 5 and backward
// in rounds 2, 4, 6, so each kind's turns average to the same place.
func TestTurnsAlternate(t *testing.T) {
	places := make([]int, 3)
	for r := range Rounds {
		got := turns(3, r)
		want := []int{0, 1, 2}
		if r%2 == 1 {
			want = []int{2, 1, 0}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: turns %v, want %v", r+1, got, want)
		}
		for place, i := range got {
			places[i] += place
		}
	}
	if places[0] != places[1] || places[1] != places[2] {
		t.Fatalf("sums of the kinds' places over %d rounds: %v, want them equal", Rounds, places)
	}
}

// TestSummaryTakesRatiosWithinRounds: a kind's ratio is the median of the
// per-round ratios (0.5 in the fast rounds, 0.9 in the slow ones: 0.7),
// not the ratio of the medians (29.5 ÷ 55); figures are medians over the
// rounds a kind ran, and a unit every round reported as 0 is left out.
func TestSummaryTakesRatiosWithinRounds(t *testing.T) {
	first := []float64{50, 50, 50, 9, 9, 9}
	anchor := []float64{100, 100, 100, 10, 10, 10}
	got := [][]Figures{make([]Figures, Rounds), make([]Figures, Rounds), make([]Figures, Rounds)}
	for r := range Rounds {
		got[0][r] = Figures{"ops/s": first[r], "ns/op": 0}
		got[1][r] = Figures{"ops/s": anchor[r], "ns/op": 0}
	}
	lines := summary([]string{"lockmw", "anchor", "never-ran"}, got)
	want := []string{
		"over 6 interleaved rounds; ratios are lockmw ÷ the kind, within each round",
		"lockmw: 29.5 ops/s",
		"anchor: 55 ops/s; lockmw ÷ anchor: ops/s 0.700",
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("summary:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}
