//go:build !race

package zookeeper_test

// raceDetector reports whether this test binary was built with -race.
const raceDetector = false
