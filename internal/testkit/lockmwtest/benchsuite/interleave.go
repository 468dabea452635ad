// This file measures the kinds of one benchmark in turns (Interleave) and
// sums up their rounds: the median of each figure, and of the first
// kind's ratio to each other kind, round by round.

package benchsuite

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Rounds is how many times Interleave measures each kind. The machines
// make bench runs on drift by tens of percent within minutes, so kinds
// measured one after the other (each for the whole -benchtime) met
// different machines: the same code drew ratios a third apart in two runs
// minutes apart. Measured in turns, every kind meets every stretch of the
// run, and a median over rounds leaves out a round a stall hit.
const Rounds = 6

// Figures are what one measurement reported, by unit ("ops/s", "util").
type Figures map[string]float64

// Report reports value in unit on b and keeps it in f.
func (f Figures) Report(b *testing.B, value float64, unit string) {
	f[unit] = value
	b.ReportMetric(value, unit)
}

// Interleave measures each of names Rounds times, as sub-benchmarks
// r1/<name> … r6/<name>: round r takes the names in their order when r is
// odd and in reverse when it is even (ABBA), so that on a drifting machine
// no name keeps the early or the late turn. measure(b, i) measures names[i]
// in sub-benchmark b and returns its figures (the framework may call it
// more than once as it sizes b.N; the last call's figures are the
// reported ones, and the ones kept). Interleave then logs, for each name,
// the median of each figure over its rounds, and for every name after the
// first the median of the first's figure ÷ its own, each ratio taken
// within one round: the figures the README's table quotes. It prints them
// on standard output after the result lines, under "medians of <b.Name()>:".
//
// Each round's measurements are sub-benchmarks like any other; -benchtime
// applies to each, so a kind's measured time is Rounds × -benchtime.
func Interleave(b *testing.B, names []string, measure func(b *testing.B, i int) Figures) {
	got := make([][]Figures, len(names)) // [name][round], nil when not run
	for i := range got {
		got[i] = make([]Figures, Rounds)
	}
	for r := range Rounds {
		b.Run(fmt.Sprintf("r%d", r+1), func(b *testing.B) {
			for _, i := range turns(len(names), r) {
				b.Run(names[i], func(b *testing.B) { got[i][r] = measure(b, i) })
			}
		})
	}
	// On standard output, beside the result lines: a benchmark's log is
	// shown only with -v when it has sub-benchmarks.
	fmt.Printf("medians of %s:\n", b.Name())
	for _, line := range summary(names, got) {
		fmt.Printf("    %s\n", line)
	}
}

// turns is the order of n names in round r (from 0): forward in even
// rounds, backward in odd ones.
func turns(n, r int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	if r%2 == 1 {
		slices.Reverse(order)
	}
	return order
}

// summary is Interleave's log: one line per name with the medians of its
// figures over the rounds it ran, and, after the first, the medians of the
// first name's figures ÷ its own, round by round.
func summary(names []string, got [][]Figures) []string {
	lines := []string{fmt.Sprintf("over %d interleaved rounds; ratios are %s ÷ the kind, within each round", Rounds, names[0])}
	for i, name := range names {
		units := unitsOf(got[i])
		if len(units) == 0 {
			continue
		}
		units = slices.DeleteFunc(units, func(u string) bool { return median(valuesOf(got[i], nil, u)) == 0 })
		var parts []string
		for _, u := range units {
			parts = append(parts, fmt.Sprintf("%.4g %s", median(valuesOf(got[i], nil, u)), u))
		}
		line := fmt.Sprintf("%s: %s", name, strings.Join(parts, ", "))
		if i > 0 {
			var ratios []string
			for _, u := range units {
				if rs := valuesOf(got[0], got[i], u); len(rs) > 0 {
					ratios = append(ratios, fmt.Sprintf("%s %.3f", u, median(rs)))
				}
			}
			if len(ratios) > 0 {
				line += fmt.Sprintf("; %s ÷ %s: %s", names[0], name, strings.Join(ratios, ", "))
			}
		}
		lines = append(lines, line)
	}
	return lines
}

// unitsOf are the units of fs's figures, sorted.
func unitsOf(fs []Figures) []string {
	var units []string
	for _, f := range fs {
		for u := range f {
			if !slices.Contains(units, u) {
				units = append(units, u)
			}
		}
	}
	slices.Sort(units)
	return units
}

// valuesOf is each round's figure in unit from num, divided by den's in
// the same round when den is set (rounds where either lacks it, or den's
// is zero, left out).
func valuesOf(num, den []Figures, unit string) []float64 {
	var vs []float64
	for r, f := range num {
		v, ok := f[unit]
		if !ok {
			continue
		}
		if den != nil {
			d, ok := den[r][unit]
			if !ok || d == 0 {
				continue
			}
			v /= d
		}
		vs = append(vs, v)
	}
	return vs
}

// median of vs (the mean of the middle two when their count is even); 0
// for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
