package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

// This file tests the subscriber (subscriber.go) on a real Redis: what it
// hears once its connection has broken.

// A subscription whose connection breaks is made again on a new one: a
// message published once Redis has it again is delivered, and the caller
// need not watch anew.
func TestSubscriberResubscribesAfterItsConnectionBreaks(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	s := newSubscriber(srv.Client(t))
	heard := make(chan string, 16)
	s.deliver = func(channel, payload string) { heard <- channel + " " + payload }
	t.Cleanup(s.close)
	const ch = "lockmw:{k}:n"
	if err := s.watch(ctx, ch, false); err != nil {
		t.Fatal(err)
	}
	expect := func(want string) {
		t.Helper()
		select {
		case got := <-heard:
			if got != want {
				t.Fatalf("heard %q, want %q", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%q not heard within 5s", want)
		}
	}
	admin.Publish(ctx, ch, "before")
	expect(ch + " before")

	killed, err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Result()
	if err != nil || killed != 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub: %d, %v; want 1 connection killed", killed, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := admin.PubSubNumSub(ctx, ch).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n[ch] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not subscribed again within 5s of its connection's end", ch)
		}
		time.Sleep(10 * time.Millisecond)
	}
	admin.Publish(ctx, ch, "after")
	expect(ch + " after")
}
