// Package zookeeper keeps lockmw locks in ZooKeeper. (Documentation
// follows.)
package zookeeper
