package grpclock_test

import (
	"context"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/lockmw/lockmw/grpclock"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// Malformed templates, request fields and metadata never panic: the call
// either runs holding exactly the key the template spells, or fails with
// InvalidArgument (bad key: empty, too long, not UTF-8, control characters,
// as ginlock rules) or Internal (bad template).
//
//	go test -fuzz FuzzKeys ./grpclock
func FuzzKeys(f *testing.F) {
	f.Add("item:{id}", "42", false)
	f.Add("", "", true)
	f.Add("{a}{b}", "x", false)
	f.Add("}{", "x", true)
	f.Add("x{}y", "x", false)
	f.Add("a{b", strings.Repeat("k", lockmw.MaxKeyLen), true)
	f.Add("{id}", "\x00\xff{}", true)
	f.Add("item:{id}", "a\x7fb", false)
	f.Add("item:{id}", "a\u0085b", false)
	f.Add("item:{id}", "\xff", false)
	srv := redistest.Start(f)
	rdb := srv.Client(f)
	locker := newLocker(f, srv)
	f.Fuzz(func(t *testing.T, tmpl, value string, fromMetadata bool) {
		key := grpclock.FromRequest()
		if fromMetadata {
			key = grpclock.Metadata("x-item")
		}
		icpt := grpclock.UnaryServerInterceptor(locker, key,
			grpclock.WithSelector(func(string) (string, bool) { return tmpl, true }))
		ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs("x-item", value))
		want, badTemplate := value, false
		if tmpl != "" {
			open, end := strings.IndexByte(tmpl, '{'), strings.IndexByte(tmpl, '}')
			if strings.Count(tmpl, "{") != 1 || strings.Count(tmpl, "}") != 1 || end < open+2 { // one {name}, name not empty
				badTemplate = true
			} else {
				want = tmpl[:open] + value + tmpl[end+1:]
			}
		}
		var held bool
		_, err := icpt(ctx, &order{Item: value}, &grpc.UnaryServerInfo{FullMethod: methodBuy}, func(ctx context.Context, req any) (any, error) {
			held = lockHeld(t, rdb, want)
			return req, nil
		})
		switch code := status.Code(err); {
		case badTemplate:
			if code != codes.Internal {
				t.Fatalf("template %q: code %v (%v), want Internal", tmpl, code, err)
			}
		case value == "" || len(want) > lockmw.MaxKeyLen || !utf8.ValidString(value) || strings.IndexFunc(value, unicode.IsControl) >= 0:
			if code != codes.InvalidArgument {
				t.Fatalf("key %q: code %v (%v), want InvalidArgument", want, code, err)
			}
		default:
			if err != nil || !held {
				t.Fatalf("key %q: err %v, held in handler %v", want, err, held)
			}
		}
	})
}
