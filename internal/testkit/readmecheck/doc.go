// Package readmecheck holds the test that the repository's README stays an
// entry page in step with the code: the modules make test runs, the stores
// make chaos checks, every store module installed and documented, every
// example listed and run by make demo, and no benchmark figure (the
// figures are what make bench prints on the machine that runs it).
package readmecheck
