package ginlock_test

import (
	"bytes"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/lockmw/lockmw/ginlock"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

const fuzzBodyLimit = 4096

// FuzzKeyExtractors sends malformed path parameters, query strings, headers
// and JSON bodies through each extractor. Whatever the input, nothing
// panics; a request whose key cannot be extracted gets 400 (413 for a body
// over the limit) and never reaches the handler; a request with a usable key
// runs the handler holding exactly the lock its input names, with the body
// intact. The oracle decides usability with the standard library alone.
func FuzzKeyExtractors(f *testing.F) {
	f.Add("42", "id=42", []byte(`{"order":{"id":"42"}}`))
	f.Add("", "", []byte(``))
	f.Add("a%01b", "id=1&id=2", []byte(`{"order":{"id":17}}`))
	f.Add("\xff\xfe", "id=%ff", []byte(`{"order":`))
	f.Add("x\x00y", "id=%00", []byte(`{"order":{"id":"a\u0000"}}`))
	f.Add("a/b", "id", []byte(`{"order":{"id":null}} trailing`))
	f.Add(strings.Repeat("9", 600), "id="+strings.Repeat("9", 600), []byte(`{"order":{"id":1e400}}`))
	f.Add("ünï", "id=%E2%82%AC", []byte(`{"order":{"id":"\ud800"}}`))
	f.Add("{id}", "id=a;b", []byte(`[{"order":{"id":"1"}}]`))
	f.Add(" ", "id=+", []byte(`{"order":{"id":"x","id":"y"}}`))
	f.Add("\u2028", "%zz=1&id=2", []byte("\xef\xbb\xbf{\"order\":{\"id\":\"1\"}}"))
	f.Add("-", "id=1&id", []byte(`{"order":[1,2]}`))
	f.Add("0", "id=0", []byte(`{"order":{"id":-0.000e-99999999999999}}`))
	f.Add("42", "id=42", []byte(`{"order":{"id":420.00e-1}}`))
	f.Add("x", "id=x", []byte(`{"order":{"id":-1.5e-3}}`))

	srv := redistest.Start(f)
	l := newLocker(f, srv)
	e := newGin()
	var gotKey string
	var gotBody []byte
	handler := func(c *gin.Context) {
		gotKey = ginlock.LeaseFrom(c).Key()
		gotBody, _ = io.ReadAll(c.Request.Body)
		c.Status(http.StatusOK)
	}
	named := ginlock.WithName("order:{id}")
	e.GET("/p/:id", ginlock.New(l, ginlock.Param("id"), named), handler)
	e.GET("/q", ginlock.New(l, ginlock.Query("id"), named), handler)
	e.GET("/h", ginlock.New(l, ginlock.Header("X-Order"), named), handler)
	e.POST("/j", ginlock.New(l, ginlock.JSONFieldLimit("order.id", fuzzBodyLimit), named), handler)

	f.Fuzz(func(t *testing.T, param, query string, body []byte) {
		check := func(route string, req *http.Request, wantID string, usable bool, wantBody []byte) {
			t.Helper()
			gotKey, gotBody = "", nil
			rec := serve(e, req)
			switch {
			case rec.Code == http.StatusOK:
				if !usable {
					t.Fatalf("%s: 200 for an unusable key (%q)", route, wantID)
				}
				if gotKey != "order:"+wantID {
					t.Fatalf("%s: handler held %q, want %q", route, gotKey, "order:"+wantID)
				}
				if wantBody != nil && !bytes.Equal(gotBody, wantBody) {
					t.Fatalf("%s: handler read body %q, want %q", route, gotBody, wantBody)
				}
			case usable:
				t.Fatalf("%s: status %d for usable key %q: %s", route, rec.Code, wantID, rec.Body)
			case rec.Code == http.StatusBadRequest || rec.Code == http.StatusRequestEntityTooLarge:
				problem(t, rec, rec.Code)
				if gotKey != "" {
					t.Fatalf("%s: handler ran after %d", route, rec.Code)
				}
			default:
				t.Fatalf("%s: status %d for unusable key %q, want 400: %s", route, rec.Code, wantID, rec.Body)
			}
		}

		// Path parameter: a segment without '/' reaches the route.
		if param != "" && !strings.Contains(param, "/") {
			req := httptest.NewRequest(http.MethodGet, "/p/x", nil)
			req.URL.Path, req.URL.RawPath = "/p/"+param, ""
			check("param", req, param, usable(param), nil)
		}

		// Query string, taken raw.
		req := httptest.NewRequest(http.MethodGet, "/q", nil)
		req.URL.RawQuery = query
		ids := req.URL.Query()["id"]
		check("query", req, strings.Join(ids, ","), len(ids) == 1 && usable(ids[0]), nil)

		// Header, set without the transport's validation.
		req = httptest.NewRequest(http.MethodGet, "/h", nil)
		req.Header["X-Order"] = []string{param}
		check("header", req, param, usable(param), nil)

		// JSON body.
		req = httptest.NewRequest(http.MethodPost, "/j", bytes.NewReader(body))
		id, ok := jsonOrderID(body)
		if len(body) > fuzzBodyLimit {
			rec := serve(e, req)
			problem(t, rec, http.StatusRequestEntityTooLarge)
			return
		}
		check("json", req, id, ok && usable(id), body)
	})
}

// usable is the oracle for identifiers: non-empty UTF-8 without control
// characters, making a key of at most MaxKeyLen bytes.
func usable(id string) bool {
	return id != "" && utf8.ValidString(id) && strings.IndexFunc(id, unicode.IsControl) < 0 &&
		len("order:"+id) <= lockmw.MaxKeyLen
}

// jsonOrderID returns order.id of a JSON body as the text the key uses: a
// string's value or a number's literal.
func jsonOrderID(body []byte) (string, bool) {
	if !json.Valid(body) {
		return "", false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if dec.Decode(&doc) != nil {
		return "", false
	}
	// A document that is not an object, or whose "order" is not one, has no
	// order.id.
	top, _ := doc.(map[string]any)
	order, _ := top["order"].(map[string]any)
	switch v := order["id"].(type) {
	case string:
		return v, true
	case json.Number:
		return canonical(v.String())
	}
	return "", false
}

// canonical is the oracle for JSON numbers: the exact value (math/big) in
// plain decimal, so that 42, 42.0 and 4.2e1 give "42". A value whose
// decimal form could not fit a key is reported as unusable.
func canonical(lit string) (string, bool) {
	mant, exp, hasExp := strings.Cut(strings.ToLower(lit), "e")
	if strings.Trim(mant, "-0.") == "" {
		return "0", true
	}
	if hasExp {
		if e, err := strconv.Atoi(exp); err != nil || e > 2*lockmw.MaxKeyLen || e < -2*lockmw.MaxKeyLen {
			return "", false
		}
	}
	r, ok := new(big.Rat).SetString(lit)
	if !ok {
		return "", false
	}
	if r.IsInt() {
		return r.Num().String(), true
	}
	// The denominator divides 10^k for the k digits after the point.
	for k := 1; ; k++ {
		scaled := new(big.Rat).Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(k)), nil)))
		if scaled.IsInt() {
			return r.FloatString(k), true
		}
	}
}
