package etcd

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// This file says whether etcd can be reached and, when not, why: New's one
// check (a Locker is made all the same, with one warning), and the
// Diagnoser that names the client's last connection error when a request
// ran out its bound. The etcd client waits for a connection on every
// request and, when the request's context ends, returns the bare context
// error, dropping gRPC's last connection error; a health check that does
// not wait for a connection (gRPC's WaitForReady(false)) fails at once with
// that error while the connection is failing.

// UseLogger takes the Locker's logger (store.Logging).
func (s *etcdStore) UseLogger(logger *slog.Logger) {
	s.mu.Lock()
	s.logger = logger
	s.mu.Unlock()
}

// checkReach asks etcd once, waiting up to the Locker's TTL, and logs one
// warning, naming the endpoints and the cause, when etcd does not answer.
func (s *etcdStore) checkReach() {
	s.mu.Lock()
	logger, wait := s.logger, s.lockerTTL
	s.mu.Unlock()
	if logger == nil || wait <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err := s.probe(ctx)
	if err == nil {
		return
	}
	logger.Warn("lockmw: etcd cannot be reached; the Locker is made all the same, and its requests fail with ErrUnavailable until etcd answers",
		slog.String("endpoints", s.endpoints()), slog.Duration("waited", wait), slog.Any("error", err))
}

// Diagnose returns the etcd client's last connection error, or nil when
// its connection is up (a server that is slow, or paused, and no error
// seen) (store.Diagnoser). It probes only a connection that is failing,
// where the probe fails at once with the error.
func (s *etcdStore) Diagnose(ctx context.Context) error {
	conn := s.c.ActiveConnection()
	if conn == nil {
		return nil
	}
	switch st := conn.GetState(); st {
	case connectivity.Ready, connectivity.Shutdown:
		return nil
	case connectivity.TransientFailure:
	default:
		return fmt.Errorf("etcd at %s: the gRPC connection is %s: its attempt to connect has not succeeded yet", s.endpoints(), st)
	}
	if err := s.probe(ctx); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// probe sends a health check that does not wait for a connection. It
// returns nil when etcd answered anything (a server without the health
// service answers Unimplemented), and otherwise an error naming the
// endpoints and gRPC's reason.
func (s *etcdStore) probe(ctx context.Context) error {
	conn := s.c.ActiveConnection()
	if conn == nil {
		return fmt.Errorf("etcd client for %s has no connection (closed?)", s.endpoints())
	}
	_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(false))
	switch status.Code(err) {
	case codes.OK, codes.Unimplemented, codes.PermissionDenied, codes.Unauthenticated, codes.NotFound:
		return nil
	case codes.DeadlineExceeded, codes.Canceled:
		if ctx.Err() != nil {
			return fmt.Errorf("etcd at %s did not answer a health check (gRPC connection state %s)", s.endpoints(), conn.GetState())
		}
	}
	msg := err.Error()
	if st, ok := status.FromError(err); ok {
		msg = st.Message()
	}
	return fmt.Errorf("etcd at %s: %s", s.endpoints(), msg)
}

// endpoints names the client's endpoints.
func (s *etcdStore) endpoints() string {
	return strings.Join(s.c.Endpoints(), ",")
}
