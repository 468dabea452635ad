package redisstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
	"github.com/redis/go-redis/v9"
)

// This file is Redlock's store.Inspector: each master read with
// inspect.lua, and what a majority of them agree on (see inspect.go for
// what each field means and how exact it is).

// UseHolderInfo keeps info beside each lock this Locker takes, on every
// master.
func (b *Redlock) UseHolderInfo(info string) { b.holderInfo = info }

// describe writes the holder info of token's holding of k on every master
// (in parallel), if the Locker has one; failures are ignored: it is never
// read for safety.
func (b *Redlock) describe(ctx context.Context, k store.Key, token string) {
	if b.holderInfo == "" {
		return
	}
	lock := lockKeyOf(k)
	var wg sync.WaitGroup
	for _, m := range b.masters {
		wg.Go(func() { _ = describe(ctx, m.client, lock, token, b.holderInfo) })
	}
	wg.Wait()
}

// refreshInfo extends, on every master, the holder info of the renewals
// that held, in the background (one pipeline per master), if the Locker
// has holder info.
func (b *Redlock) refreshInfo(reqs []store.RenewRequest, results []store.RenewResult) {
	if b.holderInfo == "" {
		return
	}
	var owned []store.RenewRequest
	for i, r := range results {
		if r.Err == nil && r.Ownership == store.Owned {
			owned = append(owned, reqs[i])
		}
	}
	if len(owned) == 0 {
		return
	}
	for _, m := range b.masters {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			pipe := m.client.Pipeline()
			for _, r := range owned {
				pipe.PExpire(ctx, infoKey(lockKeyOf(r.Key)), r.TTL)
			}
			_, _ = pipe.Exec(ctx)
		}()
	}
}

// redlockDescribingHost is the Host of a Redlock Locker given
// WithHolderInfo: each lease the wake policy makes gets its holder info
// written.
type redlockDescribingHost struct {
	store.Host
	b *Redlock
}

// NewLease makes the lease and describes its holding.
func (h redlockDescribingHost) NewLease(a *store.Acquisition, token string, fence uint64, validFrom time.Time, fair bool, state any) (store.Lease, error) {
	s, err := h.Host.NewLease(a, token, fence, validFrom, fair, state)
	if err == nil {
		h.b.describe(a.Ctx, a.Key, token)
	}
	return s, err
}

// Inspect reads k's lock on every master, in parallel, and reports what a
// majority agrees on.
func (b *Redlock) Inspect(ctx context.Context, k store.Key) (store.Inspection, error) {
	states, err := b.readStates(ctx, []store.Key{k})
	if err != nil {
		return store.Inspection{}, err
	}
	return b.agreed(k.Name, states[0]), nil
}

// readStates reads each of keys on every master; states[i][m] is key i on
// master m. It fails when fewer than a quorum of masters answered.
func (b *Redlock) readStates(ctx context.Context, keys []store.Key) ([][]*lockState, error) {
	states := make([][]*lockState, len(keys))
	for i := range states {
		states[i] = make([]*lockState, len(b.masters))
	}
	errs := make([]error, len(b.masters))
	var wg sync.WaitGroup
	for m, ms := range b.masters {
		wg.Go(func() {
			pipe := ms.client.Pipeline()
			cmds := make([]*redis.Cmd, len(keys))
			for i, k := range keys {
				cmds[i] = inspectScript.Eval(ctx, pipe, inspectKeys(newLockRef(k.Prefix, k.Name)))
			}
			_, _ = pipe.Exec(ctx)
			for i, c := range cmds {
				v, err := c.Result()
				if err == nil {
					var s lockState
					if s, err = parseState(v); err == nil {
						states[i][m] = &s
						continue
					}
				}
				errs[m] = b.masterErr(m, err)
				return
			}
		})
	}
	wg.Wait()
	answered := 0
	for _, err := range errs {
		if err == nil {
			answered++
		}
	}
	if answered < b.quorum {
		return nil, fmt.Errorf("%d of %d masters answered, %d needed: %v", answered, len(b.masters), b.quorum, errs)
	}
	return states, nil
}

// agreed is what a majority of the masters' states say of the lock named
// name: held when a quorum holds it for one token, for as long as a
// quorum still will (the quorum-th longest PTTL of that token's masters).
func (b *Redlock) agreed(name string, states []*lockState) store.Inspection {
	in := store.Inspection{Name: name}
	counts := map[string]int{}
	for _, s := range states {
		if s != nil && s.owner != "" && s.pttl != -2 {
			counts[s.owner]++
		}
		if s != nil && s.hasCounter && s.counter > in.Fence.Value {
			in.Fence = store.Reading[uint64]{Value: s.counter, Is: store.AtMost}
		}
	}
	if first := states[0]; first != nil {
		// The first master keeps the wait queue.
		in.Waiters = store.Reading[int]{Value: int(first.queued), Is: store.Exact}
	}
	for owner, n := range counts {
		if n < b.quorum {
			continue
		}
		in.Held = true
		var pttls []int64
		for _, s := range states {
			if s == nil || s.owner != owner {
				continue
			}
			pttls = append(pttls, s.pttl)
			if s.infoToken == owner && in.Holder.Is == store.Unknown {
				in.Holder = store.Reading[string]{Value: s.info, Is: store.Exact}
				in.Since = store.Reading[time.Time]{Value: time.UnixMilli(s.infoSince), Is: store.Exact}
			}
		}
		slices.Sort(pttls)
		slices.Reverse(pttls)
		if p := pttls[b.quorum-1]; p > 0 {
			in.TTL = store.Reading[time.Duration]{Value: time.Duration(p) * time.Millisecond, Is: store.Exact}
		}
	}
	return in
}

// List scans the first len(masters)-quorum+1 masters (every lock a
// majority holds is on one of them), listing a lock found on one of them
// only if none scanned before it has its key, and reads each on every
// master (Inspect). A page may hold fewer locks than limit, even none,
// while more follow.
func (b *Redlock) List(ctx context.Context, prefix, cursor string, limit int) ([]store.Inspection, string, error) {
	scan := len(b.masters) - b.quorum + 1
	nodes := make([]scanNode, scan)
	for i := range scan {
		nodes[i] = scanNode{addr: fmt.Sprintf("m%04d", i), client: b.masters[i].client}
	}
	found, next, err := scanLocks(ctx, nodes, prefix, cursor, limit, naming{})
	if err != nil {
		return nil, "", err
	}
	keys := make([]store.Key, len(found))
	for i, f := range found {
		keys[i], _ = keyOfBase(prefix, f.Key)
	}
	states, err := b.readStates(ctx, keys)
	if err != nil {
		return nil, "", err
	}
	page := make([]store.Inspection, 0, len(found))
	for i, f := range found {
		earlier := false
		for m := range f.Node {
			if s := states[i][m]; s != nil && s.owner != "" {
				earlier = true // listed from master m's scan
			}
		}
		if in := b.agreed(keys[i].Name, states[i]); in.Held && !earlier {
			page = append(page, in)
		}
	}
	return page, next, nil
}
