package postgres

import (
	"context"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// DefaultTable is the name of the lease table when none is given.
const DefaultTable = "lockmw_locks"

// Schema names the tables a Locker keeps its locks in. Table names the
// lease table (default DefaultTable); the other objects are named after
// it: the queue table Table+"_queue", the cron claims table
// Table+"_claims" and the fence sequence Table+"_fence". Table may be
// qualified with a schema ("app.locks"); names are quoted, so they are
// case-sensitive. The zero Schema is the default.
type Schema struct {
	Table string
}

// tableName matches an unquoted table name, optionally schema-qualified.
var tableName = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]{0,40}\.)?[A-Za-z_][A-Za-z0-9_]{0,40}$`)

// names are the quoted SQL identifiers of a Schema's objects.
type names struct {
	table, queue, claims, seq string
	// seqLit is the sequence's name as a string literal, for nextval.
	seqLit string
	// channel is the NOTIFY channel: the lease table's name as written.
	channel, listen string
}

func (sc Schema) names() (names, error) {
	t := sc.Table
	if t == "" {
		t = DefaultTable
	}
	if !tableName.MatchString(t) {
		return names{}, fmt.Errorf("%w: postgres table name %q: use letters, digits and '_' (at most 41 each), optionally schema-qualified (\"app.locks\")", lockmw.ErrInvalidOption, t)
	}
	ident := func(suffix string) string {
		parts := strings.Split(t, ".")
		parts[len(parts)-1] += suffix
		return pgx.Identifier(parts).Sanitize()
	}
	seq := ident("_fence")
	return names{
		table:   ident(""),
		queue:   ident("_queue"),
		claims:  ident("_claims"),
		seq:     seq,
		seqLit:  "'" + seq + "'",
		channel: t,
		listen:  pgx.Identifier{t}.Sanitize(),
	}, nil
}

// SQL returns the statements that create the Schema's tables and
// sequence, for migrations of one's own (each is idempotent: IF NOT
// EXISTS). CreateTable runs them.
func (sc Schema) SQL() (string, error) {
	n, err := sc.names()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(`-- lockmw: leases, fair queues and cron claims (lockmw/postgres).
-- Fences come from one sequence; CACHE 1 keeps them rising across sessions.
CREATE SEQUENCE IF NOT EXISTS %[4]s AS bigint CACHE 1 NO CYCLE;
-- One row per held lock; deleted on release, reused or swept once expired.
-- Names compare in byte order (COLLATE "C"), so that the primary key serves
-- the listing's prefix ranges too.
CREATE TABLE IF NOT EXISTS %[1]s (
	name       text        COLLATE "C" PRIMARY KEY,
	token      text        NOT NULL,
	fence      bigint      NOT NULL,
	expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS %[5]s ON %[1]s (expires_at);
-- Inspecting (Locker.Inspect, Locker.Locks), from the release that added
-- it: the holder's description and acquisition time, written only by
-- Lockers given lockmw.WithHolderInfo, and holder_token, the token they
-- belong to (shown only while that token holds the row). Older Lockers
-- write none of them.
ALTER TABLE %[1]s ADD COLUMN IF NOT EXISTS holder_info text;
ALTER TABLE %[1]s ADD COLUMN IF NOT EXISTS holder_token text;
ALTER TABLE %[1]s ADD COLUMN IF NOT EXISTS holder_since timestamptz;
-- The listing reads a prefix's names as a range in byte order (COLLATE
-- "C"): a table made by a release before Inspect, whose names have the
-- database's collation, gets an index of its names in that order.
DO $lockmw$ BEGIN
	IF (SELECT c.collname FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
		WHERE a.attrelid = %[10]s::regclass AND a.attname = 'name') NOT IN ('C', 'POSIX') THEN
		CREATE INDEX IF NOT EXISTS %[9]s ON %[1]s (name COLLATE "C");
	END IF;
