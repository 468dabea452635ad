package cachelock

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Execer is what FencedExec runs its statement on: *sql.DB, *sql.Tx and
// *sql.Conn all qualify.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Placeholders is the bind-parameter style of a database driver, which
// FencedExec needs to bind the fence where the query names it.
type Placeholders int

const (
	// QuestionMarks is the "?" style of MySQL, MariaDB and SQLite: each "?"
	// takes the next argument in order.
	QuestionMarks Placeholders = iota + 1
	// DollarNumbers is the "$1, $2, ..." style of PostgreSQL (pgx, lib/pq),
	// which SQLite accepts too: "$n" takes the n-th argument.
	DollarNumbers
)

// FenceMarker is what a FencedExec query writes wherever the fence goes.
const FenceMarker = "{fence}"

// String returns the constant's name, as used in error messages.
func (p Placeholders) String() string {
	switch p {
	case QuestionMarks:
		return "QuestionMarks"
	case DollarNumbers:
		return "DollarNumbers"
	}
	return "Placeholders(" + strconv.Itoa(int(p)) + ")"
}

// FencedExec runs a fenced conditional write, in which the query writes the
// fence as {fence} and the other arguments in the driver's own style ph:
//
//	// MySQL, MariaDB, SQLite: QuestionMarks
//	UPDATE products SET price = ?, fence = {fence} WHERE id = ? AND fence < {fence}
//	// PostgreSQL, SQLite: DollarNumbers
//	UPDATE products SET price = $1, fence = {fence} WHERE id = $2 AND fence < {fence}
//
// with args (price, id) in both cases. The row's fence column holds the
// token of the last writer; fence is the token Update passes to its write
// function. FencedExec replaces each {fence} with a placeholder of style ph
// and binds the fence to it, so the fence never takes an argument's place.
//
// The query must both check the fence (fence < {fence}) and store it (fence
// = {fence}), so that each accepted write raises it. FencedExec refuses,
// with an error matching ErrInvalidQuery and before anything reaches the
// database, a query without {fence}, an unknown ph, placeholders of the
// other style, and a placeholder count that does not match args: with
// QuestionMarks the number of "?", with DollarNumbers the numbers $1 to
// $len(args), each used. Placeholders and {fence} inside string literals,
// quoted identifiers and comments are left alone. Tokens above the largest
// int64 are refused too (columns should be 64-bit integers).
//
// If the statement changes no row, FencedExec returns an error matching
// ErrFenced: a writer with a newer token has written the row (this caller's
// lock was lost, and the store kept the newer value), or the row does not
// exist. Other errors are the driver's.
func FencedExec(ctx context.Context, db Execer, ph Placeholders, query string, fence uint64, args ...any) (sql.Result, error) {
	q, bound, err := bindFence(ph, query, fence, args)
	if err != nil {
		return nil, err
	}
	res, err := db.ExecContext(ctx, q, bound...)
	if err != nil {
		return nil, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return res, fmt.Errorf("cachelock: FencedExec: the driver cannot count changed rows: %w", err)
	}
	if n == 0 {
		return res, &fencedError{fence: fence}
	}
	return res, nil
}

// fencedError is FencedExec's ErrFenced: it keeps the fence the statement
// was run with, which Update compares with its own.
type fencedError struct{ fence uint64 }

func (e *fencedError) Error() string {
	return fmt.Sprintf("%v: fence %d is not newer than the row's, or the row is missing", ErrFenced, e.fence)
}

func (e *fencedError) Is(target error) bool { return target == ErrFenced }

// bindFence rewrites query for FencedExec: each {fence} becomes a
// placeholder of style ph, and the returned arguments bind the fence there
// and args everywhere else, in the order the driver expects.
func bindFence(ph Placeholders, query string, fence uint64, args []any) (string, []any, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("cachelock: FencedExec: %w: %s", ErrInvalidQuery, fmt.Sprintf(format, a...))
	}
	if ph != QuestionMarks && ph != DollarNumbers {
		return "", nil, bad("unknown placeholder style %v: use QuestionMarks (MySQL, SQLite) or DollarNumbers (PostgreSQL, SQLite)", ph)
	}
	if fence > math.MaxInt64 {
		return "", nil, bad("fence %d does not fit in an int64 column", fence)
	}
	toks, err := scanPlaceholders(query, ph)
	if err != nil {
		return "", nil, bad("%v", err)
	}
	// Count first, so that a mismatch is described with the whole query's
	// counts, and the advice about {fence} is given only to a query
	// without it.
	fences, allQuestions := 0, 0
	for _, t := range toks {
		switch t.kind {
		case tokFence:
			fences++
		case tokQuestion:
			allQuestions++
		}
	}
	fenceAdvice := "; the fence is not one of args: FencedExec binds it at each " + FenceMarker
	if fences == 0 {
		fenceAdvice = "; write the fence as " + FenceMarker + ", not as a placeholder with the fence among args"
	}
	var b strings.Builder
	out := make([]any, 0, len(args)+2)
	fenceArg := int64(fence)
	questions := 0
	used := make([]bool, len(args)+1)
	last := 0
	for _, t := range toks {
		b.WriteString(query[last:t.start])
		last = t.end
		switch t.kind {
		case tokFence:
			if ph == QuestionMarks {
				b.WriteByte('?')
				out = append(out, fenceArg)
			} else {
				b.WriteString("$" + strconv.Itoa(len(args)+1))
			}
		case tokQuestion:
			if ph != QuestionMarks {
				// PostgreSQL's jsonb operators ?, ?| and ?&: not placeholders.
				b.WriteString(query[t.start:t.end])
				continue
			}
			questions++
			if questions > len(args) {
				return "", nil, bad("the query has %d \"?\" placeholders but %d args: one arg per \"?\", in order%s", allQuestions, len(args), fenceAdvice)
			}
			b.WriteByte('?')
			out = append(out, args[questions-1])
		case tokDollar:
			if ph != DollarNumbers {
				return "", nil, bad("the query uses $%d with QuestionMarks: use \"?\" for args and %s for the fence", t.n, FenceMarker)
			}
			if t.n < 1 || t.n > len(args) {
				return "", nil, bad("the query uses $%d but there are %d args, for $1 to $%d%s", t.n, len(args), len(args), fenceAdvice)
			}
			used[t.n] = true
			b.WriteString(query[t.start:t.end])
		case tokNumberedQuestion:
			return "", nil, bad("numbered placeholder %s is not supported: use DollarNumbers ($n)", query[t.start:t.end])
		}
	}
	b.WriteString(query[last:])
	if fences == 0 {
		return "", nil, bad("the query has no %s: write it where the fence is checked (fence < %s) and stored (fence = %s)", FenceMarker, FenceMarker, FenceMarker)
	}
	switch ph {
	case QuestionMarks:
		if questions != len(args) {
			return "", nil, bad("the query has %d \"?\" placeholders but %d args: one arg per \"?\", in order%s", questions, len(args), fenceAdvice)
		}
	case DollarNumbers:
		for n := 1; n <= len(args); n++ {
			if !used[n] {
				return "", nil, bad("arg %d is never used: the query has no $%d", n, n)
			}
		}
		out = append(out, args...)
		out = append(out, fenceArg)
	}
	return b.String(), out, nil
}

