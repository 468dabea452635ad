package postgres

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// A waiting acquisition's first request (Enqueue, see "Waiting" in
// doc.go): a plain attempt on a lock the store has not found busy lately,
// followed at once by the queued attempt when the lock is held; the queued
// attempt alone on a lock found busy lately.

// batches records the first statement of every batch sent on a pool, and
// every statement of a batch.
type batches struct {
	mu    sync.Mutex
	first []string
	all   []string
}

func (b *batches) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (b *batches) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (b *batches) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.first = append(b.first, d.Batch.QueuedQueries[0].SQL)
	return ctx
}
func (b *batches) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.all = append(b.all, d.SQL)
}

func (b *batches) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// statements returns the statements of the batches sent since the last
// call, each named by s's statements (or "other").
func (b *batches) statements(s *pgStore) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	known := map[string]string{
		s.sql.insertLease: "insertLease", s.sql.fence: "fence", s.sql.readRow: "readRow",
		s.sql.takeFresh: "takeFresh", s.sql.takeFreshInfo: "takeFreshInfo",
		s.sql.insertLeaseQueued: "insertLeaseQueued", s.sql.enqueueFence: "enqueueFence",
		s.sql.lockOwn: "lockOwn", s.sql.dropEntry: "dropEntry", s.sql.freeIfUnqueued: "freeIfUnqueued",
		s.sql.release: "release", s.sql.handOver: "handOver",
	}
	var out []string
	for _, q := range b.all {
		k, ok := known[q]
		if !ok {
			k = "other"
		}
		out = append(out, k)
	}
	b.all = nil
	return out
}

// sent returns the kinds of the batches sent since the last call, named
// by kinds from their first statement (others are left out).
func (b *batches) sent(kinds map[string]string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, q := range b.first {
		if k, ok := kinds[q]; ok {
			out = append(out, k)
		}
	}
	b.first = nil
	return out
}

// attempts returns the kinds of acquisition batches sent since the last
// call: "plain" or "queued".
func (b *batches) attempts(s *pgStore) []string {
	return b.sent(map[string]string{s.sql.takeFresh: "plain", s.sql.insertLease: "plain", s.sql.insertLeaseQueued: "queued"})
}

// tracedStore is a store on a pool whose batches tr records.
func tracedStore(t *testing.T) (context.Context, *pgxpool.Pool, *pgStore, *batches) {
	t.Helper()
	tr := &batches{}
	ctx, pool, s := startStoreWith(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = tr })
	return ctx, pool, s, tr
}

func TestFirstRequestOfWaitingAcquisition(t *testing.T) {
	ctx, pool, s, tr := tracedStore(t)
	k := store.Key{Prefix: "lockmw:", Name: "first"}

	// A free lock: one plain attempt takes it, and no queue row is
	// written.
	r, err := s.Enqueue(ctx, k, "a", handTTL, true)
	if err != nil || !r.Acquired {
		t.Fatalf("a's enqueue of a free lock: %+v, %v", r, err)
	}
	if got := tr.attempts(s); strings.Join(got, ",") != "plain" {
		t.Fatalf("a free lock's waiting acquisition sent %v, want one plain attempt", got)
	}
	s.lis.mu.Lock()
	running := s.lis.running
	s.lis.mu.Unlock()
	if running {
		t.Fatal("a free lock's waiting acquisition started the listening connection")
	}

	// Held by a: w's plain attempt finds it busy, and the queued attempt
	// follows in the same Enqueue, so that w has an entry a's release
	// hands the lock to (without it, w would wait for a's expiry).
	w, err := s.Enqueue(ctx, k, "w", handTTL, true)
	if err != nil || w.Acquired {
		t.Fatalf("w's enqueue behind a: %+v, %v", w, err)
	}
	if got := tr.attempts(s); strings.Join(got, ",") != "plain,queued" {
		t.Fatalf("the first waiting acquisition of a held lock sent %v, want a plain attempt and then the queued one", got)
	}
	if n := entries(t, ctx, pool, k, "w"); n != 1 {
		t.Fatalf("w has %d queue entries after its enqueue, want 1", n)
	}
	listening(t, s, "w")
	if _, _, fence := release(t, ctx, pool, s, k, "a"); fence == 0 {
		t.Fatal("a's release handed nothing to w")
	}
	if token, _, _ := leaseRow(t, ctx, pool, k); token != "w" {
		t.Fatalf("the row's token after a's release is %q, want w", token)
	}

	// Found busy lately: x's first request is the queued attempt alone.
	x, err := s.Enqueue(ctx, k, "x", handTTL, true)
	if err != nil || x.Acquired {
		t.Fatalf("x's enqueue behind w: %+v, %v", x, err)
	}
	if got := tr.attempts(s); strings.Join(got, ",") != "queued" {
		t.Fatalf("a waiting acquisition of a lock found busy lately sent %v, want the queued attempt alone", got)
	}
}
