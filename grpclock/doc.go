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
// # Status codes
//
//   - codes.Aborted: the lock is held by another call (or WithWait ran out).
//     The status carries an errdetails.RetryInfo with the holder's
//     remaining lease time when Redis reported it. Aborted is the gRPC code
//     for concurrency conflicts that the client may retry.
//   - codes.Unavailable: Redis could not be reached (lockmw.ErrUnavailable)
//     or the Locker is closed.
//   - codes.InvalidArgument: the key is missing or empty (ErrMissingKey),
//     too long, or the KeyFunc failed. A KeyFunc may return its own status.
//   - codes.Canceled, codes.DeadlineExceeded: the call ended while waiting.
//   - codes.Internal: the interceptor is misconfigured for the method (the
//     request is not the type the getter expects, a bad template).
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
// for the whole stream.
//
// # Telemetry
//
// Every locked call gets a span named "grpclock.lock" (tracer scope
// ScopeName), a child of the call's span (otelgrpc's, when its stats
// handler is installed) and the parent of lockmw's acquire and release spans
// and of the handler's spans. Its attributes are lock.name (the template),
// lock.outcome (acquired|lost|busy|timeout|invalid|error), lock.wait_ms and,
// once acquired, lock.fence. Only error (Redis unavailable) and lost set
// the span status to Error: a busy lock is an expected answer, not a
// failure. The counter grpclock.calls counts locked calls by lock.name and
// lock.outcome.
package grpclock
