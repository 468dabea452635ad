package postgres_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockmw/lockmw/ginlock"
	"github.com/lockmw/lockmw/grpclock"
	"github.com/lockmw/lockmw/internal/lockmwtest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/postgres"
)

// Tables dropped under a running Locker are a setup mistake: ginlock
// answers 500 and grpclock codes.Internal, as to their other setup
// mistakes, not "unavailable, retry later", and each logs it once (per
// route or method), at Error.
func TestAdaptersAnswerStoreSetup(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	ctx := bg(t)
	sc := postgres.Schema{Table: "adapted"}
	if err := sc.CreateTable(ctx, newPool(t, srv.URL())); err != nil {
		t.Fatal(err)
	}
	l, err := sc.New(newPool(t, srv.URL()), lockmw.WithTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srv.Exec(t, "DROP TABLE adapted, adapted_queue, adapted_claims; DROP SEQUENCE adapted_fence")

	t.Run("ginlock", func(t *testing.T) {
		gin.SetMode(gin.TestMode)
		logs := &lockmwtest.Logs{}
		r := gin.New()
		r.ContextWithFallback = true
		r.GET("/orders/:id", ginlock.New(l, ginlock.Param("id"), ginlock.WithLogger(slog.New(logs))), func(c *gin.Context) { c.String(http.StatusOK, "ran") })
		for i := range 3 {
			w := httptest.NewRecorder()
			r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/orders/42", nil))
			if w.Code != http.StatusInternalServerError {
				t.Fatalf("request %d: %d %s, want 500", i, w.Code, w.Body)
			}
		}
		if got := logs.Find(slog.LevelWarn, ""); len(got) != 1 || got[0].Level != slog.LevelError {
			t.Fatalf("logs of three requests: %q, want one Error", lockmwtest.Texts(got))
		}
	})

	t.Run("grpclock", func(t *testing.T) {
		logs := &lockmwtest.Logs{}
		icpt := grpclock.UnaryServerInterceptor(l, func(context.Context, string, any) (string, error) { return "order:42", nil },
			grpclock.WithLogger(slog.New(logs)))
		info := &grpc.UnaryServerInfo{FullMethod: "/shop.Orders/Pay"}
		for i := range 3 {
			_, err := icpt(ctx, nil, info, func(context.Context, any) (any, error) { return "ran", nil })
			if status.Code(err) != codes.Internal {
				t.Fatalf("call %d: %v, want codes.Internal", i, err)
			}
		}
		if got := logs.Find(slog.LevelWarn, ""); len(got) != 1 || got[0].Level != slog.LevelError {
			t.Fatalf("logs of three calls: %q, want one Error", lockmwtest.Texts(got))
		}
	})
}
