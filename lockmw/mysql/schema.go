package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"

	"github.com/lockmw/lockmw/lockmw"
)

// DefaultTable is the name of the lock table when none is given; the
// store's other objects are named after it (see Schema).
const DefaultTable = "lockmw_locks"

// tableName is what a table name may be: it is written into statements
// unquoted by the caller, quoted by the store.
var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,47}$`)

// names are the store's objects for one base table name.
type names struct {
	locks, fence, claims string // quoted
	queue                string // quoted: waiters' entries
	plain                string // the base name, unquoted
}

func namesFor(table string) (names, error) {
	if table == "" {
		table = DefaultTable
	}
	if !tableName.MatchString(table) {
		return names{}, fmt.Errorf("%w: table name %q: use 1 to 48 letters, digits and underscores, not starting with a digit", lockmw.ErrInvalidOption, table)
	}
	return names{
		locks:  "`" + table + "`",
		fence:  "`" + table + "_fence`",
		claims: "`" + table + "_claims`",
		queue:  "`" + table + "_queue`",
		plain:  table,
	}, nil
}

// statements returns the schema's statements, each idempotent.
func (n names) statements() []string {
	return []string{
		// One row per lock that was held in the last Retention: the
		// holder's token ("" once released), fence and expiry on the
		// database's clock, in UTC.
		"CREATE TABLE IF NOT EXISTS " + n.locks + ` (
  prefix VARBINARY(512) NOT NULL,
  name VARBINARY(512) NOT NULL,
  token VARBINARY(64) NOT NULL,
  fence BIGINT UNSIGNED NOT NULL,
  expires_at DATETIME(6) NOT NULL,
  queue_seen TINYINT NOT NULL DEFAULT 1,
  holder VARBINARY(321) NULL DEFAULT NULL,
  held_since DATETIME(6) NULL DEFAULT NULL,
  PRIMARY KEY (prefix, name),
  KEY expires_at (expires_at)
) ENGINE=InnoDB`,
		// queue_seen is 0 on a row this version inserted that no Fair
		// waiter of it queued for since: a plain attempt then does not
		// read the queue. The migration of a lock table made before it
		// (instant: rows read 1, and Lockers made before it, which do
		// not name the column, insert 1: their Fair waiters do not mark
		// rows).
		"ALTER TABLE " + n.locks + " ADD COLUMN IF NOT EXISTS queue_seen TINYINT NOT NULL DEFAULT 1",
		// holder is the holding token, a byte that says what held_since
		// is, and its Locker's description (lockmw.WithHolderInfo);
		// held_since when that holding began (UTC): written only by
		// Lockers given a
		// description, with the holding, and read (Inspect, List) only
		// while the row's token is the one in holder (inspect.go). The
		// migration of a lock table made before them (instant: rows read
		// NULL; Lockers made before them, and Lockers without a
		// description, write neither).
		"ALTER TABLE " + n.locks + " ADD COLUMN IF NOT EXISTS holder VARBINARY(321) NULL DEFAULT NULL, ADD COLUMN IF NOT EXISTS held_since DATETIME(6) NULL DEFAULT NULL",
		// Fences of every lock of the table: NOCACHE, so that values are
		// handed out in the order of the calls across all connections.
		"CREATE SEQUENCE IF NOT EXISTS " + n.fence + " START WITH 1 MINVALUE 1 INCREMENT BY 1 NOCACHE NOCYCLE ENGINE=InnoDB",
		// Waiters: one row per waiting token, in the order of seq (drawn
		// from the fence sequence), each expiring unless its waiter keeps
		// it alive. handover is 1 for the entries of waiters that take a
		// hand-over (they learn it by their poll); entries of Lockers
		// made before it are 0, and a release never hands them the lock.
		"CREATE TABLE IF NOT EXISTS " + n.queue + ` (
  prefix VARBINARY(512) NOT NULL,
  name VARBINARY(512) NOT NULL,
  token VARBINARY(64) NOT NULL,
  seq BIGINT UNSIGNED NOT NULL,
  expires_at DATETIME(6) NOT NULL,
  handover TINYINT NOT NULL DEFAULT 0,
  PRIMARY KEY (prefix, name, token),
  KEY turn (prefix, name, seq),
  KEY expires_at (expires_at)
) ENGINE=InnoDB`,
		// The migration of a queue table made before hand-overs (an
		// instant ALTER: existing entries read 0, and Lockers made before
		// it, which do not name the column, keep working beside it).
		"ALTER TABLE " + n.queue + " ADD COLUMN IF NOT EXISTS handover TINYINT NOT NULL DEFAULT 0",
		// cronlock's fire claims: one row per job of a Locker prefix,
		// deleted once keep_until passed (the job idle for the Locker's
		// retention).
		"CREATE TABLE IF NOT EXISTS " + n.claims + ` (
  prefix VARBINARY(512) NOT NULL,
  job VARBINARY(512) NOT NULL,
  fire BIGINT NOT NULL,
  claimed_by VARBINARY(512) NOT NULL,
  token VARBINARY(64) NOT NULL,
  run_fire BIGINT NOT NULL DEFAULT 0,
  run_by VARBINARY(512) NOT NULL DEFAULT '',
  keep_until DATETIME(6) NOT NULL,
  PRIMARY KEY (prefix, job),
  KEY keep_until (keep_until)
) ENGINE=InnoDB`,
	}
}

// Schema returns the SQL that creates the store's objects for table (""
// for DefaultTable), for migrations of one's own: the lock table, the
// sequence table+"_fence" that issues fences, the table table+"_queue"
// of waiters, and the table table+"_claims" of cronlock's fire
// claims. Every statement is
// idempotent (IF NOT EXISTS); the ALTER TABLE statements are the
// migrations of tables made by earlier versions (the queue's column
// handover, the lock table's queue_seen, which New requires; the lock
// table's holder and held_since, which New requires of a Locker given
// lockmw.WithHolderInfo, and Inspect and Locks of every Locker). It fails, with an error matching
// lockmw.ErrInvalidOption, on a table name that is not 1 to 48 letters,
// digits and underscores.
func Schema(table string) (string, error) {
	n, err := namesFor(table)
	if err != nil {
		return "", err
	}
	return strings.Join(n.statements(), ";\n\n") + ";\n", nil
}

// CreateTable creates the store's objects for table ("" for DefaultTable)
// in db's database if they do not exist (see Schema).
func CreateTable(ctx context.Context, db *sql.DB, table string) error {
	n, err := namesFor(table)
	if err != nil {
		return err
	}
	if db == nil {
		return fmt.Errorf("%w: CreateTable needs a *sql.DB", lockmw.ErrNilClient)
	}
	for _, q := range n.statements() {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("lockmw/mysql: creating the store's tables: %w", classify(err))
		}
	}
	return nil
}
