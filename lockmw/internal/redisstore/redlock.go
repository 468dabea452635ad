package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/errs"
	"github.com/lockmw/lockmw/lockmw/internal/store"
	"github.com/redis/go-redis/v9"
)

// This file is the Redlock store: one lock kept on N independent Redis
// masters, held by whoever holds it on a majority (N/2+1) of them.
//
// Every request fans out to all masters at once and is decided as soon as
// the answers in hand settle it: a quorum agreeing, or so many disagreeing
// or failing that no quorum is left. A master that is paused or slow never
// holds up a decision the others can make. Requests to one master go
// through one queue, are sent in order, and are pipelined with whatever else
// is queued for that master, so concurrent leases share round trips and a
// release always reaches a master after the acquisition it undoes.
//
// Validity: the Locker computes it from the moment the first round was sent
// (TTL − elapsed − drift, see attempt and renewScheduler), so the time spent
// in both rounds below counts against the lease.
//
// Fencing tokens. Each master keeps its own counter per lock, incremented
// by the acquire script only when it grants the lock. A holder's fence is
// M, the largest counter value its winning masters returned, and before
// the lease is handed out a quorum of masters must have counter >= M
// recorded while the holder owned the lock there (the second round, raise
// script, skipped when a quorum of the winning masters already returned M
// itself). Why that makes fences strictly increase from one holder to the
// next, and what it needs of the masters' data, is argued once, in
// redlock_safety.go ("Redlock fences").

// Redlock keeps each lock on a quorum of independent masters.
type Redlock struct {
	masters []*master
	quorum  int
	// giveBack hands the Locker's cleaner, per master, locks that failed
	// acquisitions may have taken there (see rollback; Config.GiveBack).
	giveBack func(key string, until time.Time, try func(context.Context) error) bool
	logger   *slog.Logger
	// closing is the Locker's: closed when Close begins.
	closing <-chan struct{}
	// subs hears wakes on the first master (see lockmw's wait_wake.go); self is
	// the Locker's id, which names its wake channel; onWake is told when a
	// release woke a waiter (the lock is contended).
	subs   *subscriber
	self   string
	onWake func(store.Key)
	// events is where wakes go (route).
	events Events
	// held is, by lock key and token, where a lease's lock may be (a
	// *heldOn): its release goes there only.
	held sync.Map
	// expiry is the Locker's, for the counter and queue keys.
	expiry keyExpiry
	// prefix is the Locker's key prefix, which names keys in logs.
	prefix string
	// holderInfo is WithHolderInfo's description ("": none), kept beside
	// each lock the Locker takes (redlock_inspect.go).
	holderInfo string
}

// heldOn is where a Redlock lease's lock may be.
type heldOn struct {
	mu       sync.Mutex
	masters  []bool // the lock may be the lease's there
	renewing int    // renewals on the wire, which may take more masters
}

// firstAnswerWait bounds how long a waiter's lost attempt waits for the
// first master's answer, which says whether its entry was queued.
const firstAnswerWait = time.Second

// hedgeAfter is how long an attempt waits for the first quorum of masters
// before it asks the others too.
const hedgeAfter = 5 * time.Millisecond

// NewRedlock returns the store of clients, one per master, checked
// by lockmw.NewRedlock, which binds it to its Locker (Bind) before the
// Locker's first request.
func NewRedlock(clients []redis.UniversalClient) *Redlock {
	n := len(clients)
	b := &Redlock{quorum: n/2 + 1}
	for _, c := range clients {
		b.masters = append(b.masters, newMaster(c))
	}
	return b
}

// Bind binds b to its Locker (c): before the Locker's first request, once.
// It starts the subscriber that hears wakes on the first master, and the
// checks of the clients' settings, which only warn.
func (b *Redlock) Bind(c Config) {
	b.giveBack, b.logger, b.closing = c.GiveBack, c.Logger, c.Closing
	b.expiry, b.prefix = newKeyExpiry(c.Retention, c.PermanentFences), c.Prefix
	clients := make([]redis.UniversalClient, len(b.masters))
	for i, m := range b.masters {
		clients[i] = m.client
	}
	warnEviction(c.Logger, clients, c.Closing)
	b.self = c.Self
	b.subs = newSubscriber(clients[0]) // wakes are heard on the first master
	b.subs.deliver = b.route
	warnSlowClient(c.Logger, clients, c.TTL)
}

