package postgres

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// The row names of keys text holds are what releases before the hex
// encoding wrote (rolling upgrades rely on it); a key with NUL or bytes
// that are not UTF-8 gets the hex name of its bytes, which the database
// reads back as those bytes, and which no key text holds can have.
func TestRowNamesOfKeysTextCannotHold(t *testing.T) {
	for _, c := range []struct{ prefix, key, want string }{
		{"lockmw:", "order-1", "7:lockmw:order-1"},
		{"", "é/ロック 🔒\t\n", "0:é/ロック 🔒\t\n"},
		{"lockmw:", `\x00`, `7:lockmw:\x00`}, // a backslash is text: as it is
		{"lockmw:", "nul\x00", `\x373a6c6f636b6d773a6e756c00`},
		{"lockmw:", "\xff\xfe", `\x373a6c6f636b6d773afffe`},
		{"p\x00", "k", `\x323a70006b`},
	} {
		if got := name(store.Key{Prefix: c.prefix, Name: c.key}); got != c.want {
			t.Errorf("name(%q, %q) = %q, want %q", c.prefix, c.key, got, c.want)
		}
	}

	ctx, pool, s := startStore(t)
	k := store.Key{Prefix: "lockmw:", Name: "nul\x00\xff"}
	if r, err := s.Acquire(ctx, k, "t1", time.Minute, true); err != nil || !r.Acquired {
		t.Fatalf("acquire %q: %+v, %v", k.Name, r, err)
	}
	var stored []byte
	if err := pool.QueryRow(ctx, "SELECT name::bytea FROM lockmw_locks WHERE token = 't1'").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if want := []byte("7:lockmw:nul\x00\xff"); !bytes.Equal(stored, want) {
		t.Errorf("the row's name read as bytea is %q, want %q", stored, want)
	}
	if o, err := s.Release(ctx, k, "t1"); err != nil || o != store.Owned {
		t.Fatalf("release %q: %v, %v", k.Name, o, err)
	}
	// The longest hex name (the longest prefix and key, neither text)
	// fits the primary key's index.
	long := store.Key{Prefix: strings.Repeat("\xff", lockmw.MaxPrefixLen), Name: strings.Repeat("\x00", lockmw.MaxKeyLen)}
	if r, err := s.Acquire(ctx, long, "t2", time.Minute, true); err != nil || !r.Acquired {
		t.Fatalf("acquire the longest key under the longest prefix: %+v, %v", r, err)
	}
	if r, err := s.Enqueue(ctx, long, "t3", time.Minute, false); err != nil || r.Acquired {
		t.Fatalf("queue for the longest key: %+v, %v; want queued", r, err)
	}
	if err := s.Leave(ctx, long, "t3"); err != nil {
		t.Fatalf("leave the queue of the longest key: %v", err)
	}
	if o, err := s.Release(ctx, long, "t2"); err != nil || o != store.Owned {
		t.Fatalf("release the longest key: %v, %v", o, err)
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM lockmw_locks) + (SELECT count(*) FROM lockmw_locks_queue)").Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d rows left, %v; want none", rows, err)
	}
}

// cronlock's fire claims of a job (or prefix) with NUL or bytes that are
// not UTF-8 work as any job's: one claim of a fire wins, the second is
// refused naming the first, the run is recorded; each pair has a row of
// its own, and a pair text holds keeps the row older releases wrote.
func TestClaimsOfNamesTextCannotHold(t *testing.T) {
	ctx, pool, s := startStore(t)
	at := time.UnixMilli(1_700_000_000_000)
	pairs := []struct{ prefix, job string }{
		{"p:", "job"}, {"p:", "nul\x00job"}, {"p:", "\xff\xfe"}, {"p\x00:", "job"}, {"p:", "\x00"},
		{"p:\xc3", "\xa9"}, {"p:", "é"}, // halves that are not UTF-8, joined as the text of the other pair
	}
	for _, c := range pairs {
		claims := s.FireClaims(c.prefix, 10*time.Second, time.Hour)
		if got, err := claims.Claim(ctx, c.job, at, "host-a"); err != nil || !got.Won {
			t.Fatalf("claim of %q, %q: %+v, %v; want won", c.prefix, c.job, got, err)
		}
		if got, err := claims.Claim(ctx, c.job, at, "host-b"); err != nil || got.Won || got.By != "host-a" {
			t.Fatalf("second claim of %q, %q: %+v, %v; want refused, claimed by host-a", c.prefix, c.job, got, err)
		}
		if err := claims.Running(ctx, c.job, at, "host-a"); err != nil {
			t.Fatalf("running %q, %q: %v", c.prefix, c.job, err)
		}
		if fire, by, err := claims.Runner(ctx, c.job); err != nil || !fire.Equal(at) || by != "host-a" {
			t.Fatalf("runner of %q, %q: %v, %q, %v; want %v, host-a", c.prefix, c.job, fire, by, err, at)
		}
	}
	var rows, plain int
	if err := pool.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE prefix = 'p:' AND job = 'job') FROM lockmw_locks_claims").Scan(&rows, &plain); err != nil {
		t.Fatal(err)
	}
	if rows != len(pairs) || plain != 1 {
		t.Errorf("%d claim rows, %d of them (p:, job); want %d and 1", rows, plain, len(pairs))
	}
}
