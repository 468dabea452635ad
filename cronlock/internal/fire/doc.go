// Package fire holds what cronlock's schedulers share: a fire's identity
// (its scheduled time, named from the schedule and the host's clock) and
// the claim of a fire in Redis, a high-water mark of claimed fire times in
// one small hash per job.
package fire
