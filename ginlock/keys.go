package ginlock

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/lockmw/lockmw/internal/adapt"
	"github.com/lockmw/lockmw/lockmw"
)

// A KeyFunc returns the identifier of the resource a request works on, such as
// an order id. An error means the request carries no usable identifier: the
// middleware answers 400 (see ErrNoKey). The identifier must be non-empty
// valid UTF-8 without control characters.
type KeyFunc func(c *gin.Context) (string, error)

// DefaultMaxBodyBytes is the largest body JSONField reads.
const DefaultMaxBodyBytes = 1 << 20

var (
	// ErrNoKey means the request carries no usable lock key: the identifier
	// is missing, ambiguous, malformed or makes the key too long. Every error
	// of a KeyFunc is reported wrapped in it. The default response is 400.
	ErrNoKey = errors.New("ginlock: no usable lock key in the request")

	// ErrBodyTooLarge means a JSON body was longer than the limit of
	// JSONField; it comes wrapped in ErrNoKey. The default response is 413.
	ErrBodyTooLarge = errors.New("ginlock: request body too large")

	// ErrMisconfigured means the middleware is set up wrong for the route:
	// Param names a parameter the route does not have, or the engine does
	// not set ContextWithFallback (see WithRequestContextOnly). The default
	// response is 500, and the middleware logs the error.
	ErrMisconfigured = errors.New("ginlock: middleware misconfigured")
)

// Param takes the identifier from the path parameter name (":name" or
// "*name" in the route). A route without that parameter is a setup mistake,
// not a bad request: the middleware answers 500 with an error matching
// ErrMisconfigured, and logs it.
func Param(name string) KeyFunc {
	what := "path parameter " + strconv.Quote(name)
	return func(c *gin.Context) (string, error) {
		v, ok := c.Params.Get(name)
		if !ok && c.FullPath() != "" { // "": no route matched (NoRoute), no parameters at all
			return "", fmt.Errorf("%w: route %q has no %s", ErrMisconfigured, c.FullPath(), what)
		}
		return checkID(what, v)
	}
}

// Query takes the identifier from the URL query parameter name. It must be
// given exactly once.
func Query(name string) KeyFunc {
	what := "query parameter " + strconv.Quote(name)
	return func(c *gin.Context) (string, error) {
		return single(what, c.QueryArray(name))
	}
}

// Header takes the identifier from the request header name. It must be given
// exactly once.
func Header(name string) KeyFunc {
	what := "header " + strconv.Quote(http.CanonicalHeaderKey(name))
	return func(c *gin.Context) (string, error) {
		return single(what, c.Request.Header.Values(name))
	}
}

// JSONField takes the identifier from a field of the JSON request body, read
// up to DefaultMaxBodyBytes (see JSONFieldLimit). path names the field with
// dots: "order.id" is {"order": {"id": ...}}, and a segment of digits indexes
// an array ("items.0.sku"). The field must hold a string, used as it is, or
// a number, written in canonical decimal form: no exponent, no sign for zero,
// no leading zeros and no trailing zeros after the point. So 42, 42.0, 4.2e1
// and 420e-1 all lock "42", the same key as the string "42", while the
// string "42.0" stays "42.0". A number whose canonical form makes the key
// too long is refused (400). The body is restored for the handlers,
// and also stored under gin.BodyBytesKey, so c.ShouldBindBodyWith does not
// read it again. JSONField panics if path is empty or has an empty segment.
func JSONField(path string) KeyFunc {
	return JSONFieldLimit(path, DefaultMaxBodyBytes)
}

