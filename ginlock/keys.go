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
	"unicode"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
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
)

// Param takes the identifier from the path parameter name (":name" in the
// route).
func Param(name string) KeyFunc {
	return func(c *gin.Context) (string, error) {
		return checkID("path parameter "+strconv.Quote(name), c.Param(name))
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
// an array ("items.0.sku"). The field must hold a string, or a number, which
// is used as written ("42", "4.2e1"). The body is restored for the handlers,
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
			return v.String(), nil
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
// characters.
func checkID(what, id string) (string, error) {
	switch {
	case id == "":
		return "", fmt.Errorf("%s is missing or empty", what)
	case !utf8.ValidString(id):
		return "", fmt.Errorf("%s is not valid UTF-8", what)
	case strings.IndexFunc(id, unicode.IsControl) >= 0:
		return "", fmt.Errorf("%s contains control characters", what)
	}
	return id, nil
}
