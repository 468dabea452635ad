package mysql

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file answers an operator's questions about the store's locks
// (store.Inspector): Inspect and List read the lock table and its queue
// with plain consistent reads (no row locks: no lock step waits for them),
// and the holder description a Locker was given (UseHolderInfo) is written
// beside its holdings, bound to the holding's token. See the package
// documentation, "Inspecting".

var _ store.Inspector = (*sqlStore)(nil)

// UseHolderInfo keeps info (lockmw.WithHolderInfo) for the Locker's
// acquisition statements, which write it with each holding they take; it
// is called before the first acquisition.
func (s *sqlStore) UseHolderInfo(info string) { s.info = info }

// The byte between the token and the description in the holder column
// says what held_since is: the start of the acquisition statement that
// took the holding (sinceTaken), or when its Locker learnt that a release
// handed it the lock, after the hand-over (sinceHanded).
const (
	sinceTaken  = "\x00"
	sinceHanded = "\x01"
)

// holderLit is the holder column's value for token's holding: the token, a
// sinceTaken or sinceHanded byte, the description. Tokens (hex) and
// descriptions (printable) hold neither byte, so the value names its token
// exactly (see inspectCols).
func (s *sqlStore) holderLit(token, since string) string { return hexLit(token + since + s.info) }

// describeRow is takeRowText's assignments of the holder description and
// the holding's start, taken when take (the statement's decision) holds,
// the value a parameter (takeRowStmt); "" for a Locker without a
// description, whose statement is as it was before descriptions.
func (s *sqlStore) describeRow(take string) string {
	if s.info == "" {
		return ""
	}
	return "holder = IF(" + take + ", " + placeholder + ", holder), held_since = IF(" + take + ", UTC_TIMESTAMP(6), held_since), "
}

// ownDescribed is own, for an attempt that found token holding k's row
// already (a release handed it the lock): the description is written as
// describeHanded does.
func (s *sqlStore) ownDescribed(ctx context.Context, k store.Key, token string, ttl time.Duration) (store.Reply, error) {
	r, err := s.own(ctx, k, token, ttl)
	if err == nil && r.Acquired {
		s.describeHanded(ctx, k, token, ttl)
	}
	return r, err
}

// describeHanded writes the description of a Locker with one into k's
// row, which a release handed to token (releaseStmt, which does not know
// the new holder's description): one UPDATE bound to token's live
// holding, with held_since now, by which the hand-over had happened (when
// is not kept: Inspect reports Since as at most that). It leaves a row
// whose holder names token already as it is. A
// failure leaves the holding undescribed (Inspect: Holder unknown), never
// the lease in doubt: the description is never read for safety.
func (s *sqlStore) describeHanded(ctx context.Context, k store.Key, token string, ttl time.Duration) {
	if s.info == "" {
		return
	}
	_, _ = s.exec(ctx, ttl, bounded(ttl, "UPDATE "+s.n.locks+" l SET l.holder = "+s.holderLit(token, sinceHanded)+", l.held_since = UTC_TIMESTAMP(6)"+
		" WHERE "+keyWhere("l", k)+" AND l.token = "+hexLit(token)+" AND l.expires_at > UTC_TIMESTAMP(6) AND NOT IFNULL("+heldBy+", FALSE)"))
}

// heldBy is true when the holder column of the lock row l names the
// row's token: this holding's Locker wrote it (a holder of another token,
// of a Locker with or without a description, old or new, leaves holder
// naming the earlier token, or NULL).
const heldBy = "(l.token <> X'' AND LEFT(l.holder, LENGTH(l.token)) = l.token AND SUBSTRING(l.holder, LENGTH(l.token) + 1, 1) IN (X'00', X'01'))"