// JSONFieldLimit is JSONField reading at most maxBytes of body: a longer body
// is refused with ErrBodyTooLarge (413). It panics if maxBytes is not
// positive or path is invalid.
func JSONFieldLimit(path string, maxBytes int64) KeyFunc {
	segments := strings.Split(path, ".")
	for _, s := range segments {
		if s == "" {
			panic(fmt.Sprintf("ginlock: JSONField(%q): the path needs non-empty segments separated by dots", path))
		}
	}
	if maxBytes <= 0 {
		panic(fmt.Sprintf("ginlock: JSONFieldLimit(%q, %d): the limit must be positive", path, maxBytes))
	}
	what := "JSON field " + strconv.Quote(path)
	return func(c *gin.Context) (string, error) {
		body, err := readBody(c, maxBytes)
		if err != nil {
			return "", err
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return "", fmt.Errorf("the body is not valid JSON: %w", err)
		}
		if _, err := dec.Token(); err != io.EOF {
			return "", errors.New("the body is not valid JSON: data after the top-level value")
		}
		for i, seg := range segments {
			switch node := v.(type) {
			case map[string]any:
				next, ok := node[seg]
				if !ok {
					return "", fmt.Errorf("%s is missing", what)
				}
				v = next
			case []any:
				n, err := strconv.Atoi(seg)
				if err != nil || n < 0 || n >= len(node) || seg != strconv.Itoa(n) {
					return "", fmt.Errorf("%s is missing: %q is not an index of the array at %q", what, seg, strings.Join(segments[:i], "."))
				}
				v = node[n]
			default:
				return "", fmt.Errorf("%s is missing: %q is not an object or array", what, strings.Join(segments[:i], "."))
			}
		}
		switch v := v.(type) {
		case string:
			return checkID(what, v)
		case json.Number:
			return canonicalNumber(what, v.String())
		default:
			return "", fmt.Errorf("%s is %s, not a string or number", what, jsonKind(v))
		}
	}
}

// readBody returns the request body, read once and restored for the handlers.
func readBody(c *gin.Context, maxBytes int64) ([]byte, error) {
	if cached, ok := c.Get(gin.BodyBytesKey); ok {
		if b, ok := cached.([]byte); ok {
			if int64(len(b)) > maxBytes {
				return nil, fmt.Errorf("%w: more than %d bytes", ErrBodyTooLarge, maxBytes)
			}
			return b, nil
		}
	}
	if c.Request.Body == nil || c.Request.Body == http.NoBody {
		return nil, errors.New("the request has no body")
	}
	body, err := io.ReadAll(io.LimitReader(c.Request.Body, maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the request body: %w", err)
	}
	if int64(len(body)) > maxBytes {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrBodyTooLarge, maxBytes)
	}
	c.Request.Body = io.NopCloser(bytes.NewReader(body))
	c.Set(gin.BodyBytesKey, body)
	return body, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("%T", v)
}

// single returns the only value of a query parameter or header.
func single(what string, values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", fmt.Errorf("%s is missing", what)
	case 1:
		return checkID(what, values[0])
	}
	return "", fmt.Errorf("%s is given %d times; give it once", what, len(values))
}

// checkID accepts a non-empty identifier of valid UTF-8 without control
// characters (the rule grpclock applies too).
func checkID(what, id string) (string, error) {
	if err := adapt.CheckID(what, id); err != nil {
		return "", errors.New(strings.TrimPrefix(err.Error(), adapt.ErrBadID.Error()+": "))
	}
	return id, nil
}

// canonicalNumber writes a JSON number literal (already validated by the
// decoder) in canonical decimal form, without ever expanding more digits
// than a key can hold.
func canonicalNumber(what, lit string) (string, error) {
	neg := strings.HasPrefix(lit, "-")
	lit = strings.TrimPrefix(lit, "-")
	mant, expPart, _ := strings.Cut(strings.ToLower(lit), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	// The value is digits × 10^exp.
	exp := -len(frac)
	if expPart != "" {
		e, err := strconv.Atoi(expPart)
		if err != nil || e > 1<<20 || e < -(1<<20) {
			if strings.Trim(digits, "0") == "" {
				return "0", nil
			}
			return "", fmt.Errorf("%s is a number too large or too precise for a key", what)
		}
		exp += e
	}
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	digits = trimmed
	if digits == "" {
		return "0", nil
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	switch {
	case exp >= 0:
		if len(digits)+exp > lockmw.MaxKeyLen {
			return "", fmt.Errorf("%s is a number too large for a key", what)
		}
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", exp))
	case -exp >= len(digits):
		if -exp > lockmw.MaxKeyLen {
			return "", fmt.Errorf("%s is a number too precise for a key", what)
		}
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -exp-len(digits)))
		b.WriteString(digits)
	default:
		b.WriteString(digits[:len(digits)+exp])
		b.WriteByte('.')
		b.WriteString(digits[len(digits)+exp:])
	}
	return b.String(), nil
}
