package ginlock_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockmw/lockmw/ginlock"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// Nil options are skipped: the middleware works with the others.
func TestNewSkipsNilOptions(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	l := lockmwtest.NewLocker(t, srv)
	var nilOpt ginlock.Option
	held := false
	e := gin.New()
	e.ContextWithFallback = true
	e.POST("/orders/:id", ginlock.New(l, ginlock.Param("id"), nil, ginlock.WithName("order:{id}"), nilOpt),
		func(c *gin.Context) {
			held = rdb.Exists(c, lockmw.DefaultPrefix+"{order:7}").Val() == 1
			c.Status(http.StatusOK)
		})
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/orders/7", nil))
	if rec.Code != http.StatusOK || !held {
		t.Errorf("status %d, lock order:7 held in the handler: %v; want 200 and held", rec.Code, held)
	}
}

// Option mistakes are found by New, not by the option functions, and New
// panics with an error matching lockmw.ErrInvalidOption that names the
// option.
func TestNewPanicsOnInvalidOptions(t *testing.T) {
	srv := redistest.Start(t)
	l := lockmwtest.NewLocker(t, srv)
	for _, tc := range []struct {
		name string
		opt  ginlock.Option
		want string
	}{
		{"empty placeholder", ginlock.WithName("x{}y"), `WithName("x{}y")`},
		{"no template", ginlock.WithName(""), `WithName("")`},
		{"negative wait", ginlock.WithWait(-time.Second), "WithWait(-1s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				err, _ := recover().(error)
				if !errors.Is(err, lockmw.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("panic %v, want an error matching lockmw.ErrInvalidOption naming %s", err, tc.want)
				}
			}()
			ginlock.New(l, ginlock.Param("id"), tc.opt)
		})
	}
}
