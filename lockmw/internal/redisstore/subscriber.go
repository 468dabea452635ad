package redisstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is how a Locker hears about releases: one subscription
// connection per Locker (per node on Cluster, where sharded pub/sub is
// used), shared by all of its waiters, subscribed to a lock's channels only
// while someone waits on that lock. A lost message costs a waiter latency,
// never liveness: every waiter also wakes on a timer.

// A grant channel nobody watches any more stays subscribed for
// subscriptionLinger: a process that waits in line for the same lock again
// soon (a worker that asks for it again once it has released it) then needs
// neither SUBSCRIBE nor UNSUBSCRIBE, nor the round trip before its waiter
// may queue. Grants that arrive meanwhile find no waiter and are passed on
// (Locker.handTo). Release channels do not linger: transfer.lua counts
// their subscribers as Lockers that wait.
const subscriptionLinger = 2 * time.Second

// subscriber multiplexes a Locker's channel subscriptions.
type subscriber struct {
	client  redis.UniversalClient
	sharded bool

	mu      sync.Mutex
	deliver func(channel, payload string) // set once by the Locker before use
	conns   map[string]*subConn           // by node address ("" when not sharded)
	chans   map[string]*watch             // by channel
	closed  bool
}

// subConn is one pub/sub connection and the goroutine that reads it.
type subConn struct {
	ps    *redis.PubSub
	chans int // channels subscribed through it
}

// watch is one subscribed channel.
type watch struct {
	refs  int
	conn  *subConn
	ready chan struct{} // closed when Redis confirmed the subscription
	idle  *time.Timer   // while refs is 0: unsubscribes when it fires
	// lingers: stays subscribed for subscriptionLinger after the last
	// unwatch.
	lingers bool
}

func newSubscriber(client redis.UniversalClient) *subscriber {
	_, sharded := client.(*redis.ClusterClient)
	return &subscriber{
		client:  client,
		sharded: sharded,
		conns:   make(map[string]*subConn),
		chans:   make(map[string]*watch),
	}
}

var errSubscriberClosed = errors.New("lockmw: subscriber closed")

// watch subscribes to channel (if nobody already has) and waits until Redis
// has confirmed the subscription, so that a message published after watch
// returns is delivered. Every successful watch needs one unwatch. With
// linger, the channel stays subscribed for a while after the last unwatch.
func (s *subscriber) watch(ctx context.Context, channel string, linger bool) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errSubscriberClosed
	}
	w := s.chans[channel]
	if w == nil {
		conn, err := s.connFor(ctx, channel)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		w = &watch{conn: conn, ready: make(chan struct{}), lingers: linger}
		s.chans[channel] = w
		conn.chans++
		var subErr error
		if s.sharded {
			subErr = conn.ps.SSubscribe(ctx, channel)
		} else {
			subErr = conn.ps.Subscribe(ctx, channel)
		}
		if subErr != nil {
			s.drop(channel, w)
			s.mu.Unlock()
			return subErr
		}
	}
	if w.idle != nil {
		w.idle.Stop() // should it fire meanwhile, expire sees refs > 0
		w.idle = nil
	}
	w.refs++
	s.mu.Unlock()

	// A confirmation can be lost for good: during a Cluster resharding the
	// node answers SSUBSCRIBE with MOVED and go-redis resubscribes there
	// again and again. The caller then waits on timers alone.
	t := time.NewTimer(subscribeTimeout)
	defer t.Stop()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		s.unwatch(channel)
		return ctx.Err()
	case <-t.C:
		s.unwatch(channel)
		return errSubscribeTimeout
	}
}

// subscribeTimeout bounds the wait for Redis to confirm a subscription.
const subscribeTimeout = time.Second

var errSubscribeTimeout = errors.New("lockmw: redis did not confirm the subscription")

// unwatch drops one watch of channel; after the last, the channel is
// unsubscribed once it has not been watched for subscriptionLinger.
func (s *subscriber) unwatch(channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.chans[channel]
	if w == nil {
		return
	}
	if w.refs--; w.refs > 0 {
		return
	}
	confirmed := false
	select {
	case <-w.ready:
		confirmed = true
	default: // never confirmed (a timeout, a resharding): drop it now
	}
	if !w.lingers || !confirmed {
		s.unsubscribe(channel, w)
		return
	}
	w.idle = time.AfterFunc(subscriptionLinger, func() { s.expire(channel, w) })
}

// expire unsubscribes channel if w is still its watch and nobody watches it.
func (s *subscriber) expire(channel string, w *watch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.chans[channel] != w || w.refs > 0 {
		return
	}
	s.unsubscribe(channel, w)
}

// unsubscribe forgets channel and tells Redis. Caller holds s.mu.
func (s *subscriber) unsubscribe(channel string, w *watch) {
	w.idle = nil
	s.drop(channel, w)
	ctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
	defer cancel()
	if s.sharded {
		_ = w.conn.ps.SUnsubscribe(ctx, channel)
	} else {
		_ = w.conn.ps.Unsubscribe(ctx, channel)
	}
}

// unsubscribeTimeout bounds the write of an UNSUBSCRIBE.
const unsubscribeTimeout = time.Second

// drop forgets channel. Caller holds s.mu.
func (s *subscriber) drop(channel string, w *watch) {
	delete(s.chans, channel)
	w.conn.chans--
}

// connFor returns the connection a channel is subscribed through, opening
// it if needed. Caller holds s.mu.
func (s *subscriber) connFor(ctx context.Context, channel string) (*subConn, error) {
	node := ""
	var client interface {
		Subscribe(context.Context, ...string) *redis.PubSub
		SSubscribe(context.Context, ...string) *redis.PubSub
	} = s.client
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		// Sharded pub/sub reaches only the node that owns the channel's
		// slot: one connection per node.
		nc, err := cc.MasterForKey(ctx, channel)
		if err != nil {
			return nil, err
		}
		node = nc.Options().Addr
		client = nc
	}
	if c := s.conns[node]; c != nil {
		return c, nil
	}
	var ps *redis.PubSub
	if s.sharded {
		ps = client.SSubscribe(context.Background())
	} else {
		ps = client.Subscribe(context.Background())
	}
	c := &subConn{ps: ps}
	s.conns[node] = c
	go s.read(c)
	return c, nil
}

// read delivers c's messages and confirmations until c is closed.
func (s *subscriber) read(c *subConn) {
	for m := range c.ps.ChannelWithSubscriptions() {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" && m.Kind != "ssubscribe" {
				continue
			}
			s.mu.Lock()
			if w := s.chans[m.Channel]; w != nil && w.conn == c {
				select {
				case <-w.ready:
				default:
					close(w.ready)
				}
			}
			s.mu.Unlock()
		case *redis.Message:
			s.deliver(m.Channel, m.Payload)
		}
	}
}

// close closes every subscription connection.
func (s *subscriber) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, c := range s.conns {
		_ = c.ps.Close()
	}
	s.conns = nil
	for ch, w := range s.chans {
		if w.idle != nil {
			w.idle.Stop()
		}
		delete(s.chans, ch)
		select {
		case <-w.ready:
		default:
			close(w.ready)
		}
	}
}
