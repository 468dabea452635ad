// Package ginlock is gin middleware that runs a route's handlers while holding
// a distributed lock (lockmw) on the resource the request names, so that two
// requests on the same order, account or item never run their handlers at the
// same time, on any instance of the service.
//
//	locker, _ := lockmw.New(redisClient)
//	r.POST("/orders/:id/pay",
//		ginlock.New(locker, ginlock.Param("id"), ginlock.WithName("order:{id}")),
//		payOrder)
//
// # Keys and names
//
// A KeyFunc takes the resource's identifier from the request: Param (a path
// parameter), Query, Header, JSONField (a field of a JSON body, which is
// restored for the handler) or any func(*gin.Context) (string, error).
// WithName gives a template such as "order:{id}" with exactly one
// placeholder: the identifier replaces the placeholder to form the lock key
// ("order:42"), and the template itself is the low-cardinality name reported
// as lock.name in spans and metrics. Routes that must exclude each other (pay
// and cancel on one order) use the same template. Without WithName the key is
// the identifier itself and lock.name is the route pattern.
//
// Identifiers are used verbatim. They must be non-empty valid UTF-8 without
// control characters, and the resulting key at most lockmw.MaxKeyLen bytes;
// a Query or Header given more than once is rejected, so the lock always
// covers the value the handler reads.
//
// # Responses
//
// Failures are answered with RFC 9457 problem details
// (application/problem+json with type, title, status and detail), and the
// chain is aborted: the route's handlers do not run.
//
//   - Busy (another request holds the lock): 409 Conflict with Retry-After,
//     the holder's remaining lease in whole seconds, rounded up. By default
//     the middleware fails fast; WithWait waits for the lock first, never
//     longer than the request's context allows.
//   - No usable key in the request: 400 Bad Request (413 when a JSON body
//     exceeds the size limit of JSONField).
//   - Redis unreachable or too slow (lockmw.ErrUnavailable), Locker closed, or
//     the request's context ended while waiting: 503 Service Unavailable.
//
// WithBusyHandler and WithErrorHandler replace these responses.
//
// # While the lock is held
//
// The route's handlers run with c.Request's context replaced by the lease
// context: it is cancelled, with cause lockmw.ErrLost, if the lock is lost
// (its key expired or was taken, or Redis stopped confirming renewals), so
// handlers must do their work with c.Request.Context(). A handler that locks
// the same key with that context through the same Locker gets a nested lease
// instead of deadlocking. The lock is released when the handlers return, also
// when they panic; the panic then continues, so gin.Recovery still answers.
//
// # Telemetry
//
// Each request that reaches the middleware gets a span named "ginlock.lock"
// (tracer scope ScopeName) around acquisition, handlers and release, a child
// of the request's span (otelgin's, when installed), with attributes
// lock.name, lock.outcome (acquired|busy|timeout|error|invalid|lost),
// lock.wait_ms and lock.fence. Busy is not a span error. The counter
// ginlock.requests counts requests by lock.name and lock.outcome.
// WithTracerProvider and WithMeterProvider choose the providers; by default
// the global ones are used.
package ginlock
