package adapt

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBadTemplate is wrapped by ParseTemplate's errors.
var ErrBadTemplate = errors.New("unusable name template")

// A Template is a parsed lock name template such as "order:{id}": the
// text before and after its one placeholder, which an identifier replaces
// to form the lock key. The template itself is the low-cardinality lock
// name of telemetry. The zero Template is no template: the key is the
// identifier as it is.
type Template struct {
	text, prefix, suffix string
}

// ParseTemplate parses a lock name template. The rule, the same for every
// adapter: exactly one placeholder, a non-empty name in braces ("{id}"),
// and no other brace anywhere. So "order:{id}", "{x}/stock" and
// "shop:{item}:v1" are templates; "", "order", "order:{}", "{a}:{b}",
// "order:{{id}}", "order:{id" and "order:}id{" are not.
func ParseTemplate(s string) (Template, error) {
	open := strings.IndexByte(s, '{')
	end := strings.IndexByte(s, '}')
	if open < 0 || end < open+2 || strings.ContainsAny(s[open+1:end], "{") || strings.ContainsAny(s[end+1:], "{}") {
		return Template{}, fmt.Errorf("%w: %q must contain exactly one {placeholder} with a name, and no other braces, as in \"order:{id}\"", ErrBadTemplate, s)
	}
	return Template{text: s, prefix: s[:open], suffix: s[end+1:]}, nil
}

// String returns the template as written; "" for the zero Template.
func (t Template) String() string { return t.text }

// IsZero reports whether t is the zero Template: no template.
func (t Template) IsZero() bool { return t.text == "" }

// Key returns the lock key for identifier id: id in place of the
// placeholder, or id itself for the zero Template.
func (t Template) Key(id string) string {
	if t.text == "" {
		return id
	}
	return t.prefix + id + t.suffix
}
