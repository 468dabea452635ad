// This file computes the figures of a contended run from its critical
// sections: whether two overlapped, the hand-off gaps between them,
// percentiles, and Jain's fairness index over the contenders' shares.

package benchsuite

import (
	"math"
	"slices"
	"time"
)

// Interval is one critical section: from the lock call's return (Start)
// to the unlock call (End).
type Interval struct{ Start, End time.Time }

// SortHolds sorts holds by their start.
func SortHolds(holds []Interval) {
	slices.SortFunc(holds, func(a, b Interval) int { return a.Start.Compare(b.Start) })
}

// Overlaps counts the critical sections of holds (sorted by SortHolds)
// that began before the one before them ended: a lock that excludes has
// none, since its next holder's lock call returns after the unlock call
// that freed it.
func Overlaps(holds []Interval) int {
	n := 0
	for i := 1; i < len(holds); i++ {
		if holds[i].Start.Before(holds[i-1].End) {
			n++
		}
	}
	return n
}

// Gaps are the hand-off gaps of holds (sorted by SortHolds): from each
// holder's unlock call to the next holder's lock call returning, the time
// the lock stood idle (or was on its way) between them.
func Gaps(holds []Interval) []time.Duration {
	if len(holds) < 2 {
		return nil
	}
	gaps := make([]time.Duration, 0, len(holds)-1)
	for i := 1; i < len(holds); i++ {
		gaps = append(gaps, holds[i].Start.Sub(holds[i-1].End))
	}
	return gaps
}

// Percentile is the p-th percentile of d (the element at rank len·p/100
// in order; 0 for none). d is left as it was.
func Percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// Jain is Jain's fairness index of the shares x (acquisitions per
// contender): (Σx)² / (n·Σx²), 1 when every contender got the same share,
// 1/n when one got them all; NaN when none got any.
func Jain(x []int) float64 {
	var sum, sq float64
	for _, v := range x {
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	if sq == 0 {
		return math.NaN()
	}
	return sum * sum / (float64(len(x)) * sq)
}
