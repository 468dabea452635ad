package postgres

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file answers Locker.Inspect and Locker.Locks (store.Inspector):
// one read-only statement each, by the database's clock, reading the
// lease row, its queue entries and the fence sequence without a lock of
// any kind (a plain snapshot read, which no lock step waits on), and the
// holder description that a Locker given lockmw.WithHolderInfo writes with
// its acquisitions, and hand-overs copy from its queue entries (see
// "Inspecting" in doc.go).

// UseHolderInfo makes the Locker's acquisitions write info into the rows
// they take and the queue entries they make (insertLeaseInfo,
// insertLeaseQueuedInfo, enqueueFenceInfo), from which hand-overs copy it.
// It is called before the Locker's first acquisition, and only with a
// description.
func (s *pgStore) UseHolderInfo(info string) { s.holderInfo = info }

// inspectCols are the columns an inspection reads of the lock whose row
// name is row, from l (its lease row, or NULLs), c.now (the statement's
// one reading of the database's clock) and the queue: whether it is held,
// the microseconds left of it (when held), the row's fence (when there is
// a row), the holder's description and acquisition time (when held by
// the token that wrote them), and its unexpired queue entries.
func inspectCols(n names, row string) string {
	return `l.expires_at > c.now AS held,
	CASE WHEN l.expires_at > c.now THEN (extract(epoch FROM l.expires_at - c.now) * 1e6)::bigint END AS us,
	l.fence AS fence,
	CASE WHEN l.expires_at > c.now AND l.holder_token = l.token THEN l.holder_info END AS holder,
	CASE WHEN l.expires_at > c.now AND l.holder_token = l.token THEN l.holder_since END AS since,
	(SELECT count(*) FROM ` + n.queue + ` q WHERE q.name = ` + row + ` AND q.expires_at > c.now) AS waiters`
}

// inspectSQL is Inspect's statement ($1: the row name), with the fence
// sequence's last value (NULL before its first), which the next holder's
// fence will be above, for a lock without a row.
func inspectSQL(n names) string {
	return `WITH c AS (SELECT clock_timestamp() AS now)
SELECT ` + inspectCols(n, "$1") + `, pg_sequence_last_value(` + n.seqLit + `::regclass)
FROM c LEFT JOIN ` + n.table + ` l ON l.name = $1`
}

// listBudget is how many rows of the lease table a page of List reads at
// most, for a page of limit: the rows under the prefix whose holding
// ended and that nobody waits for (left by crashed holders until the
// sweep) are skipped, but not more than this many per page.
func listBudget(limit int) int { return 2*limit + 100 }

// listSQL is List's statement: $1 the cursor's row name ("" for the
// first page), [$2, $3) and [$4, $5) the ranges of the prefix's plain and
// hex row names (byte order: collation "C", served by the primary key of
// a table whose names are COLLATE "C", or else by the _names index), $6
// the budget, $7 the limit. It reads at most $6 rows of the lease table
// after the cursor (two ordered, limited index scans), and returns the
// last name read and how many were read (for the next cursor), with each
// of the rows read that is held, or that waiters wait for, $7 at most, in
// one row each (one row of NULLs when none is).
func listSQL(n names) string {
	branch := func(lo, hi string) string {
		return `(SELECT name COLLATE "C" AS k, name, token, fence, expires_at, holder_info, holder_token, holder_since FROM ` + n.table + `
	WHERE name COLLATE "C" > $1 AND name COLLATE "C" >= ` + lo + ` AND name COLLATE "C" < ` + hi + `
	ORDER BY name COLLATE "C" LIMIT $6)`
	}
	return `WITH c AS (SELECT clock_timestamp() AS now),
s AS (
	` + branch("$2", "$3") + `
	UNION ALL
	` + branch("$4", "$5") + `
	ORDER BY k LIMIT $6
), m AS (SELECT max(k) AS last, count(*) AS n FROM s)
SELECT m.last, m.n, r.* FROM m LEFT JOIN LATERAL (
	SELECT l.name, ` + inspectCols(n, "l.name") + `
	FROM s l CROSS JOIN c
	WHERE l.expires_at > c.now OR EXISTS (SELECT 1 FROM ` + n.queue + ` q WHERE q.name = l.name AND q.expires_at > c.now)
	ORDER BY l.k LIMIT $7
) r ON true`
}

