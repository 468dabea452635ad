package postgres_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockmw/lockmw/cronlock"
	"github.com/lockmw/lockmw/ginlock"
	"github.com/lockmw/lockmw/grpclock"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/cronsuite"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/postgres"
)

// Tables dropped under a running Locker are a setup mistake: ginlock
// answers 500 and grpclock codes.Internal, as to their other setup
// mistakes, not "unavailable, retry later", and each logs it once (per
// route or method), at Error; cronlock skips each fire with the reason
// setup (not unavailable) and an Error that says to create the tables.
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

	t.Run("cronlock", func(t *testing.T) {
		logs := &cronsuite.RecordLogger{}
		_, _, reader, mp := lockmwtest.NewTelemetry()
		c := cron.New(cron.WithParser(cronsuite.SecondsParser))
		s, err := cronlock.NewScheduler(c, l, nil, cronlock.WithLogger(logs), cronlock.WithMeterProvider(mp), cronlock.WithParser(cronsuite.SecondsParser))
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan struct{}, 1)
		if _, err := s.AddJob("nightly", "* * * * * *", cron.FuncJob(func() { ran <- struct{}{} })); err != nil {
			t.Fatal(err)
		}
		c.Start()
		defer func() { <-c.Stop().Done() }()
		for deadline := time.Now().Add(30 * time.Second); logs.Count(true, "skip") == 0; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no fire skipped within 30s of a job due every second; logs: %v", logs.Find(false, ""))
			}
		}
		select {
		case <-ran:
			t.Fatal("the job ran on a store without tables")
		default:
		}
		got := logs.Find(true, "skip")[0]
		if !strings.Contains(got.Msg, "not set up for lockmw") || !errors.Is(got.KV["error"].(error), lockmw.ErrStoreSetup) {
			t.Errorf("skip log %q (error %v), want it to say the store is not set up, with an error matching ErrStoreSetup", got.Msg, got.KV["error"])
		}
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		reasons := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if d, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "cronlock.skips" {
					for _, p := range d.DataPoints {
						r, _ := p.Attributes.Value(attribute.Key("cron.skip_reason"))
						reasons[r.AsString()] += p.Value
					}
				}
			}
		}
		if reasons["setup"] == 0 || reasons["unavailable"] != 0 {
			t.Errorf("cronlock.skips by reason = %v, want setup only", reasons)
		}
	})
}
