package lockmw

import (
	"context"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file raises a key's fence above the whole store's before an
// acquisition made with StoreWideFence.

// raiseFence raises key's fence counter above every fence the store drew
// before, for any key, when the acquisition asks for it (StoreWideFence)
// and the store draws fences per key (store.FenceRaiser).
func (l *Locker) raiseFence(ctx context.Context, key string, ac *acquireConfig) error {
	r, ok := l.st.(store.FenceRaiser)
	if !ac.storeWide || !ok {
		return nil
	}
	if err := r.RaiseFence(ctx, store.Key{Prefix: l.cfg.prefix, Name: key}); err != nil {
		return storeErr(ctx, key, err)
	}
	return nil
}