// Inspect reports lock k's state: held, TTL left, fence and waiters as the
// rows keep them (Exact); the holder's description and acquisition time
// when its Locker wrote them (Exact), else Unknown; FairWaiters Unknown
// (an entry does not say its waiter's mode). A lock without a row reports
// the fence sequence's last value, AtMost.
func (s *pgStore) Inspect(ctx context.Context, k store.Key) (store.Inspection, error) {
	c, err := s.conn(ctx)
	if err != nil {
		return store.Inspection{}, err
	}
	defer c.Release()
	var (
		held         *bool
		us, fence    *int64
		holder       *string
		since        *time.Time
		waiters      int64
		lastSequence *int64
	)
	err = c.QueryRow(ctx, s.sql.inspect, name(k)).Scan(&held, &us, &fence, &holder, &since, &waiters, &lastSequence)
	if err != nil {
		return store.Inspection{}, s.inspectErr(err)
	}
	in := inspection(k.Name, held, us, fence, holder, since, waiters)
	if fence == nil && lastSequence != nil {
		in.Fence = store.Reading[uint64]{Value: uint64(*lastSequence), Is: store.AtMost}
	}
	return in, nil
}

// inspection is a lock's Inspection from the columns of inspectCols.
func inspection(key string, held *bool, us, fence *int64, holder *string, since *time.Time, waiters int64) store.Inspection {
	in := store.Inspection{
		Name:    key,
		Held:    held != nil && *held,
		Waiters: store.Reading[int]{Value: int(waiters), Is: store.Exact},
	}
	if in.Held && us != nil {
		in.TTL = store.Reading[time.Duration]{Value: time.Duration(*us) * time.Microsecond, Is: store.Exact}
	}
	if fence != nil && *fence > 0 {
		in.Fence = store.Reading[uint64]{Value: uint64(*fence), Is: store.Exact}
	}
	if in.Held && holder != nil {
		in.Holder = store.Reading[string]{Value: *holder, Is: store.Exact}
	}
	if in.Held && since != nil {
		in.Since = store.Reading[time.Time]{Value: *since, Is: store.Exact}
	}
	return in
}

// List returns the held (or waited-for) locks under prefix after cursor,
// in byte order of their row names, reading at most listBudget(limit)
// lease rows (see listSQL). A lock whose row is gone while waiters are
// queued for it (between a release and the first waiter's acquisition)
// is not listed.
func (s *pgStore) List(ctx context.Context, prefix, cursor string, limit int) ([]store.Inspection, string, error) {
	r := prefixRanges(prefix)
	after := ""
	if cursor != "" {
		var err error
		if after, err = r.decodeCursor(cursor); err != nil {
			return nil, "", err
		}
	}
	c, err := s.conn(ctx)
	if err != nil {
		return nil, "", err
	}
	defer c.Release()
	budget := listBudget(limit)
	rows, err := c.Query(ctx, s.sql.list, after, r.plainLo, r.plainHi, r.hexLo, r.hexHi, budget, limit)
	if err != nil {
		return nil, "", s.inspectErr(err)
	}
	var (
		page []store.Inspection
		last *string
		read int64
	)
	for rows.Next() {
		var (
			row          *string
			held         *bool
			us, fence    *int64
			holder       *string
			since        *time.Time
			waiters      *int64
			lastOfBudget *string
		)
		if err := rows.Scan(&lastOfBudget, &read, &row, &held, &us, &fence, &holder, &since, &waiters); err != nil {
			rows.Close()
			return nil, "", s.inspectErr(err)
		}
		last = lastOfBudget
		if row == nil {
			continue
		}
		key, ok := r.key(*row)
		if !ok {
			continue // not under prefix: cannot be, by the ranges
		}
		var w int64
		if waiters != nil {
			w = *waiters
		}
		page = append(page, inspection(key, held, us, fence, holder, since, w))
	}
	if err := rows.Err(); err != nil {
		return nil, "", s.inspectErr(err)
	}
	next := ""
	switch {
	case len(page) == limit:
		// Named by the last listed lock's row: the next page starts after it.
		next = r.encodeCursor(r.rowOf(page[len(page)-1].Name))
	case read >= int64(budget) && last != nil:
		// The budget ran out before limit locks were found: the next page
		// reads on from the last row read.
		next = r.encodeCursor(*last)
	}
	return page, next, nil
}

