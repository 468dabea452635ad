// Package tools pins the tools lockmw's Makefile runs (staticcheck), as
// tool directives of a module of their own: `go tool staticcheck` runs the
// pinned version through the repository's go.work, and the module that
// users require does not list them.
//
// The etcd server the tests run is pinned in internal/tools/etcd, a
// module of its own outside go.work (etcd's dependencies would otherwise
// join the workspace's build list); `make etcd` builds it into .bin/etcd.
package tools
