package zookeeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// The fire claims of cronlock's Scheduler (package internal/fireclaim),
// for a Scheduler given no Redis client.
//
// A job's claim record is the persistent node R+P+"%cronfire%"+J (R the
// root, P the escaped prefix, J the escaped job name) and its run record
// R+P+"%cronrun%"+J. Escaping writes '%' only before two upper-case hex
// digits, so no lock's parent (R+P+escaped key) is named like a record,
// and no two (prefix, job) pairs share a node. A claim is a versioned
// SetData (or a create, when there is no record): the compare-and-set.

var _ store.FireClaimer = (*zkStore)(nil)

// FireClaims returns the claims of a Locker with prefix.
func (s *zkStore) FireClaims(prefix string, ttl, _ time.Duration) fireclaim.Claims {
	retention := s.cfg.ClaimRetention
	if retention == 0 {
		retention = lockmw.DefaultRetention
	}
	return &claims{s: s, prefix: s.root + escape(prefix), ttl: ttl, retention: retention}
}

type claims struct {
	s         *zkStore
	prefix    string
	ttl       time.Duration
	retention time.Duration // of the records, where the servers have TTL nodes
}

// record is the data of a claim or run record.
type record = fireclaim.Record

func (c *claims) claimPath(job string) string { return c.prefix + "%cronfire%" + escape(job) }
func (c *claims) runPath(job string) string   { return c.prefix + "%cronrun%" + escape(job) }

// read returns the record at p and its version; version -1 when there is
// none.
func (c *claims) read(ctx context.Context, p string) (record, int32, error) {
	type got struct {
		data []byte
		stat *zk.Stat
	}
	out := make(chan got, 1)
	_, err := c.s.do(ctx, "get", p, func() error {
		data, stat, err := c.s.conn.Get(p)
		out <- got{data, stat}
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return record{}, -1, nil
	}
	if err != nil {
		return record{}, 0, err
	}
	g := <-out
	var r record
	if err := json.Unmarshal(g.data, &r); err != nil {
		return record{}, 0, fmt.Errorf("unreadable claim record %s: %q: %v", p, g.data, err)
	}
	return r, g.stat.Version, nil
}

// Claim raises the job's record to at if it holds an earlier fire (or
// none): a SetData at the version read (a create when there was none), so
// that of several claims of one fire only the first to land finds an
// earlier fire; the others' versions are stale, and their re-read finds
// that fire. A write whose reply was lost is read back: the record
// carrying this claim's token means it won (fireclaim.Raise's loop).
func (c *claims) Claim(ctx context.Context, job string, at time.Time, instance string) (fireclaim.Claim, error) {
	ctx, cancel := context.WithTimeout(ctx, c.ttl)
	defer cancel()
	p := c.claimPath(job)
	read := func(ctx context.Context) (fireclaim.State, error) {
		cur, version, err := c.read(ctx, p)
		return fireclaim.State{Record: cur, Version: int64(version), Exists: version >= 0}, err
	}
	set := func(ctx context.Context, val []byte, cur fireclaim.State) (bool, error) {
		_, err := c.s.do(ctx, "set", p, func() error {
			if !cur.Exists {
				return c.create(p, val)
			}
			_, err := c.s.conn.Set(p, val, int32(cur.Version))
			return err
		})
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, zk.ErrNodeExists), errors.Is(err, zk.ErrBadVersion), !definite(err) && ctx.Err() == nil:
			return false, nil // another claim landed first, or the reply was lost: read again
		}
		return false, err
	}
	return fireclaim.Raise(ctx, job, at, instance, read, set)
}

// Running writes the run record.
func (c *claims) Running(ctx context.Context, job string, at time.Time, instance string) error {
	ctx, cancel := context.WithTimeout(ctx, c.ttl)
	defer cancel()
	val, err := json.Marshal(record{Fire: at.UnixMilli(), By: instance})
	if err != nil {
		return err
	}
	p := c.runPath(job)
	_, err = c.s.do(ctx, "set", p, func() error {
		_, err := c.s.conn.Set(p, val, -1)
		if errors.Is(err, zk.ErrNoNode) {
			err = c.create(p, val)
			if errors.Is(err, zk.ErrNodeExists) {
				_, err = c.s.conn.Set(p, val, -1)
			}
		}
		return err
	})
	return err
}

// Runner reads the run record.
func (c *claims) Runner(ctx context.Context, job string) (time.Time, string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.ttl)
	defer cancel()
	r, version, err := c.read(ctx, c.runPath(job))
	if err != nil || version < 0 || r.By == "" {
		return time.Time{}, "", err
	}
	return time.UnixMilli(r.Fire), r.By, nil
}

// create creates the record p with val: a TTL node, which the server
// deletes once it has not been written for the retention, where the
// servers have TTL nodes; a persistent node elsewhere.
func (c *claims) create(p string, val []byte) error {
	c.s.mu.Lock()
	noTTL := c.s.noTTL
	c.s.mu.Unlock()
	if !noTTL {
		_, err := c.s.conn.CreateTTL(p, val, zk.FlagTTL, c.s.acl, c.retention)
		if err == nil || !strings.Contains(err.Error(), "-6") { // ZUNIMPLEMENTED: extendedTypesEnabled is off
			return err
		}
		c.s.mu.Lock()
		c.s.noTTL = true
		c.s.mu.Unlock()
	}
	_, err := c.s.conn.Create(p, val, 0, c.s.acl)
	return err
}