// inspectErr is the error of an inspection or listing statement: a table
// without the holder columns (made by a release before Inspect, not
// migrated) says to migrate it.
func (s *pgStore) inspectErr(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42703" {
		return fmt.Errorf("%w: %s %s (%w)", ErrNoTable, s.n.table, inspectHint, err)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("postgres: inspecting: no answer row (%w)", err)
	}
	return classify(err)
}

// inspectHint says what to do about a lease table without the holder
// columns and the listing's index.
const inspectHint = "lacks the holder_info, holder_token and holder_since columns, or its queue table holder_info (made by a release before Inspect): migrate it by running postgres.CreateTable(ctx, pool) again, or the ALTER TABLE and CREATE INDEX statements of the new SQL()"

// ranges are the row names of a prefix's locks: plain names start with
// plainLo (none when the prefix is no text: then plainLo = plainHi = ""),
// hex names (see name) with hexLo; each *Hi is the least string above
// every name starting with its *Lo.
type ranges struct {
	prefix                         string
	plainLo, plainHi, hexLo, hexHi string
}

func prefixRanges(prefix string) ranges {
	p := strconv.Itoa(len(prefix)) + ":" + prefix
	r := ranges{prefix: prefix, hexLo: hexName(p)}
	r.hexHi = above(r.hexLo)
	if textHolds(p) {
		r.plainLo, r.plainHi = p, above(p)
	}
	return r
}

// above returns the least valid UTF-8 string above every string that
// starts with s (s is valid UTF-8, and starts with a digit or a
// backslash, so it never runs out of characters to raise): its last
// character that can be raised, raised by one, with what followed it
// dropped. Byte order of UTF-8 is code point order.
func above(s string) string {
	for len(s) > 0 {
		r, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
		switch {
		case r == utf8.MaxRune:
			continue
		case r == 0xD7FF: // the surrogates are no characters
			return s + string(rune(0xE000))
		default:
			return s + string(r+1)
		}
	}
	return s
}

// key returns the key of row, a row name under the prefix.
func (r ranges) key(row string) (string, bool) {
	if r.plainLo != "" && strings.HasPrefix(row, r.plainLo) {
		return row[len(r.plainLo):], true
	}
	if !strings.HasPrefix(row, r.hexLo) {
		return "", false
	}
	b, err := hex.DecodeString(row[len(`\x`):])
	p := strconv.Itoa(len(r.prefix)) + ":" + r.prefix
	if err != nil || !strings.HasPrefix(string(b), p) {
		return "", false
	}
	return string(b)[len(p):], true
}

// rowOf is the row name of key under the prefix.
func (r ranges) rowOf(key string) string { return name(store.Key{Prefix: r.prefix, Name: key}) }

// cursorVersion starts every cursor List makes: the format's version.
const cursorVersion = "pg1."

// encodeCursor is the cursor after row: its version and the row name in
// unpadded URL-safe base64.
func (r ranges) encodeCursor(row string) string {
	return cursorVersion + base64.RawURLEncoding.EncodeToString([]byte(row))
}

// decodeCursor returns the row name a cursor of this prefix's listing
// names, or an error matching store.ErrBadCursor.
func (r ranges) decodeCursor(cursor string) (string, error) {
	enc, ok := strings.CutPrefix(cursor, cursorVersion)
	if !ok {
		return "", fmt.Errorf("postgres: the cursor does not start with %q: %w", cursorVersion, store.ErrBadCursor)
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return "", fmt.Errorf("postgres: the cursor is not base64 (%v): %w", err, store.ErrBadCursor)
	}
	row := string(b)
	if _, ok := r.key(row); !ok || !utf8.ValidString(row) {
		return "", fmt.Errorf("postgres: the cursor names no lock under the prefix %q (a cursor of another prefix?): %w", r.prefix, store.ErrBadCursor)
	}
	return row, nil
}