// inspectCols are the columns Inspect and List read of the lock row l
// (and its queue entries), with their names: fence, live, µs left, the
// holder's description, the holding's start in µs since the epoch and
// the byte that says what that start is (the three NULL unless holder
// names the row's token), and the count of live queue entries of tokens
// other than the holder's.
func (s *sqlStore) inspectCols() (exprs, names []string) {
	return []string{
			"l.fence",
			"(l.token <> X'' AND l.expires_at > UTC_TIMESTAMP(6))",
			"TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), l.expires_at)",
			"IF(" + heldBy + ", SUBSTRING(l.holder, LENGTH(l.token) + 2), NULL)",
			// held_since is UTC, as is the epoch literal: the difference
			// does not depend on the session's time_zone.
			"IF(" + heldBy + ", TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', l.held_since), NULL)",
			"IF(" + heldBy + ", ORD(SUBSTRING(l.holder, LENGTH(l.token) + 1, 1)), NULL)",
			// By the queue's primary key (prefix, name, token): the
			// entries of this lock only, never a range of every lock's
			// live entries by expires_at.
			"(SELECT COUNT(*) FROM " + s.n.queue + " q FORCE INDEX (PRIMARY) WHERE q.prefix = l.prefix AND q.name = l.name AND q.expires_at > UTC_TIMESTAMP(6) AND q.token <> l.token)",
		},
		[]string{"fence", "live", "left_us", "holder_info", "since_us", "since_is", "waiters"}
}

// inspected is one row of inspectCols.
type inspected struct {
	fence   sql.NullInt64
	live    sql.NullBool
	leftUs  sql.NullInt64
	holder  sql.NullString
	sinceUs sql.NullInt64
	sinceIs sql.NullInt64 // the byte between token and description
	waiters sql.NullInt64
}

func (r *inspected) dest() []any {
	return []any{&r.fence, &r.live, &r.leftUs, &r.holder, &r.sinceUs, &r.sinceIs, &r.waiters}
}

// inspection is what r reports of the lock name, with the exactness the
// package documentation declares ("Inspecting").
func (r *inspected) inspection(name string) store.Inspection {
	in := store.Inspection{Name: name, Held: r.live.Valid && r.live.Bool}
	if r.fence.Valid {
		// The holder's fence; once free, the last holding's.
		in.Fence = store.Reading[uint64]{Value: uint64(r.fence.Int64), Is: store.Exact}
	}
	if r.waiters.Valid {
		// Fair waiters queue, each with an entry; default-mode waiters
		// poll, and the store keeps nothing of them.
		n := int(r.waiters.Int64)
		in.Waiters = store.Reading[int]{Value: n, Is: store.AtLeast}
		in.FairWaiters = store.Reading[int]{Value: n, Is: store.Exact}
	}
	if !in.Held {
		return in
	}
	if r.leftUs.Valid && r.leftUs.Int64 > 0 {
		in.TTL = store.Reading[time.Duration]{Value: time.Duration(r.leftUs.Int64) * time.Microsecond, Is: store.Exact}
	}
	if r.holder.Valid {
		in.Holder = store.Reading[string]{Value: r.holder.String, Is: store.Exact}
		if r.sinceUs.Valid {
			is := store.Exact // the acquisition statement's start
			if r.sinceIs.Int64 == int64(sinceHanded[0]) {
				is = store.AtMost // when the holder learnt the hand-over
			}
			in.Since = store.Reading[time.Time]{Value: time.UnixMicro(r.sinceUs.Int64).UTC(), Is: is}
		}
	}
	return in
}

// Inspect reads k's row and counts its queue's live entries in one
// SELECT, a consistent read that takes no lock.
func (s *sqlStore) Inspect(ctx context.Context, k store.Key) (store.Inspection, error) {
	if err := checkKey(k); err != nil {
		return store.Inspection{}, err
	}
	var r inspected
	cols, _ := s.inspectCols()
	err := s.db.QueryRowContext(ctx, "SELECT "+strings.Join(cols, ", ")+" FROM (SELECT 1) one LEFT JOIN "+s.n.locks+" l ON l.prefix = "+hexLit(k.Prefix)+" AND l.name = "+hexLit(k.Name)).Scan(r.dest()...)
	if err != nil {
		return store.Inspection{}, s.readErr(ctx, err)
	}
	in := r.inspection(k.Name)
	if !r.fence.Valid {
		// No row: a lock never used (or idle past Retention). The queue
		// keeps entries behind a row only.
		in.Waiters, in.FairWaiters = store.Reading[int]{}, store.Reading[int]{}
	}
	return in, nil
}

