package cachelock

import (
	"context"
	"database/sql"
	"fmt"
	"math"
)

// Execer is what FencedExec runs its statement on: *sql.DB, *sql.Tx and
// *sql.Conn all qualify.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// FencedExec runs a fenced conditional write, typically
//
//	UPDATE products SET price = $2, fence = $1 WHERE id = $3 AND fence < $1
//
// where the row's fence column holds the token of the last writer. fence,
// the token Update passes to its write function, is bound as the first
// argument, followed by args; with numbered placeholders ($1 in PostgreSQL
// and SQLite, ?1 in SQLite) the query can refer to it twice. With drivers that only know
// "?" (MySQL), pass the fence again in args where the query needs it.
//
// The query must both check the fence (fence < token) and store it (fence =
// token), so that each accepted write raises it. If the statement changes no
// row, FencedExec returns an error matching ErrFenced: a writer with a newer
// token has written the row (this caller's lock was lost, and the store
// kept the newer value), or the row does not exist. Other errors are the
// driver's. Columns should be 64-bit integers; tokens above the largest
// int64 are refused.
func FencedExec(ctx context.Context, db Execer, query string, fence uint64, args ...any) (sql.Result, error) {
	if fence > math.MaxInt64 {
		return nil, fmt.Errorf("cachelock: FencedExec: fence %d does not fit in an int64 column", fence)
	}
	res, err := db.ExecContext(ctx, query, append([]any{int64(fence)}, args...)...)
	if err != nil {
		return nil, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return res, fmt.Errorf("cachelock: FencedExec: the driver cannot count changed rows: %w", err)
	}
	if n == 0 {
		return res, fmt.Errorf("%w: fence %d is not newer than the row's, or the row is missing", ErrFenced, fence)
	}
	return res, nil
}
