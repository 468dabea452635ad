// Package tools pins the tools lockmw's Makefile runs (staticcheck), as
// tool directives of a module of their own: `go tool staticcheck` runs the
// pinned version through the repository's go.work, and the module that
// users require does not list them.
package tools
