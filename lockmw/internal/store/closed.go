package store

// This file is the boundary's word for a store whose client its owner
// closed while the Locker still used it.

// ClientCloser is a store whose client can be closed by its owner while
// the Locker still holds it (the Locker does not own its client: its
// owner should close it after the Locker, but may not). The Locker's
// cleaner gives up at once on a give-back that failed that way, as no
// retry can succeed, rather than retrying it until the lease TTL.
type ClientCloser interface {
	// ClientClosed reports whether err says that the store's client was
	// closed: the request was not sent, and none will be.
	ClientClosed(err error) bool
}
