package cachelock

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

// bindFence puts the fence where the query says {fence}, in the driver's
// placeholder style, and binds each other argument to its own placeholder.
func TestBindFence(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ph    Placeholders
		query string
		args  []any
		want  string
		bound []any
	}{
		{
			name:  "MySQL",
			ph:    QuestionMarks,
			query: "UPDATE p SET price = ?, fence = {fence} WHERE id = ? AND fence < {fence}",
			args:  []any{555, 1},
			want:  "UPDATE p SET price = ?, fence = ? WHERE id = ? AND fence < ?",
			bound: []any{555, int64(7), 1, int64(7)},
		},
		{
			name:  "PostgreSQL",
			ph:    DollarNumbers,
			query: "UPDATE p SET price = $1, fence = {fence} WHERE id = $2 AND fence < {fence}",
			args:  []any{555, 1},
			want:  "UPDATE p SET price = $1, fence = $3 WHERE id = $2 AND fence < $3",
			bound: []any{555, 1, int64(7)},
		},
		{
			name:  "PostgreSQL, args out of order and cast",
			ph:    DollarNumbers,
			query: "UPDATE p SET fence = {fence}::bigint, price = $2 WHERE id = $1 AND fence < {fence}",
			args:  []any{1, 555},
			want:  "UPDATE p SET fence = $3::bigint, price = $2 WHERE id = $1 AND fence < $3",
			bound: []any{1, 555, int64(7)},
		},
		{
			name:  "MySQL, literals, identifiers and comments left alone",
			ph:    QuestionMarks,
			query: "UPDATE `p?` SET note = 'why? {fence} it''s \\' ?', price = ? /* ? {fence} */ -- ?\n, fence = {fence} # ?\nWHERE id = ? AND fence < {fence}",
			args:  []any{5, 1},
			want:  "UPDATE `p?` SET note = 'why? {fence} it''s \\' ?', price = ? /* ? {fence} */ -- ?\n, fence = ? # ?\nWHERE id = ? AND fence < ?",
			bound: []any{5, int64(7), 1, int64(7)},
		},
		{
			name:  "PostgreSQL, jsonb ? operator and dollar quotes left alone",
			ph:    DollarNumbers,
			query: "UPDATE p SET fence = {fence}, note = $$ $9 {fence} $$, tag = $t$?$t$ WHERE attrs ? 'sale' AND id = $1 AND fence < {fence}",
			args:  []any{1},
			want:  "UPDATE p SET fence = $2, note = $$ $9 {fence} $$, tag = $t$?$t$ WHERE attrs ? 'sale' AND id = $1 AND fence < $2",
			bound: []any{1, int64(7)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, bound, err := bindFence(tc.ph, tc.query, 7, tc.args)
			if err != nil {
				t.Fatalf("bindFence: %v", err)
			}
			if q != tc.want || !reflect.DeepEqual(bound, tc.bound) {
				t.Fatalf("bindFence =\n  %s %v\nwant\n  %s %v", q, bound, tc.want, tc.bound)
			}
		})
	}
}

// The wrong uses are refused with ErrInvalidQuery: the fence passed as an
// argument (the old convention), counts that do not match, mixed styles.
func TestBindFenceRefusesMismatches(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ph    Placeholders
		query string
		args  []any
		fence uint64
	}{
		{"no {fence}: fence passed in args", QuestionMarks, "UPDATE p SET price = ?, fence = ? WHERE id = ? AND fence < ?", []any{7, 555, 1, 7}, 7},
		{"no {fence}: $1 as the fence", DollarNumbers, "UPDATE p SET price = $2, fence = $1 WHERE id = $3 AND fence < $1", []any{555, 1}, 7},
		{"more ? than args", QuestionMarks, "UPDATE p SET price = ?, fence = {fence} WHERE id = ? AND fence < ?", []any{555, 1}, 7},
		{"fewer ? than args", QuestionMarks, "UPDATE p SET price = ?, fence = {fence} WHERE id = 1 AND fence < {fence}", []any{555, 1}, 7},
		{"$n beyond args", DollarNumbers, "UPDATE p SET price = $1, fence = {fence} WHERE id = $3 AND fence < {fence}", []any{555, 1}, 7},
		{"$0", DollarNumbers, "UPDATE p SET price = $0, fence = {fence} WHERE fence < {fence}", []any{555}, 7},
		{"an unused arg", DollarNumbers, "UPDATE p SET price = $1, fence = {fence} WHERE id = 1 AND fence < {fence}", []any{555, 1}, 7},
		{"$n with QuestionMarks", QuestionMarks, "UPDATE p SET price = $1, fence = {fence} WHERE id = ? AND fence < {fence}", []any{555, 1}, 7},
		{"?NNN with QuestionMarks", QuestionMarks, "UPDATE p SET price = ?1, fence = {fence} WHERE id = ?2 AND fence < {fence}", []any{555, 1}, 7},
		{"unknown style", Placeholders(0), "UPDATE p SET fence = {fence} WHERE fence < {fence}", nil, 7},
		{"unterminated literal", QuestionMarks, "UPDATE p SET fence = {fence} WHERE name = 'x", nil, 7},
		{"fence beyond int64", QuestionMarks, "UPDATE p SET fence = {fence} WHERE fence < {fence}", nil, math.MaxInt64 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, bound, err := bindFence(tc.ph, tc.query, tc.fence, tc.args)
			if !errors.Is(err, ErrInvalidQuery) {
				t.Fatalf("bindFence = %q %v, %v; want ErrInvalidQuery", q, bound, err)
			}
		})
	}
}

// A count mismatch is described by its counts; the advice to write the
// fence as {fence} goes only to a query that does not.
func TestBindFenceSaysWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ph        Placeholders
		query     string
		args      []any
		want      []string
		adviseFix bool // tell the caller to write {fence}
	}{
		{"one arg missing, ?", QuestionMarks, "UPDATE p SET price = ?, fence = {fence} WHERE id = ? AND fence < {fence}", []any{555},
			[]string{`2 "?" placeholders but 1 args`}, false},
		{"one arg too many, ?", QuestionMarks, "UPDATE p SET price = ?, fence = {fence} WHERE id = ? AND fence < {fence}", []any{555, 1, 7},
			[]string{`2 "?" placeholders but 3 args`}, false},
		{"one arg missing, $n", DollarNumbers, "UPDATE p SET price = $1, fence = {fence} WHERE id = $2 AND fence < {fence}", []any{555},
			[]string{"$2", "1 args"}, false},
		{"fence as ?", QuestionMarks, "UPDATE p SET price = ?, fence = ? WHERE id = ? AND fence < ?", []any{555, 7, 1},
			[]string{`4 "?" placeholders but 3 args`}, true},
		{"fence as $n", DollarNumbers, "UPDATE p SET price = $1, fence = $3 WHERE id = $2 AND fence < $3", []any{555, 1},
			[]string{"$3", "2 args"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := bindFence(tc.ph, tc.query, 7, tc.args)
			if !errors.Is(err, ErrInvalidQuery) {
				t.Fatalf("bindFence: %v, want ErrInvalidQuery", err)
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
			if advised := strings.Contains(msg, "write the fence as {fence}"); advised != tc.adviseFix {
				t.Errorf("error %q: advises writing {fence}: %v, want %v (the query uses {fence}: %v)", msg, advised, tc.adviseFix, strings.Contains(tc.query, "{fence}"))
			}
		})
	}
}
