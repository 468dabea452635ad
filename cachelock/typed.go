package cachelock

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// FetchJSON is Fetch for values of type T, stored as JSON: load returns a T,
// and the cached bytes are decoded into one. It keeps every guarantee of
// Fetch. A cached value that does not decode into T (the type changed) is
// reported as an error; invalidate the key, or change the prefix, when
// changing T incompatibly. A load that returns a value encoding as JSON
// null (a nil pointer, slice or map) with a nil error is refused with an
// error matching ErrNilValue, as a nil slice is by Fetch: return ErrNotFound
// for a missing value.
func FetchJSON[T any](ctx context.Context, c *Cache, key string, ttl time.Duration, load func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	if load == nil {
		return zero, c.nilLoad(key)
	}
	raw, err := c.Fetch(ctx, key, ttl, func(ctx context.Context) ([]byte, error) {
		v, err := load(ctx)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("cachelock: FetchJSON %q: encoding the loaded %T: %w", key, v, err)
		}
		if string(b) == "null" {
			return nil, nil // refused by Fetch with ErrNilValue
		}
		return b, nil
	})
	if err != nil {
		return zero, err
	}
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return zero, fmt.Errorf("cachelock: FetchJSON %q: the cached value is not a %T (invalidate the key after changing its type): %w", key, v, err)
	}
	return v, nil
}
