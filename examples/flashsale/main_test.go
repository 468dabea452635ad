package main

import (
	"context"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

// With ginlock the sale sells exactly its stock across three instances on a
// real redis-server, and turns every other buyer away as sold out. The
// clients' timeouts and the TTL are ten times the demo's (the same ratio):
// with 300 ms, one dial among the 60 buyers' connections timed out on a
// loaded machine, and its buyer was answered 503.
func TestSaleWithLockNeverOversells(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	srv := redistest.Start(t)
	cfg := config{buyers: 60, stock: 20, instances: 3, charge: 2 * time.Millisecond,
		timeout: 10 * defaultTimeout, ttl: 10 * defaultTTL}
	res, err := sale(context.Background(), srv.Addr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.sold != cfg.stock || res.left != 0 {
		t.Errorf("sold %d with %d left, want all %d sold and 0 left", res.sold, res.left, cfg.stock)
	}
	if a := res.answers; a.sold != cfg.stock || a.soldOut != cfg.buyers-cfg.stock || a.busy != 0 || a.failed != 0 {
		t.Errorf("answers %+v, want %d sold and %d sold out", a, cfg.stock, cfg.buyers-cfg.stock)
	}
	var perInstance int64
	for _, in := range res.instances {
		perInstance += in.sold
	}
	if perInstance != int64(cfg.stock) {
		t.Errorf("instances sold %d in total, want %d", perInstance, cfg.stock)
	}
}
