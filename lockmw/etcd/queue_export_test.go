package etcd

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file lends the tests of package etcd_test the store's queue steps,
// so that a test can write to etcd between a waiter's Enqueue and its
// WaitTurn, which a Locker runs back to back.

// Queue is a store on one client, its locks under lockmw.DefaultPrefix,
// every holding and entry renewed, with one TTL.
type Queue struct {
	s   *etcdStore
	ttl time.Duration
}

// NewQueue returns a store on c whose steps use ttl.
func NewQueue(c *clientv3.Client, ttl time.Duration) (*Queue, error) {
	s := newStore(c)
	if err := s.CheckTTL(ttl); err != nil {
		return nil, err
	}
	return &Queue{s: s, ttl: ttl}, nil
}

func (q *Queue) key(name string) store.Key {
	return store.Key{Prefix: lockmw.DefaultPrefix, Name: name}
}

// Enqueue is the store's Enqueue of token on lock key.
func (q *Queue) Enqueue(ctx context.Context, key, token string) (store.Reply, error) {
	return q.s.Enqueue(ctx, q.key(key), token, q.ttl, true)
}

// WaitTurn is the store's WaitTurn of token on lock key, after Enqueue's
// reply r.
func (q *Queue) WaitTurn(ctx context.Context, key, token string, r store.Reply) (store.Reply, error) {
	return q.s.WaitTurn(ctx, q.key(key), token, q.ttl, r)
}

// WaitFree is the store's WaitFree on lock key, after a busy attempt that
// saw seen.
func (q *Queue) WaitFree(ctx context.Context, key string, seen int64) error {
	return q.s.WaitFree(ctx, q.key(key), seen)
}

// Acquire is the store's attempt (TryAcquire) of token on lock key.
func (q *Queue) Acquire(ctx context.Context, key, token string) (store.Reply, error) {
	return q.s.Acquire(ctx, q.key(key), token, q.ttl, true)
}

// Release deletes token's key of lock key.
func (q *Queue) Release(ctx context.Context, key, token string) error {
	_, err := q.s.Release(ctx, q.key(key), token)
	return err
}

// Close revokes the store's leases.
func (q *Queue) Close() error { return q.s.Close() }