// Token kinds found by scanPlaceholders.
const (
	tokFence            = iota // {fence}
	tokQuestion                // ?
	tokDollar                  // $n
	tokNumberedQuestion        // ?n (SQLite)
)

type token struct {
	kind       int
	start, end int
	n          int // for tokDollar
}

// scanPlaceholders finds the placeholders and fence markers of query,
// skipping string literals, quoted identifiers, comments and, for
// DollarNumbers, PostgreSQL dollar-quoted strings. With QuestionMarks a
// backslash escapes the next character in a string literal (MySQL); with
// DollarNumbers it does so only in E'...' strings (PostgreSQL).
func scanPlaceholders(query string, ph Placeholders) ([]token, error) {
	var toks []token
	isIdent := func(c byte) bool {
		return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
	}
	digits := func(i int) int { // end of the digits starting at i
		for i < len(query) && query[i] >= '0' && query[i] <= '9' {
			i++
		}
		return i
	}
	for i := 0; i < len(query); {
		c := query[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			backslash := ph == QuestionMarks && c != '`' ||
				c == '\'' && i > 0 && (query[i-1] == 'E' || query[i-1] == 'e') && (i == 1 || !isIdent(query[i-2]))
			j := i + 1
			for {
				if j >= len(query) {
					return nil, fmt.Errorf("unterminated %c quote at byte %d", c, i)
				}
				if backslash && query[j] == '\\' {
					j += 2
					continue
				}
				if query[j] == c {
					if j+1 < len(query) && query[j+1] == c { // doubled quote
						j += 2
						continue
					}
					break
				}
				j++
			}
			i = j + 1
		case c == '-' && strings.HasPrefix(query[i:], "--"), c == '#' && ph == QuestionMarks:
			j := strings.IndexByte(query[i:], '\n')
			if j < 0 {
				return toks, nil
			}
			i += j + 1
		case c == '/' && strings.HasPrefix(query[i:], "/*"):
			j := strings.Index(query[i+2:], "*/")
			if j < 0 {
				return nil, fmt.Errorf("unterminated /* comment at byte %d", i)
			}
			i += 2 + j + 2
		case c == '{' && strings.HasPrefix(query[i:], FenceMarker):
			toks = append(toks, token{kind: tokFence, start: i, end: i + len(FenceMarker)})
			i += len(FenceMarker)
		case c == '?':
			if j := digits(i + 1); j > i+1 && ph == QuestionMarks {
				toks = append(toks, token{kind: tokNumberedQuestion, start: i, end: j})
				i = j
				continue
			}
			toks = append(toks, token{kind: tokQuestion, start: i, end: i + 1})
			i++
		case c == '$' && (i == 0 || !isIdent(query[i-1])):
			if j := digits(i + 1); j > i+1 {
				n, err := strconv.Atoi(query[i+1 : j])
				if err != nil {
					return nil, fmt.Errorf("placeholder %s: %w", query[i:j], err)
				}
				toks = append(toks, token{kind: tokDollar, start: i, end: j, n: n})
				i = j
				continue
			}
			if ph == DollarNumbers {
				// A dollar-quoted string: $$...$$ or $tag$...$tag$.
				j := i + 1
				for j < len(query) && isIdent(query[j]) {
					j++
				}
				if j < len(query) && query[j] == '$' {
					tag := query[i : j+1]
					k := strings.Index(query[j+1:], tag)
					if k < 0 {
						return nil, fmt.Errorf("unterminated dollar-quoted string %s at byte %d", tag, i)
					}
					i = j + 1 + k + len(tag)
					continue
				}
			}
			i++
		default:
			i++
		}
	}
	return toks, nil
}
