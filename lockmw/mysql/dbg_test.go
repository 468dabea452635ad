package mysql_test

import (
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/mysql"
)

func TestDbgUncCount(t *testing.T) {
	srv := startServer(t)
	c := statements(srv.DB(t, ""))
	for _, fair := range []bool{false, true} {
		l, _ := mysql.New(srv.DB(t, "", "interpolateParams=true"))
		var opts []lockmw.AcquireOption
		if fair {
			opts = append(opts, lockmw.Fair())
		}
		n0 := c.Count(t)
		t0 := time.Now()
		for range 200 {
			le, err := l.Acquire(bg(t), "u", opts...)
			if err != nil {
				t.Fatal(err)
			}
			le.Release(bg(t))
		}
		t.Log(fair, float64(c.Count(t)-n0)/200, time.Since(t0)/200)
		l.Close()
	}
}
