// Package grpclock provides gRPC server interceptors that run each call
// while holding a per-resource lockmw lock, so that calls on the same order,
// account or item never overlap across a fleet of servers.
//
// A KeyFunc finds the resource in the call: FromRequest (a request message
// with a LockKey method), Getter (a generated field getter such as
// (*pb.BuyRequest).GetItemId), Metadata (an incoming metadata entry), or any
// func(ctx, fullMethod, req). A Selector (WithMethods, WithSelector) picks
// the methods to lock and their name template: with "item:{id}", the call
// whose KeyFunc returns "42" locks "item:42" and is reported as "item:{id}",
// a low-cardinality name for spans and metrics.
//
//	locked := grpclock.WithMethods(map[string]string{"/shop.Shop/Buy": "item:{id}"})
//	srv := grpc.NewServer(
//		grpc.StatsHandler(otelgrpc.NewServerHandler()),
//		grpc.ChainUnaryInterceptor(grpclock.UnaryServerInterceptor(locker, grpclock.Getter((*pb.BuyRequest).GetItemId), locked)),
//		grpc.ChainStreamInterceptor(grpclock.StreamServerInterceptor(locker, grpclock.Metadata("x-item-id"), locked)),
//	)
//
// Give the Redis client short timeouts and no retries of its own
// (DialTimeout, ReadTimeout, WriteTimeout of a few hundred milliseconds,
// MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
// PipelinePoolSize: -1): go-redis otherwise repeats a timed-out call up to
// MaxRetries times, and a Redis outage is answered only after all of them
// (measured figures: lockmw's package documentation, section Redis client
// settings).
//
// # Status codes
//
// Clients get fixed messages that reveal nothing of the server (no Redis
// address, no lockmw error text, no configuration advice); the cause is
// recorded on the span and logged (WithLogger).
//
//   - codes.Aborted: the lock is held by another call (or WithWait ran out).
//     With WithHolderInBusy (off by default: a description may name hosts)
//     it also carries an errdetails.ErrorInfo (Reason "LOCK_HELD") whose
//     metadata "holder" is the holding Locker's lockmw.WithHolderInfo.
//     The status carries an errdetails.RetryInfo with the expected wait, and
//     the trailer grpc-retry-pushback-ms carries it in milliseconds (at
//     least 1), so
//     gRPC's built-in retry policy (with Aborted among its retryable codes)
//     waits that long. The wait is the moving average (weight 1/4 for the
//     newest) of how long this process held locks of the same name and
//     Locker, bounded by the holder's remaining lease; while no hold has
//     been seen, 1s (or the holder's remaining lease, if shorter), not the
//     TTL, which the watchdog keeps renewing: with a 5s TTL and holds of a
//     few hundred milliseconds, the client is told a few hundred
//     milliseconds, not 5s. Aborted is the gRPC code for
//     concurrency conflicts that the client may retry.
//   - codes.Unavailable: the store could not be reached (lockmw.ErrUnavailable)
//     or the Locker is closed.
//   - codes.InvalidArgument: the key is missing or empty (ErrMissingKey),
//     too long, not valid UTF-8 or holds control characters (ginlock's
//     rule), or the KeyFunc failed; also a client-streaming or bidirectional
//     stream that ended before the first message WithFirstMessage waits
//     for. A KeyFunc may return its own status, which is sent as it is.
//   - codes.Canceled, codes.DeadlineExceeded: the call ended while waiting.
//   - codes.Internal: the Locker's store is not set up (lockmw.ErrStoreSetup:
//     a SQL store's tables missing), a setup mistake that waiting does not
//     mend, logged at Error once per method with the store's error.
//   - codes.Internal: the interceptor is misconfigured for the method
//     (ErrMisconfigured: the request is not the type the getter expects, a
//     bad template, a WithFirstMessage type the handler does not receive);
//     logged at Error. A server-streaming call that ends before its request
//     message also gets Internal ("cardinality violation"), from gRPC
//     itself, before the interceptor can answer.
//   - codes.Aborted also answers a call whose lock was lost while the
//     handler ran, when the handler returned a plain error (such as its
//     context's); a status the handler returned is sent as it is.
//
// # The handler
//
// The handler's context (a stream's Context()) is the lease context: it
// carries the call's values and deadline and is cancelled, with cause
// lockmw.ErrLost, if the lock is lost, so the handler can stop before
// another holder starts. The lock is released when the handler returns or
// panics. A handler that calls a service locking the same key through
// lockmw with this context gets a nested lease instead of a deadlock.
//
// # Streams
//
// A stream's key comes from its metadata (Metadata) or a KeyFunc reading
// ctx, since no message has arrived when the interceptor runs; with
// WithFirstMessage the interceptor receives the first message, takes the
// key from it, and hands it to the handler's first RecvMsg. The lock is held
// for the whole stream. On a server-streaming method a call without its
// request message is answered Internal by gRPC (see above).
//
// # Telemetry
//
// Every locked call gets a span named "grpclock.lock" (tracer scope
// ScopeName), a child of the call's span (otelgrpc's, when its stats
// handler is installed) and the parent of lockmw's acquire and release spans
// and of the handler's spans. Its attributes are lock.name (the template),
// lock.outcome (acquired|lost|busy|timeout|invalid|error), lock.wait_ms and,
// once acquired, lock.fence. Only error (the store unavailable), lost and a
// misconfigured interceptor set the span status to Error: a busy lock is an
// expected answer, not a failure. The counter grpclock.calls counts locked calls by lock.name and
// lock.outcome.
package grpclock