END $lockmw$;
-- One row per waiter; the lowest unexpired seq of a name goes first.
-- handover: the channel the waiter's Locker hears a release's grant on
-- (NULL: a Locker before hand-overs, woken by its token on the table's).
CREATE TABLE IF NOT EXISTS %[2]s (
	name       text        NOT NULL,
	token      text        NOT NULL,
	seq        bigint      NOT NULL,
	expires_at timestamptz NOT NULL,
	handover   text,
	PRIMARY KEY (name, token)
);
-- Migration from releases before hand-overs (their Lockers leave it false).
ALTER TABLE %[2]s ADD COLUMN IF NOT EXISTS handover text;
-- Inspecting: the description of a waiter whose Locker was given
-- lockmw.WithHolderInfo, which a release's hand-over copies into the row.
ALTER TABLE %[2]s ADD COLUMN IF NOT EXISTS holder_info text;
CREATE INDEX IF NOT EXISTS %[6]s ON %[2]s (name, seq);
CREATE INDEX IF NOT EXISTS %[7]s ON %[2]s (expires_at);
-- cronlock's fire claims: one row per Locker prefix and job, swept once
-- keep_until passed (the job idle for the Locker's retention).
CREATE TABLE IF NOT EXISTS %[3]s (
	prefix     text        NOT NULL,
	job        text        NOT NULL,
	fire       bigint      NOT NULL DEFAULT 0,
	claim_by   text        NOT NULL DEFAULT '',
	token      text        NOT NULL DEFAULT '',
	run_fire   bigint      NOT NULL DEFAULT 0,
	run_by     text        NOT NULL DEFAULT '',
	keep_until timestamptz NOT NULL,
	PRIMARY KEY (prefix, job)
);
CREATE INDEX IF NOT EXISTS %[8]s ON %[3]s (keep_until);
`, n.table, n.queue, n.claims, n.seq,
		indexName(sc, "_expires"), indexName(sc, "_queue_order"), indexName(sc, "_queue_expires"), indexName(sc, "_claims_keep"), indexName(sc, "_names"), "'"+n.table+"'"), nil
}

// name is the row name of lock k in the lease and queue tables: the
// prefix's length in bytes, a colon, the prefix and the key
// ("7:lockmw:order-1"). The length says where the prefix ends, so no two
// (prefix, key) pairs share a row, as they would joined as they are
// (prefix "a" with key "bc", and "ab" with "c").
//
// A text column cannot hold every byte string a key may be: PostgreSQL
// refuses NUL and bytes that are not UTF-8 in text (the client encoding,
// which pgx sets to UTF8, is checked whatever the database's encoding).
// Such a name is stored as `\x` and the hex digits of its bytes
// (hexName); every other name as it is, as releases before this encoding
// stored it. No two locks share a row: the plain names are distinct as
// said, the hex ones are distinct because hex is, and no plain name equals
// a hex one, since a plain name starts with a digit and a hex one with a
// backslash. Versions before this encoding could not lock the keys that
// now get hex names (every statement naming them failed, writing nothing),
// so old and new Lockers agree on the row of every key that either can
// lock, and a rolling upgrade keeps them excluding each other.
func name(k store.Key) string {
	n := strconv.Itoa(len(k.Prefix)) + ":" + k.Prefix + k.Name
	if textHolds(n) {
		return n
	}
	return hexName(n)
}

// textHolds reports whether a text value holds s as it is: s is UTF-8 and
// has no NUL.
func textHolds(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// hexName is s in hex after `\x`, which PostgreSQL's bytea input reads:
// SELECT name::bytea shows the bytes of such a row's name.
func hexName(s string) string { return `\x` + hex.EncodeToString([]byte(s)) }

// claimRow is the claims table's (prefix, job) of job's claims for a
// Locker with prefix: both as they are when text holds them, as releases
// before this encoding stored them. Otherwise prefix holds the hex name of
// the pair joined as name joins a prefix and key, and job is empty: no job
// is named "" (cronlock and gocronlock refuse an empty job name), so no
// pair stored as it is equals such a row, and hex names of distinct pairs
// are distinct. Older releases could not claim for such a pair (their
// statements failed, writing nothing).
func claimRow(prefix, job string) (string, string) {
	if textHolds(prefix) && textHolds(job) {
		return prefix, job
	}
	return hexName(strconv.Itoa(len(prefix)) + ":" + prefix + job), ""
}

// indexName is an index's unqualified quoted name (an index lives in its
// table's schema).
func indexName(sc Schema, suffix string) string {
	t := sc.Table
	if t == "" {
		t = DefaultTable
	}
	parts := strings.Split(t, ".")
	return pgx.Identifier{parts[len(parts)-1] + suffix}.Sanitize()
}

// SQL returns the default Schema's statements (see Schema.SQL).
func SQL() string {
	s, _ := Schema{}.SQL()
	return s
}

// CreateTable creates the default Schema's tables and sequence if they do
// not exist (see Schema.CreateTable).
func CreateTable(ctx context.Context, pool *pgxpool.Pool) error {
	return Schema{}.CreateTable(ctx, pool)
}

// CreateTable creates the Schema's tables and sequence if they do not
// exist, in one transaction. Run it once at deployment (or put SQL in a
// migration); a Locker does not create them.
func (sc Schema) CreateTable(ctx context.Context, pool *pgxpool.Pool) error {
	if pool == nil {
		return fmt.Errorf("%w: postgres.CreateTable needs a pool", lockmw.ErrNilClient)
	}
	q, err := sc.SQL()
	if err != nil {
		return err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return classify(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// Two CreateTable at once would race on the catalog: serialize them.
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(7460512345)"); err != nil {
		return classify(err)
	}
	if _, err := tx.Exec(ctx, q); err != nil {
		return classify(err)
	}
	return classify(tx.Commit(ctx))
}