// readErr is the error of a failed Inspect or List: a table without the
// columns they read says which migration it needs.
func (s *sqlStore) readErr(ctx context.Context, err error) error {
	err = s.classify(ctx, err)
	if errors.Is(err, ErrOldSchema) {
		return fmt.Errorf("%w: %s has no columns holder and held_since (made before Lockers kept a holder description), which Inspect and Locks read; migrate with mysql.CreateTable(ctx, db, %q), idempotent, or the ALTER TABLE statements of mysql.Schema(%q): Lockers of earlier versions keep working beside it", ErrOldSchema, s.n.locks, s.n.plain, s.n.plain)
	}
	return err
}

// listScan bounds the rows of the lock table one page of List reads
// (idle ones included), whatever the number under the prefix.
const listScan = 1000

// cursorMark starts every cursor of List: the format's version.
const cursorMark = "m1."

// List reads, in one SELECT, at most listScan rows of the prefix after
// the cursor's name in the primary key's order (prefix, name), and
// returns those held or with live queue entries, up to limit. The next
// cursor is the last name returned when limit was reached, or the last
// name read when listScan rows were read (a page may then hold fewer
// locks than limit, or none); "" when the prefix's rows ran out.
func (s *sqlStore) List(ctx context.Context, prefix, cursor string, limit int) ([]store.Inspection, string, error) {
	if err := checkKey(store.Key{Prefix: prefix}); err != nil {
		return nil, "", err
	}
	after, err := decodeCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.db.QueryContext(ctx, s.listStmt(prefix, after, limit))
	if err != nil {
		return nil, "", s.readErr(ctx, err)
	}
	defer rows.Close()
	var (
		page []store.Inspection
		next string
	)
	for rows.Next() {
		var (
			name string
			r    inspected
			rn   int64
		)
		if err := rows.Scan(append([]any{&name}, append(r.dest(), &rn)...)...); err != nil {
			return nil, "", err
		}
		if len(page) == limit {
			// A row after a full page: the next page starts after its
			// last lock.
			next = encodeCursor(page[limit-1].Name)
			break
		}
		if (r.live.Valid && r.live.Bool) || r.waiters.Int64 > 0 {
			page = append(page, r.inspection(name))
		}
		if rn == listScan {
			// The scan's last row: the next page reads on after it.
			next = encodeCursor(name)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, "", s.readErr(ctx, err)
	}
	return page, next, nil
}

// listStmt is List's SELECT: the innermost query reads at most listScan
// rows of the prefix after the name after by the primary key (a range
// read, so a page costs the same whatever the number of rows under the
// prefix), numbered in name order; the outer one keeps the held ones,
// those with waiters, and the scan's last row (its name is the next
// cursor), at most limit+1.
func (s *sqlStore) listStmt(prefix, after string, limit int) string {
	scan := strconv.Itoa(listScan)
	cols, names := s.inspectCols()
	for i := range cols {
		cols[i] += " AS " + names[i]
	}
	return "SELECT name, fence, live, left_us, holder_info, since_us, since_is, waiters, rn FROM (" +
		"SELECT w.*, ROW_NUMBER() OVER (ORDER BY w.name) AS rn FROM (" +
		"SELECT l.name, " + strings.Join(cols, ", ") +
		" FROM " + s.n.locks + " l WHERE l.prefix = " + hexLit(prefix) + " AND l.name > " + hexLit(after) +
		" ORDER BY l.name LIMIT " + scan + ") w) s" +
		" WHERE s.live OR s.waiters > 0 OR s.rn = " + scan + " ORDER BY s.name LIMIT " + strconv.Itoa(limit+1)
}

// encodeCursor is the cursor of a page that starts after name.
func encodeCursor(name string) string {
	return cursorMark + base64.RawURLEncoding.EncodeToString([]byte(name))
}

// decodeCursor is the name a cursor of encodeCursor starts after ("" for
// the first page), or an error matching store.ErrBadCursor.
func decodeCursor(cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	rest, ok := strings.CutPrefix(cursor, cursorMark)
	if !ok {
		return "", fmt.Errorf("lockmw/mysql: cursor does not start with %q: %w", cursorMark, store.ErrBadCursor)
	}
	name, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil || len(name) == 0 || len(name) > 512 {
		return "", fmt.Errorf("lockmw/mysql: cursor %.40q names no lock: %w", cursor, store.ErrBadCursor)
	}
	return string(name), nil
}