// Close stops the masters' senders once they have sent what is queued;
// later requests fail with errs.ErrClosed.
func (b *Redlock) Close() error {
	for _, m := range b.masters {
		m.close()
	}
	if b.subs != nil {
		b.subs.close()
	}
	return nil
}

// AcquireQueued makes one attempt. It asks the first quorum of masters
// (the first master by redlock_acquire.lua, the others by a plain SET NX
// PX and INCR), and the other masters too as soon as one of those does not
// grant it or they have not all answered within hedgeAfter: a quorum is a
// quorum whichever masters form it, and asking only as many as needed
// saves each acquisition and release the calls to the rest. entry, if not
// empty, is the caller's wait-queue entry: queued in the reply says that
// the first master found the lock held and queued it there.
func (b *Redlock) AcquireQueued(ctx context.Context, lock store.Key, token string, ttl time.Duration, entry string) (QueuedReply, error) {
	k := newLockRef(lock.Prefix, lock.Name)
	n, q := len(b.masters), b.quorum
	replies := make(chan masterReply, n)
	sent := make([]bool, n)
	unsent := n
	send := func(i int) {
		call := masterScript{plain: true, keys: []string{k.lock, k.fence}, args: []any{token, millis(ttl), b.expiry.counter}}
		if i == 0 {
			call = masterScript{script: redlockAcquireScript, keys: []string{k.lock, k.fence, k.queue}, args: []any{token, millis(ttl), entry, b.expiry.counter, b.expiry.queue}}
		}
		sent[i] = true
		unsent--
		b.masters[i].submit(&masterCall{master: i, calls: []masterScript{call}, reply: replies})
	}
	sendRest := func() {
		for i := range n {
			if !sent[i] {
				send(i)
			}
		}
	}
	for i := range q {
		send(i)
	}
	hedge := time.NewTimer(hedgeAfter)
	defer hedge.Stop()

	var (
		won, failed int
		queued      bool
		unsure      bool // the first master failed without answering: the entry may be queued there
		answered0   bool // the first master answered
		granted     = make([]bool, n)
		settled     = make([]bool, n)     // the lock is known not to be token's there
		fences      = make([]int64, 0, n) // fences of the masters that granted, in answer order
		busyTTLs    []time.Duration
		errs        []error
	)
	// record counts one master's answer; false unless it granted the lock.
	record := func(r masterReply) bool {
		vals, err := r.cmds[0].Int64Slice()
		if err == nil && len(vals) != 2 {
			err = fmt.Errorf("acquire returned %d values, want 2", len(vals))
		}
		answered0 = answered0 || r.master == 0
		switch {
		case err != nil:
			failed++
			errs = append(errs, b.masterErr(r.master, err))
			settled[r.master] = !mayHaveRun(err)
			unsure = unsure || (r.master == 0 && entry != "" && !settled[r.master])
			return false
		case vals[0] == acquireTaken:
			won++
			granted[r.master] = true
			fences = append(fences, vals[1])
			return true
		default:
			settled[r.master] = true
			busyTTLs = append(busyTTLs, time.Duration(max(vals[1], 0))*time.Millisecond)
			queued = queued || (r.master == 0 && entry != "")
			return false
		}
	}
	for won < q {
		if pending := n - won - len(busyTTLs) - failed; won+pending < q {
			// No quorum is left. Stop once it is settled whether the lock
			// is busy (other owners block a quorum, or too few failures to
			// blame) or Redis unavailable (failures alone block one).
			busy := len(busyTTLs)
			if busy > n-q || failed > n-q || failed+pending <= n-q {
				break
			}
		}
		var r masterReply
		select {
		case r = <-replies:
		case <-hedge.C:
			sendRest()
			continue
		case <-ctx.Done():
			for i := range n {
				settled[i] = settled[i] || !sent[i]
			}
			b.rollback(k, token, ttl, granted, settled)
			return QueuedReply{Queued: entry != "" && (queued || !answered0), Unsure: unsure}, ctx.Err()
		}
		if !record(r) {
			sendRest() // the first quorum cannot grant it alone
		}
	}
	for i := range n {
		settled[i] = settled[i] || !sent[i] // never asked: not token's there
	}
	lost := won < q // decided: answers that come in below do not change it
	if lost && entry != "" && !answered0 {
		// Lost without the first master's answer (the others settled it),
		// and whether the entry was queued is that answer. A waiter that
		// counts itself queued sleeps until a release on the first master
		// wakes it, or its timer (a TTL) runs out; counted queued where the
		// first master granted the attempt (its lock there is rolled back,
		// waking nobody) or failed, it would sleep a TTL with the lock
		// free. So wait for that answer, a bounded time (the first master
		// answers in order: its next answer is this one). The attempt
		// stays lost whatever comes in meanwhile; answers that do only
		// tell the rollback more precisely where the lock may be token's.
		wait := time.NewTimer(firstAnswerWait)
	answer:
		for !answered0 {
			select {
			case r := <-replies:
				record(r)
			case <-wait.C:
				break answer
			case <-ctx.Done():
				break answer
			}
		}
		wait.Stop()
	}
	if entry != "" && !answered0 {
		// The first master has not answered: it may queue the entry yet.
		// Count it queued, so that it is not queued twice; should it not
		// be, the waiter's timer covers it.
		queued = true
	}
	// Every reply below carries queued and unsure, a won attempt's too (the
	// first master may have queued the entry while the others granted the
	// lock): the waiter takes the entry out when it is done (leaveWakeQueue).
	if lost {
		b.rollback(k, token, ttl, granted, settled)
		if failed > n-q {
			return QueuedReply{Queued: queued, Unsure: unsure}, fmt.Errorf("%d of %d masters failed, so no quorum of %d can answer: %w", failed, n, q, errors.Join(errs...))
		}
		return QueuedReply{Reply: store.Reply{HolderTTL: freeIn(busyTTLs, q-won)}, Queued: queued, Unsure: unsure}, nil
	}

	fence, err := b.settleFence(ctx, k, token, fences)
	if err != nil {
		b.rollback(k, token, ttl, granted, settled)
		return QueuedReply{Queued: queued, Unsure: unsure}, err
	}
	// The release goes where the lock may be token's: where it was granted,
	// and where the request may yet run or did without an answer.
	maybe := make([]bool, n)
	for i := range n {
		maybe[i] = !settled[i]
	}
	b.held.Store(heldKey(k, token), &heldOn{masters: maybe})
	return QueuedReply{Reply: store.Reply{Acquired: true, Fence: uint64(fence)}, Queued: queued, Unsure: unsure}, nil
}

