// Package ginlock is gin middleware that runs a route's handlers while holding
// a distributed lock (lockmw) on the resource the request names, so that two
// requests on the same order, account or item never run their handlers at the
// same time, on any instance of the service.
//
//	locker, _ := lockmw.New(redisClient)
//	r := gin.New()
//	r.ContextWithFallback = true // required: see "While the lock is held"
//	r.POST("/orders/:id/pay",
//		ginlock.New(locker, ginlock.Param("id"), ginlock.WithName("order:{id}")),
//		payOrder)
//
// Give the Redis client short timeouts and no retries of its own
// (DialTimeout, ReadTimeout, WriteTimeout of a few hundred milliseconds,
// MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
// PipelinePoolSize: -1): go-redis otherwise repeats a timed-out call up to
// MaxRetries times, and a Redis outage is answered only after all of them
// (measured figures: lockmw's package documentation, section Redis client
// settings).
//
// # Keys and names
//
// A KeyFunc takes the resource's identifier from the request: Param (a path
// parameter), Query, Header, JSONField (a field of a JSON body, which is
// restored for the handler) or any func(*gin.Context) (string, error).
// WithName gives a template such as "order:{id}" with exactly one
// placeholder, a non-empty name in braces, and no other braces (the rule
// grpclock applies too): the identifier replaces the placeholder to form the lock key
// ("order:42"), and the template itself is the low-cardinality name reported
// as lock.name in spans and metrics. Routes that must exclude each other (pay
// and cancel on one order) use the same template. Without WithName the key is
// the identifier itself and lock.name is the route pattern.
//
// Identifiers are used verbatim, except JSON numbers, which are written in
// canonical decimal form so that one resource is one key: 42, 42.0 and 4.2e1
// all lock "42", as does the string "42" (see JSONField). They must be
// non-empty valid UTF-8 without control characters (grpclock applies the
// same rule), and the resulting key at most lockmw.MaxKeyLen bytes; a Query
// or Header given more than once is rejected, so the lock always covers the
// value the handler reads. WithSkip lets chosen requests through without a
// lock.
//
// # Responses
//
// Failures are answered with RFC 9457 problem details
// (application/problem+json with type, title, status and detail), and the
// chain is aborted: the route's handlers do not run. Answers of 500 and up
// are recorded in c.Errors for gin's loggers (and otelgin, which then marks
// the request's server span an error); 4xx answers (busy, bad input, a lost
// lock) are not, as OpenTelemetry's HTTP conventions leave a server span
// unset for a client's error: the middleware's own span, its counter and
// its logger record them.
//
//   - Busy (another request holds the lock): 409 Conflict with Retry-After,
//     the expected wait in whole seconds, rounded up, at least 1: the moving
//     average (weight 1/4 for the newest) of how long this process held
//     locks of the same name and Locker, from acquisition to release,
//     bounded by the holder's remaining lease; while no hold has been seen,
//     1 (the holder's remaining lease renewed by the watchdog says nothing
//     about when it is released). With 200ms holds and a 3s TTL the
//     client is told 1, not 3. By default the middleware fails fast;
//     WithWait waits for the lock first, never longer than the request's
//     context allows.
//   - No usable key in the request: 400 Bad Request (413 when a JSON body
//     exceeds the size limit of JSONField).
//   - The store unreachable or too slow (lockmw.ErrUnavailable), Locker closed, or
//     the request's context ended while waiting: 503 Service Unavailable
//     with Retry-After: 1. The detail does not expose the cause, which is
//     logged (WithLogger) and recorded on the span.
//   - Set up wrong (ErrMisconfigured: Param names a parameter the route does
//     not have, or the engine does not set ContextWithFallback): 500 for
//     every request, and an error log line saying what to fix, once per
//     route and middleware.
//   - The Locker's store not set up (lockmw.ErrStoreSetup: a SQL store's
//     tables missing): 500, not 503 (waiting does not mend it), and an
//     error log line with the store's error, saying how to create them,
//     once per route and middleware.
//
// WithHolderInBusy adds the holder's description (the holding Locker's
// lockmw.WithHolderInfo) to busy answers, as the problem's "holder" member;
// it is off by default, since a description may name hosts.
// WithBusyHandler and WithErrorHandler replace these responses.
//
// # When the response leaves
//
// The handlers' response is held until the lock is released, then sent: a
// client that has read its complete response and at once sends its next
// request on the same resource never finds its own finished request still
// holding the lock (the release has reached Redis before the first byte
// leaves). The price is that the response is kept in memory. WithStreaming
// sends responses as they are written instead (for downloads and
// server-sent events), and a handler that calls c.Writer.Flush streams from
// then on; either way the client may then see the response before the
// release, and a next request sent at once may get 409.
//
// # While the lock is held
//
// The route's handlers run with c.Request's context replaced by the lease
// context: it is cancelled, with cause lockmw.ErrLost, if the lock is lost
// (its key expired or was taken, or the store stopped confirming renewals). A
// handler that locks the same key with that context through the same Locker
// gets a nested lease instead of deadlocking.
//
// The engine must set ContextWithFallback = true, so that the *gin.Context
// itself carries the lease context: then locker.Do(c, key, ...) nests, and
// work done with c as its context stops when the lock is lost. Without it,
// the *gin.Context is never cancelled and such a call would wait for the
// request's own lock; the middleware refuses to run on such an engine (500,
// ErrMisconfigured, logged with the fix) unless WithRequestContextOnly says
// the handlers only ever use c.Request.Context().
//
// The lock is released when the handlers return, also when they panic; the
// panic then continues, so gin.Recovery still answers, and what the handlers
// had written is dropped.
//
// If the lock was lost while the handlers ran, the span is an error with
// lock.outcome lost, the request is counted as lost and a warning is logged.
// A client whose handlers wrote no response gets 409 Conflict (type
// ProblemLost, through WithErrorHandler with an error matching
// lockmw.ErrLost): whether the work took effect is unknown. A response the
// handlers wrote is sent as they wrote it: they saw their context cancelled
// and chose the answer (use the lease's Fence to make late writes fail).
//
// # Telemetry
//
// Each request that reaches the middleware gets a span named "ginlock.lock"
// (tracer scope ScopeName) around acquisition, handlers and release, a child
// of the request's span (otelgin's, when installed), with attributes
// lock.name, lock.outcome (acquired|busy|timeout|error|invalid|lost),
// lock.wait_ms and lock.fence. Busy is not a span error; error, lost and
// setup mistakes are. The counter
// ginlock.requests counts requests by lock.name and lock.outcome.
// WithTracerProvider and WithMeterProvider choose the providers; by default
// the global ones are used.
package ginlock
