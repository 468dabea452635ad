// Package fire holds what cronlock's schedulers share: a fire's identity
// (its scheduled time, named from the schedule and the host's clock) and
// the fires between two claims that no instance ran. The claims
// themselves are package internal/fireclaim's.
package fire
