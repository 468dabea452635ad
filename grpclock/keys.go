package grpclock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/metadata"

	"github.com/lockmw/lockmw/internal/adapt"
)

// ErrMissingKey means a call carried no lock key: the request field or
// metadata entry is empty or absent. The call fails with
// codes.InvalidArgument and Redis is not touched.
var ErrMissingKey = errors.New("grpclock: missing lock key")

// ErrMisconfigured means the interceptor is set up wrong for a method: the
// request is not the type FromRequest or Getter expects, a Selector returned
// a bad template, or WithFirstMessage makes a type the handler does not
// receive. The call fails with codes.Internal and a fixed message; the
// details are logged (WithLogger) and recorded on the span.
var ErrMisconfigured = errors.New("grpclock: interceptor misconfigured")

// A KeyFunc returns the lock key for one call, or the resource id that the
// method's name template turns into a key (see Selector). req is the request
// message of a unary call; for a stream it is the first message with
// WithFirstMessage, and nil otherwise.
//
// An empty key, a key that is not valid UTF-8 or holds control characters
// (the rule ginlock applies too), or an error, fails the call with
// codes.InvalidArgument and a fixed message (the cause goes to the span and
// the log); an error matching ErrMisconfigured fails it with codes.Internal;
// an error that is already a gRPC status (status.Error) is returned as it
// is.
type KeyFunc func(ctx context.Context, fullMethod string, req any) (string, error)

// A Keyer is a request message that names its own lock key.
type Keyer interface {
	LockKey() string
}

// FromRequest takes the key from the request's LockKey method (see Keyer).
// A request that is not a Keyer fails with codes.Internal (ErrMisconfigured):
// the interceptor was installed on the wrong methods.
func FromRequest() KeyFunc {
	return func(_ context.Context, fullMethod string, req any) (string, error) {
		k, ok := req.(Keyer)
		if !ok {
			return "", fmt.Errorf("%w: %s: request %T has no LockKey method; lock only methods whose requests implement grpclock.Keyer%s",
				ErrMisconfigured, fullMethod, req, streamHint(req))
		}
		return k.LockKey(), nil
	}
}

// Getter takes the key from a field of the request through its generated
// getter, given as a method expression:
//
//	grpclock.Getter((*pb.BuyRequest).GetItemId)
//
// A request of another type fails with codes.Internal (ErrMisconfigured):
// the interceptor was installed on the wrong methods.
func Getter[T any](get func(T) string) KeyFunc {
	if get == nil {
		panic("grpclock.Getter: nil getter")
	}
	return func(_ context.Context, fullMethod string, req any) (string, error) {
		m, ok := req.(T)
		if !ok {
			var want T
			return "", fmt.Errorf("%w: %s: request is %T, the key getter wants %T; restrict the interceptor with WithMethods%s",
				ErrMisconfigured, fullMethod, req, want, streamHint(req))
		}
		return get(m), nil
	}
}

// Metadata takes the key from the incoming metadata entry name (matched
// case-insensitively, as gRPC does). The entry must have exactly one value.
// It works for unary calls and streams alike.
func Metadata(name string) KeyFunc {
	name = strings.ToLower(name)
	return func(ctx context.Context, fullMethod string, _ any) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		vals := md.Get(name)
		switch len(vals) {
		case 0:
			return "", fmt.Errorf("%w: %s: metadata %q is not set", ErrMissingKey, fullMethod, name)
		case 1:
			return vals[0], nil
		default:
			return "", fmt.Errorf("metadata %q has %d values, want one", name, len(vals))
		}
	}
}

func streamHint(req any) string {
	if req == nil {
		return " (on a stream, set WithFirstMessage or use Metadata)"
	}
	return ""
}

// parseTemplate parses a name template (see Selector): the empty template
// is no template, the key as it is; any other follows the rule of
// adapt.ParseTemplate, which ginlock's WithName follows too.
func parseTemplate(tmpl string) (adapt.Template, error) {
	if tmpl == "" {
		return adapt.Template{}, nil
	}
	return adapt.ParseTemplate(tmpl)
}