// heldKey names a lease in Redlock.held.
func heldKey(k lockRef, token string) string { return heldKeyOf(k.lock, token) }

// heldKeyOf is heldKey of the lock with Redis key lock.
func heldKeyOf(lock, token string) string { return lock + "\x00" + token }

// settleFence returns the holder's fence, M, the largest counter its
// winning masters returned, once a quorum of masters has counter >= M
// recorded while the holder owned the lock there (see the top of this file
// for why that makes fences increase).
func (b *Redlock) settleFence(ctx context.Context, k lockRef, token string, fences []int64) (int64, error) {
	m := slices.Max(fences)
	atMax := 0
	for _, f := range fences {
		if f == m {
			atMax++
		}
	}
	if atMax >= b.quorum {
		return m, nil // the grants themselves set a quorum's counters to M
	}
	n, q := len(b.masters), b.quorum
	replies := b.fanOut([]masterScript{{script: raiseScript, keys: []string{k.lock, k.fence}, args: []any{token, m, b.expiry.counter}}})
	var owned, other int
	var errs []error
	for owned < q && n-other >= q {
		var r masterReply
		select {
		case r = <-replies:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		v, err := r.cmds[0].Int64()
		switch {
		case err != nil:
			other++
			errs = append(errs, b.masterErr(r.master, err))
		case v == raiseHeld:
			owned++
		default:
			other++
		}
	}
	if owned < q {
		return 0, fmt.Errorf("fencing round confirmed by %d of %d masters, %d needed: %w", owned, n, q, errors.Join(errs...))
	}
	return m, nil
}

// freeIn estimates when enough busy masters free up for a quorum: need of
// their keys must expire, so it is the need-th smallest remaining TTL (the
// largest known one if fewer answered); 0 when unknown.
func freeIn(busy []time.Duration, need int) time.Duration {
	if need <= 0 || len(busy) == 0 {
		return 0
	}
	slices.Sort(busy)
	return busy[min(need, len(busy))-1]
}

// rollback releases a failed acquisition, in parallel, on every master
// where the lock may be token's: all but those in settled, which answered
// that another owner holds it (or failed before running the request), so
// a lost race costs no release where it was lost. It waits (a second at
// most, and not once the Locker is closing: Close sends what is queued
// before the masters stop) for the masters in granted, so that a failed
// attempt leaves nothing behind on the masters that granted it; the others
// get the release queued after the acquisition and run it as soon as they
// answer it. A release
// that gets no answer either (the master is paused, say, and will run the
// acquisition when it resumes) is handed to the cleaner.
func (b *Redlock) rollback(k lockRef, token string, ttl time.Duration, granted, settled []bool) {
	replies := make(chan masterReply, len(b.masters))
	for i, m := range b.masters {
		if settled[i] {
			continue // answered that the lock is another owner's, or failed before running
		}
		c := &masterCall{master: i, calls: []masterScript{b.releaseCall(i, k, token)}, reply: replies}
		c.after = func(r masterReply) {
			if err := r.cmds[0].Err(); err != nil && !errors.Is(err, errs.ErrClosed) {
				only := make([]bool, len(b.masters))
				only[i] = true
				b.takeBackOn(k, token, ttl, only)
			}
		}
		m.submit(c)
	}
	waiting := 0
	for _, g := range granted {
		if g {
			waiting++
		}
	}
	if waiting == 0 {
		return
	}
	timer := time.NewTimer(time.Second)
	defer timer.Stop()
	for waiting > 0 {
		select {
		case r := <-replies:
			if granted[r.master] {
				waiting--
			}
		case <-timer.C:
			return
		case <-b.closing:
			return
		}
	}
}

// releaseCall deletes token's lock on master i (redlock_release.lua); on
// the first master, which keeps the lock's wait queue, it also wakes the
// first waiter still listening. Every release goes so, a failed attempt's
// rollback and the cleaner's give-back too: a waiter queued behind a lock
// that an attempt took there and then gave back is woken by that
// give-back, not by its timer a holder's TTL later. A wake grants nothing
// (lockmw's wait_wake.go).
func (b *Redlock) releaseCall(i int, k lockRef, token string) masterScript {
	if i == 0 && b.subs != nil {
		return masterScript{script: redlockReleaseScript, keys: []string{k.lock, k.queue}, args: []any{token, k.grants}}
	}
	return masterScript{script: redlockReleaseScript, keys: []string{k.lock}, args: []any{token}}
}

// releaseOn releases token's lock on the masters marked in masters, in
// parallel, and unmarks those that answered; nil once none is left.
func (b *Redlock) releaseOn(ctx context.Context, k lockRef, token string, masters []bool) error {
	replies := make(chan masterReply, len(b.masters))
	sent := 0
	for i, m := range b.masters {
		if masters[i] {
			m.submit(&masterCall{master: i, calls: []masterScript{b.releaseCall(i, k, token)}, reply: replies})
			sent++
		}
	}
	var errs []error
	for ; sent > 0; sent-- {
		select {
		case r := <-replies:
			if err := r.cmds[0].Err(); err != nil {
				errs = append(errs, b.masterErr(r.master, err))
				continue
			}
			masters[r.master] = false
		case <-ctx.Done():
			return errors.Join(append(errs, ctx.Err())...)
		}
	}
	return errors.Join(errs...)
}

// release releases token's lock on the masters where it may be (all of
// them for a token this store did not acquire), the first master waking
// the first waiter of the lock's queue. A master not asked counts as one
// where the lock is not token's.
func (b *Redlock) release(ctx context.Context, k lockRef, token string) (store.Ownership, error) {
	n, q := len(b.masters), b.quorum
	var where []bool // nil: every master
	if v, ok := b.held.LoadAndDelete(heldKey(k, token)); ok {
		h := v.(*heldOn)
		h.mu.Lock()
		if h.renewing == 0 {
			// A renewal on the wire may take masters yet: then every
			// master gets the release, queued after that renewal.
			where = h.masters
		}
		h.masters = nil // renewals answered from now on record nothing
		h.mu.Unlock()
	}
	replies := make(chan masterReply, n)
	var t tally
	for i, m := range b.masters {
		if where != nil && !where[i] {
			t.add(store.Missing, nil)
			continue
		}
		m.submit(&masterCall{master: i, calls: []masterScript{b.releaseCall(i, k, token)}, reply: replies})
	}
	for !t.decided(n, q) {
		select {
		case r := <-replies:
			v, err := r.cmds[0].Int64()
			if v == redlockReleaseWoke { // deleted, and a waiter woken
				v = 1
				if b.onWake != nil {
					b.onWake(k.Key)
				}
			}
			t.add(ownershipOf(v), b.masterErr(r.master, err))
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return t.result(n, q)
}

// renew renews each lease on every master (redlock_renew.lua): where it
// is held it is extended, and a free master where it never was is taken,
// which spreads a lease acquired on a bare quorum over the others.
func (b *Redlock) Renew(ctx context.Context, reqs []store.RenewRequest) []store.RenewResult {
	n, q := len(b.masters), b.quorum
	held := make([]*heldOn, len(reqs))
	locks := make([]string, len(reqs))
	for i, r := range reqs {
		locks[i] = lockKeyOf(r.Key)
		if v, ok := b.held.Load(heldKeyOf(locks[i], r.Token)); ok {
			h := v.(*heldOn)
			h.mu.Lock()
			if h.masters != nil {
				held[i] = h
				h.renewing++
			}
			h.mu.Unlock()
		}
	}
	// Each master's answer records where a lease was taken, even one that
	// comes after the renewal was decided; once all have answered, the
	// renewal is off the wire.
	var answered sync.WaitGroup
	answered.Add(n)
	go func() {
		answered.Wait()
		for _, h := range held {
			if h != nil {
				h.mu.Lock()
				h.renewing--
				h.mu.Unlock()
			}
		}
	}()
	record := func(r masterReply) {
		defer answered.Done()
		for i, c := range r.cmds {
			if v, err := c.Int64(); err == nil && v == redlockRenewRetaken && held[i] != nil {
				h := held[i]
				h.mu.Lock()
				if h.masters != nil {
					h.masters[r.master] = true
				}
				h.mu.Unlock()
			}
		}
	}
	replies := make(chan masterReply, n)
	for m := range b.masters {
		calls := make([]masterScript, len(reqs))
		for i, r := range reqs {
			retake := "0"
			if h := held[i]; h != nil {
				h.mu.Lock()
				if h.masters != nil && !h.masters[m] {
					retake = "1"
				}
				h.mu.Unlock()
			}
			calls[i] = masterScript{script: redlockRenewScript, keys: []string{locks[i]}, args: []any{r.Token, millis(r.TTL), retake}}
		}
		b.masters[m].submit(&masterCall{master: m, calls: calls, reply: replies, after: record})
	}
	tallies := make([]tally, len(reqs))
	open := len(reqs)
collect:
	for answered := 0; open > 0 && answered < n; answered++ {
		var r masterReply
		select {
		case r = <-replies:
		case <-ctx.Done():
			break collect // the undecided get an error below
		}
		for i, c := range r.cmds {
			t := &tallies[i]
			if t.decided(n, q) {
				continue
			}
			v, err := c.Int64()
			if v == redlockRenewRetaken { // taken where the lease was not held (recorded by record)
				v = replyOwned
			}
			t.add(ownershipOf(v), b.masterErr(r.master, err))
			if t.decided(n, q) {
				open--
			}
		}
	}
	results := make([]store.RenewResult, len(reqs))
	for i := range tallies {
		results[i].Ownership, results[i].Err = tallies[i].result(n, q)
	}
	b.refreshInfo(reqs, results)
	return results
}

// tally counts the masters' answers to one compare-and-act request.
type tally struct {
	owned, missing, taken int
	errs                  []error
}

func (t *tally) add(o store.Ownership, err error) {
	switch {
	case err != nil:
		t.errs = append(t.errs, err)
	case o == store.Owned:
		t.owned++
	case o == store.Taken:
		t.taken++
	default:
		t.missing++
	}
}

// decided reports whether the answers so far settle the request: a quorum
// owns it, or so many masters do not that no quorum is left, or every
// master has answered.
func (t *tally) decided(n, q int) bool {
	return t.owned >= q || t.missing+t.taken > n-q || t.owned+t.missing+t.taken+len(t.errs) == n
}

// result is the request's outcome. The lock is owned while a quorum says
// so, and lost when a quorum says it is not (taken if any master holds
// another owner's token, else expired). Anything else (masters failing or
// not answering) is an error: the caller retries until the validity
// deadline, as with one Redis that does not answer.
func (t *tally) result(n, q int) (store.Ownership, error) {
	switch {
	case t.owned >= q:
		return store.Owned, nil
	case t.missing+t.taken > n-q && t.taken > 0:
		return store.Taken, nil
	case t.missing+t.taken > n-q:
		return store.Missing, nil
	}
	answered := t.owned + t.missing + t.taken
	err := fmt.Errorf("owned on %d of %d masters, %d needed; %d answered", t.owned, n, q, answered)
	if len(t.errs) > 0 {
		err = fmt.Errorf("%w: %w", err, errors.Join(t.errs...))
	}
	return 0, err
}

func (b *Redlock) masterErr(i int, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("master %d: %w", i, err)
}

// fanOut queues calls on every master and returns the channel their
// answers arrive on, one masterReply per master, in answer order. The
// channel is buffered, so answers nobody waits for are dropped with it.
func (b *Redlock) fanOut(calls []masterScript) <-chan masterReply {
	replies := make(chan masterReply, len(b.masters))
	for i, m := range b.masters {
		m.submit(&masterCall{master: i, calls: calls, reply: replies})
	}
	return replies
}

// masterScript is one script invocation, or with plain a plain
// acquisition: SET keys[0] args[0] NX PX args[1], then INCR keys[1] and,
// unless args[2] (the counter's expiry) is "", PEXPIRE keys[1] args[2],
// run one after the other, and the seed script after them when the
// counter was missing (answered as the acquire script is: {1, fence} or
// {0, 0}, the holder's TTL not asked).
type masterScript struct {
	script *redis.Script
	keys   []string
	args   []any
	plain  bool
}

// masterCall is a request queued for one master: scripts sent together in
// one pipeline, answered on reply.
type masterCall struct {
	master int
	calls  []masterScript
	reply  chan<- masterReply
	cmds   []*redis.Cmd
	// after, if set, is called with the reply once it is sent, by the
	// master's sender (it must not block), or by submit when the master is
	// closed (the reply's errors then match errs.ErrClosed).
	after func(masterReply)
}

// masterReply carries one master's answers to a masterCall, one Cmd per
// masterScript, each holding its result or its error.
type masterReply struct {
	master int
	cmds   []*redis.Cmd
}

// master sends the requests queued for one Redis master, in order,
// pipelining everything queued when a round trip starts.
type master struct {
	client  redis.UniversalClient
	signal  chan struct{} // a call was queued
	stop    chan struct{}
	stopped chan struct{}

	mu      sync.Mutex
	pending []*masterCall
	closed  bool
	seen    map[string]struct{} // scratch for take: lock keys in the round trip
}

func newMaster(client redis.UniversalClient) *master {
	m := &master{client: client, signal: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	go m.run()
	return m
}

func (m *master) submit(c *masterCall) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.fail(c, errs.ErrClosed)
		return
	}
	m.pending = append(m.pending, c)
	m.mu.Unlock()
	select {
	case m.signal <- struct{}{}:
	default:
	}
}

// close stops the sender once it has sent what is already queued (the
// last releases of a closing Locker); later calls fail with errs.ErrClosed.
func (m *master) close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	m.mu.Unlock()
	close(m.stop)
	<-m.stopped
}

func (m *master) fail(c *masterCall, err error) {
	cmds := make([]*redis.Cmd, len(c.calls))
	for i := range cmds {
		cmds[i] = redis.NewCmd(context.Background())
		cmds[i].SetErr(err)
	}
	r := masterReply{master: c.master, cmds: cmds}
	c.reply <- r
	if c.after != nil {
		c.after(r)
	}
}

// take moves into batch the queued calls that go in the next round trip:
// all of them, but one call per lock key (a call renewing several locks
// counts for each). exec resends in a second pipeline the scripts that
// answered NOSCRIPT (a restarted master); a later call of the same lock in
// the first pipeline would have run before them (the rollback of a failed
// acquisition before the acquisition, leaving the lock to a token nobody
// owns), so it waits for the next round trip. Caller holds m.mu.
func (m *master) take(batch []*masterCall) []*masterCall {
	if m.seen == nil {
		m.seen = make(map[string]struct{})
	}
	rest := m.pending[:0]
	for _, c := range m.pending {
		free := true
		for _, s := range c.calls {
			if _, ok := m.seen[s.keys[0]]; ok {
				free = false
			}
		}
		for _, s := range c.calls {
			m.seen[s.keys[0]] = struct{}{} // later calls of the same locks wait too
		}
		if free {
			batch = append(batch, c)
		} else {
			rest = append(rest, c)
		}
	}
	clear(m.seen)
	clear(m.pending[len(rest):])
	m.pending = rest
	return batch
}

func (m *master) run() {
	defer close(m.stopped)
	var batch []*masterCall
	for stopping := false; ; {
		select {
		case <-m.signal:
		case <-m.stop:
			stopping = true
		}
		m.mu.Lock()
		batch = m.take(batch[:0])
		more := len(m.pending) > 0
		m.mu.Unlock()
		if len(batch) > 0 {
			m.exec(batch)
			clear(batch)
		}
		if more {
			select { // the calls left for the next round trip
			case m.signal <- struct{}{}:
			default:
			}
		} else if stopping {
			return
		}
	}
}

// exec sends batch in one pipeline (by script SHA; scripts a restarted
// master has forgotten are resent in full in a second one) and answers each
// call.
func (m *master) exec(batch []*masterCall) {
	ctx := context.Background() // bounded by the client's read and write timeouts
	pipe := m.client.Pipeline()
	type plainCmds struct {
		call      *redis.Cmd
		set, incr *redis.Cmd
		keep      string     // the counter's expiry, "" for never
		fence     string     // the counter's key
		seed      *redis.Cmd // the follow-up draw when incr found the counter missing
	}
	var plains []plainCmds
	for _, c := range batch {
		c.cmds = make([]*redis.Cmd, len(c.calls))
		for i, s := range c.calls {
			if s.plain {
				c.cmds[i] = redis.NewCmd(ctx)
				keep, _ := s.args[2].(string)
				plains = append(plains, plainCmds{
					call:  c.cmds[i],
					set:   sendOnce(ctx, pipe, redis.NewCmd(ctx, "set", s.keys[0], s.args[0], "nx", "px", s.args[1])),
					incr:  sendOnce(ctx, pipe, redis.NewCmd(ctx, "incr", s.keys[1])),
					keep:  keep,
					fence: s.keys[1],
				})
				if keep != "" {
					sendOnce(ctx, pipe, redis.NewCmd(ctx, "pexpire", s.keys[1], keep))
				}
				continue
			}
			c.cmds[i] = s.script.EvalSha(ctx, once{pipe}, s.keys, s.args...)
		}
	}
	_, _ = pipe.Exec(ctx) // per-command errors are read by the callers

	// A counter found missing (INCR answered below seededFloor) is seeded
	// and drawn from again, with the scripts resent after NOSCRIPT, before
	// the lock's next call leaves; on a master where the lock was busy too,
	// so that the masters' counters keep in step.
	rs := resend{ctx: ctx, client: m.client}
	for i, p := range plains {
		if n, err := p.incr.Int64(); err == nil && p.keep != "" && n < seededFloor {
			plains[i].seed = rs.eval(seedScript, []string{p.fence}, p.keep)
		}
	}
	for _, c := range batch {
		for i, cmd := range c.cmds {
			if c.calls[i].plain {
				continue
			}
			if noScript(cmd.Err()) {
				s := c.calls[i]
				c.cmds[i] = rs.eval(s.script, s.keys, s.args...)
			}
		}
	}
	rs.send()

	for _, p := range plains {
		if p.seed != nil {
			p.incr = p.seed
		}
		switch err := p.set.Err(); {
		case errors.Is(err, redis.Nil):
			p.call.SetVal([]any{int64(acquireBusy), int64(0)})
		case err != nil:
			p.call.SetErr(err)
		case p.incr.Err() != nil:
			// Taken, but no fence drawn: the caller counts the master as
			// failed and gives the lock back there (rollback). Not wrapped:
			// the lock was set, so this must not read as a Redis reply that
			// says the request did not run (mayHaveRun).
			p.call.SetErr(fmt.Errorf("lock set but no fence drawn: %v", p.incr.Err()))
		default:
			n, _ := p.incr.Int64()
			p.call.SetVal([]any{int64(acquireTaken), n})
		}
	}
	for _, c := range batch {
		r := masterReply{master: c.master, cmds: c.cmds}
		c.reply <- r
		if c.after != nil {
			c.after(r)
		}
	}
}
