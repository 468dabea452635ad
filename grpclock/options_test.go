package grpclock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/lockmw/lockmw/grpclock"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// Nil options are skipped: both interceptors work with the others.
func TestInterceptorsSkipNilOptions(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	locker := newLocker(t, srv)
	var nilOpt grpclock.Option
	opts := []grpclock.Option{nil, grpclock.WithMethods(map[string]string{methodBuy: "item:{id}"}), nilOpt}
	unary := grpclock.UnaryServerInterceptor(locker, grpclock.FromRequest(), opts...)
	var held bool
	_, err := unary(t.Context(), &order{Item: "5"}, &grpc.UnaryServerInfo{FullMethod: methodBuy}, func(ctx context.Context, req any) (any, error) {
		held = lockHeld(t, rdb, "item:5")
		return req, nil
	})
	if err != nil || !held {
		t.Errorf("unary call: err %v, lock item:5 held in the handler: %v", err, held)
	}
	_ = grpclock.StreamServerInterceptor(locker, grpclock.Metadata("x-item"), opts...)
}

// Option mistakes are found by the interceptor constructors, not by the
// option functions, which never panic; the constructors panic with an error
// matching lockmw.ErrInvalidOption that names the option.
func TestInterceptorsPanicOnInvalidOptions(t *testing.T) {
	srv := redistest.Start(t)
	locker := newLocker(t, srv)
	for _, tc := range []struct {
		name string
		opt  grpclock.Option
		want string
	}{
		{"template", grpclock.WithMethods(map[string]string{methodBuy: "x{}y"}), "WithMethods: method " + methodBuy},
		{"nil selector", grpclock.WithSelector(nil), "WithSelector(nil)"},
		{"negative wait", grpclock.WithWait(-time.Second), "WithWait(-1s)"},
		{"nil first message", grpclock.WithFirstMessage(nil), "WithFirstMessage(nil)"},
	} {
		for kind, build := range map[string]func(){
			"unary":  func() { grpclock.UnaryServerInterceptor(locker, grpclock.FromRequest(), tc.opt) },
			"stream": func() { grpclock.StreamServerInterceptor(locker, grpclock.FromRequest(), tc.opt) },
		} {
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				defer func() {
					err, _ := recover().(error)
					if !errors.Is(err, lockmw.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) {
						t.Errorf("panic %v, want an error matching lockmw.ErrInvalidOption naming %s", err, tc.want)
					}
				}()
				build()
			})
		}
	}
}
