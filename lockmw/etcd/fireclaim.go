package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// The fire claims of cronlock's Scheduler (package internal/fireclaim),
// for a Scheduler given no Redis client.
//
// A job's claim record is the key P+"%cronfire%"+J (P the escaped prefix,
// J the escaped job name), and the run record P+"%cronrun%"+J. Neither
// holds a '/', and every lock directory ends in one, so no lock's range
// holds them; escaping never writes "%c", so the first "%c" ends P and no
// two (prefix, job) pairs share a key. The records are under no etcd
// lease: they persist, one small key each per job.

var _ store.FireClaimer = (*etcdStore)(nil)

// FireClaims returns the claims of a Locker with prefix.
func (s *etcdStore) FireClaims(prefix string, ttl, _ time.Duration) fireclaim.Claims {
	return &claims{c: s.c, prefix: escape(prefix), ttl: ttl}
}

// claims keeps claim records in etcd.
type claims struct {
	c      *clientv3.Client
	prefix string        // escaped
	ttl    time.Duration // bounds each call
}

// record is the value of a claim or run record.
type record = fireclaim.Record

func (c *claims) claimKey(job string) string { return c.prefix + "%cronfire%" + escape(job) }
func (c *claims) runKey(job string) string   { return c.prefix + "%cronrun%" + escape(job) }

// Claim raises the job's record to at if it holds an earlier fire (or
// none), in a transaction that puts the new record only if the record's
// mod revision is still the one whose fire was compared (0 when there was
// no record: a missing key's mod revision is 0). etcd applies a
// transaction's compare and put at one revision, with no other write in
// between, so the compare sees exactly the record the decision was made
// on: the fire recorded only rises, and of several claims of one fire
// only the first to commit finds an earlier fire recorded; every other
// one's compare fails, and its re-read finds that fire, and is refused.
// A failed compare returns the record as it is now (the Else branch), so
// no try needs a separate read. A transaction the client replayed
// after it was applied fails its compare and finds its own token in the
// record: the claim won (fireclaim.Raise's loop).
func (c *claims) Claim(ctx context.Context, job string, at time.Time, instance string) (fireclaim.Claim, error) {
	ctx, cancel := context.WithTimeout(ctx, c.ttl)
	defer cancel()
	key := c.claimKey(job)
	// The first try assumes no record; if there is one, its failed
	// compare returns it.
	var kvs []*mvccpb.KeyValue
	read := func(context.Context) (fireclaim.State, error) {
		var st fireclaim.State
		if len(kvs) > 0 {
			if err := json.Unmarshal(kvs[0].Value, &st.Record); err != nil {
				return st, fmt.Errorf("%w: %q: %v", errBadRecord, kvs[0].Value, err)
			}
			st.Version, st.Exists = kvs[0].ModRevision, kvs[0].ModRevision != 0
		}
		return st, nil
	}
	set := func(ctx context.Context, val []byte, cur fireclaim.State) (bool, error) {
		txn, err := c.c.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", cur.Version)).
			Then(clientv3.OpPut(key, string(val))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return false, err
		}
		if !txn.Succeeded {
			kvs = txn.Responses[0].GetResponseRange().Kvs
		}
		return txn.Succeeded, nil
	}
	return fireclaim.Raise(ctx, job, at, instance, read, set)
}

var errBadRecord = errors.New("unreadable claim record")

// Running puts the run record.
func (c *claims) Running(ctx context.Context, job string, at time.Time, instance string) error {
	ctx, cancel := context.WithTimeout(ctx, c.ttl)
	defer cancel()
	val, err := json.Marshal(record{Fire: at.UnixMilli(), By: instance})
	if err != nil {
		return err
	}
	_, err = c.c.Put(ctx, c.runKey(job), string(val))
	return err
}

// Runner reads the run record.
func (c *claims) Runner(ctx context.Context, job string) (time.Time, string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.ttl)
	defer cancel()
	resp, err := c.c.Get(ctx, c.runKey(job))
	if err != nil {
		return time.Time{}, "", err
	}
	if len(resp.Kvs) == 0 {
		return time.Time{}, "", nil
	}
	var r record
	if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil || r.By == "" {
		return time.Time{}, "", nil
	}
	return time.UnixMilli(r.Fire), r.By, nil
}
