package postgres_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lockmw/lockmw/internal/testkit/pgtest"
)

// This file's one job: the ceiling of a hand-over through a lease row on
// PostgreSQL, measured beside lockmw in BenchmarkContended.
//
// preparedHandOver is not a lock to use: its holder keeps a transaction
// open and a connection pinned for the whole hold, its row has no expiry
// (a crashed holder keeps it for ever) and nothing renews it. It is the
// least idle time a hand-over through a row can leave between two holders,
// with nothing of lockmw's safety: the hand-over is written while the lock
// is held (the new holder's token in the row, its queue entry deleted, in
// a transaction left open), so that a release is one COMMIT; and the next
// waiter is woken by PostgreSQL's lock manager, not by a notification:
// each waiter holds a session advisory lock of its own from the start of
// its acquisition to its release, and waits, in one round trip, for the
// advisory lock of the one queued before it (or of the holder), then reads
// the row. No NOTIFY is sent, so no listening backend is signalled.
//
// A release is thus COMMIT then pg_advisory_unlock in one round trip; the
// next holder's backend wakes at the unlock and reads the committed row.
type preparedHandOver struct {
	tb testing.TB
	c  *pgx.Conn
	id string
}

// preparedTokens numbers preparedHandOver's acquisitions: a token per
// acquisition, so that a waiter never waits for a later acquisition of the
// contender before it.
var preparedTokens atomic.Int64

// preparedTables makes preparedHandOver's row, queue and sequence on srv.
func preparedTables(tb testing.TB, srv *pgtest.Server) {
	srv.Exec(tb, `CREATE TABLE prepared_lease (name text PRIMARY KEY, token text NOT NULL, fence bigint NOT NULL);
	CREATE TABLE prepared_queue (name text, token text, seq bigint NOT NULL, PRIMARY KEY (name, token));
	CREATE INDEX ON prepared_queue (name, seq);
	CREATE SEQUENCE prepared_seq`)
}

func newPreparedHandOver(tb testing.TB, srv *pgtest.Server, st *statements, id string) *preparedHandOver {
	cfg, err := pgx.ParseConfig(srv.URL())
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Tracer = st
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close(context.Background()) })
	return &preparedHandOver{tb: tb, c: c, id: id}
}

// The statements of preparedHandOver. $1 is the key, $2 a token; a token's
// advisory lock is the 64-bit hash of key and token.
const (
	preparedNode    = `SELECT pg_advisory_lock(hashtextextended($1 || ' ' || $2, 0))`
	preparedUnnode  = `SELECT pg_advisory_unlock(hashtextextended($1 || ' ' || $2, 0))`
	preparedAwait   = `SELECT pg_advisory_lock_shared(hashtextextended($1 || ' ' || $2, 0))`
	preparedUnawait = `SELECT pg_advisory_unlock_shared(hashtextextended($1 || ' ' || $2, 0))`
	// preparedQueue queues $2 and returns whom it waits for: the entry
	// before its own, else the holder, else nobody ('').
	preparedQueue = `WITH e AS (INSERT INTO prepared_queue (name, token, seq) VALUES ($1, $2, nextval('prepared_seq')) RETURNING seq)
SELECT COALESCE((SELECT q.token FROM prepared_queue q, e WHERE q.name = $1 AND q.seq < e.seq ORDER BY q.seq DESC LIMIT 1),
	(SELECT token FROM prepared_lease WHERE name = $1), '')`
	// preparedBefore is whom queued $2 waits for now.
	preparedBefore = `SELECT COALESCE((SELECT q.token FROM prepared_queue q WHERE q.name = $1
	AND q.seq < (SELECT seq FROM prepared_queue WHERE name = $1 AND token = $2) ORDER BY q.seq DESC LIMIT 1),
	(SELECT token FROM prepared_lease WHERE name = $1), '')`
	preparedHolder = `SELECT COALESCE((SELECT token FROM prepared_lease WHERE name = $1), '')`
	// preparedTake takes a missing row for $2, taking its entry out.
	preparedTake = `WITH t AS (INSERT INTO prepared_lease (name, token, fence) VALUES ($1, $2, nextval('prepared_seq')) ON CONFLICT DO NOTHING RETURNING 1)
DELETE FROM prepared_queue WHERE name = $1 AND token = $2 AND EXISTS (SELECT 1 FROM t)`
	// preparedHand writes the hand-over from holder $2 to the first entry;
	// preparedFree deletes the row when nobody was queued.
	preparedHand = `WITH f AS (SELECT token FROM prepared_queue WHERE name = $1 ORDER BY seq LIMIT 1 FOR UPDATE),
u AS (UPDATE prepared_lease l SET token = f.token, fence = nextval('prepared_seq') FROM f WHERE l.name = $1 AND l.token = $2 RETURNING f.token)
DELETE FROM prepared_queue q USING u WHERE q.name = $1 AND q.token = u.token`
	preparedFree = `DELETE FROM prepared_lease WHERE name = $1 AND token = $2`
)

// Lock queues, waits until the row names its token, prepares the
// hand-over while the caller holds the lock, and returns the release.
func (m *preparedHandOver) Lock(ctx context.Context, key string) (func(), error) {
	tok := m.id + "." + strconv.FormatInt(preparedTokens.Add(1), 10)
	var before string
	b := &pgx.Batch{}
	b.Queue(preparedNode, key, tok)
	b.Queue(preparedQueue, key, tok).QueryRow(func(r pgx.Row) error { return r.Scan(&before) })
	if err := m.send(ctx, b); err != nil {
		return nil, err
	}
	for {
		if before == "" {
			tag, err := m.c.Exec(ctx, preparedTake, key, tok)
			if err != nil {
				return nil, err
			}
			if tag.RowsAffected() == 1 {
				break
			}
			if err := m.c.QueryRow(ctx, preparedHolder, key).Scan(&before); err != nil {
				return nil, err
			}
			continue
		}
		var holder string
		b := &pgx.Batch{}
		b.Queue(preparedAwait, key, before)
		b.Queue(preparedHolder, key).QueryRow(func(r pgx.Row) error { return r.Scan(&holder) })
		b.Queue(preparedUnawait, key, before)
		if err := m.send(ctx, b); err != nil {
			return nil, err
		}
		if holder == tok {
			break
		}
		if err := m.c.QueryRow(ctx, preparedBefore, key, tok).Scan(&before); err != nil {
			return nil, err
		}
	}
	prepare := &pgx.Batch{}
	prepare.Queue("BEGIN")
	prepare.Queue(preparedHand, key, tok)
	prepare.Queue(preparedFree, key, tok)
	prepared := make(chan error, 1)
	go func() { prepared <- m.send(ctx, prepare) }()
	return func() {
		if err := <-prepared; err != nil {
			m.tb.Error(err)
		}
		release := &pgx.Batch{}
		release.Queue("COMMIT")
		release.Queue(preparedUnnode, key, tok)
		if err := m.send(ctx, release); err != nil {
			m.tb.Error(err)
		}
	}, nil
}

// send sends b in one round trip and returns its first error.
func (m *preparedHandOver) send(ctx context.Context, b *pgx.Batch) error {
	return m.c.SendBatch(ctx, b).Close()
}
