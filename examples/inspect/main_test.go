package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The demo prints the held locks with their holders and waiters, then the
// table without the lock whose lease expired.
func TestDemo(t *testing.T) {
	t.Setenv("REDIS_ADDR", "")
	var out bytes.Buffer
	if err := runDemo(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	first, second, ok := strings.Cut(out.String(), "== report:daily expired")
	if !ok {
		t.Fatalf("no second table:\n%s", out.String())
	}
	for _, want := range []string{"item:7", "flashsale-1 host-b pid 7", "order:42", "orders-7d9f host-a pid 42", "report:daily"} {
		if !strings.Contains(first, want) {
			t.Errorf("first table lacks %q:\n%s", want, first)
		}
	}
	row := func(table, key string) []string {
		for line := range strings.SplitSeq(table, "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == key {
				return f
			}
		}
		return nil
	}
	if r := row(first, "item:7"); len(r) < 4 || r[1] != "true" || r[3] != "2" {
		t.Errorf("item:7's row %q: want held with 2 waiters", r)
	}
	if row(second, "report:daily") != nil || row(second, "order:42") == nil || row(second, "item:7") == nil {
		t.Errorf("second table: want order:42 and item:7 without report:daily:\n%s", second)
	}
}
