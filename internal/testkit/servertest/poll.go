package servertest

import (
	"context"
	"fmt"
	"time"
)

// Poll calls check every interval until it returns nil, and returns nil
// then; once ctx ends it returns an error with ctx's cause and check's
// last error. A Ready check is typically one Poll of a status request,
// each bounded by the context check gets.
func Poll(ctx context.Context, every time.Duration, check func(ctx context.Context) error) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", context.Cause(ctx), err)
		case <-t.C:
		}
	}
}
