package postgres

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

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
CREATE TABLE IF NOT EXISTS %[1]s (
	name       text        PRIMARY KEY,
	token      text        NOT NULL,
	fence      bigint      NOT NULL,
	expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS %[5]s ON %[1]s (expires_at);
-- One row per waiter; the lowest unexpired seq of a name goes first.
CREATE TABLE IF NOT EXISTS %[2]s (
	name       text        NOT NULL,
	token      text        NOT NULL,
	seq        bigint      NOT NULL,
	expires_at timestamptz NOT NULL,
	PRIMARY KEY (name, token)
);
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
		indexName(sc, "_expires"), indexName(sc, "_queue_order"), indexName(sc, "_queue_expires"), indexName(sc, "_claims_keep")), nil
}

// name is the row name of lock k in the lease and queue tables: the
// prefix's length in bytes, a colon, the prefix and the key
// ("7:lockmw:order-1"). The length says where the prefix ends, so no two
// (prefix, key) pairs share a row, as they would joined as they are
// (prefix "a" with key "bc", and "ab" with "c").
func name(k store.Key) string {
	return strconv.Itoa(len(k.Prefix)) + ":" + k.Prefix + k.Name
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
