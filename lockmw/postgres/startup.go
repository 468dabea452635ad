package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file is New's one look at the server: a reachable server without
// the tables fails New (ErrNoTable), an unreachable one is logged once, at
// Warn, with its address and the cause, and the Locker is made all the
// same (a service often starts before its database).

// startupWait bounds New's look at the server.
const startupWait = 10 * time.Second

// UseLogger takes the Locker's logger (store.Logging).
func (s *pgStore) UseLogger(logger *slog.Logger) { s.logger = logger }

// checkStart asks the server whether the Schema's tables and sequence
// exist, with the columns this Locker writes (the queue's handover; the
// lease table's holder columns, when it was given lockmw.WithHolderInfo).
// It returns ErrNoTable, naming what is missing, when the server says so;
// when the server cannot be asked, it logs that once and
// returns nil.
func (s *pgStore) checkStart() error {
	ctx, cancel := context.WithTimeout(context.Background(), startupWait)
	defer cancel()
	// A connection of its own, as the listener's: a pool whose connections
	// are all in use does not hold New up, nor is it taken for an outage.
	c, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		s.warnUnreachable(classify(err))
		return nil
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.Close(cctx)
	}()
	objs := []string{s.n.table, s.n.queue, s.n.claims, s.n.seq}
	var absent [4]bool
	var migrated, inspectable bool
	err = c.QueryRow(ctx, `SELECT to_regclass($1) IS NULL, to_regclass($2) IS NULL, to_regclass($3) IS NULL, to_regclass($4) IS NULL,
	EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($2) AND attname = 'handover' AND NOT attisdropped),
	EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'holder_info' AND NOT attisdropped)
		AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($2) AND attname = 'holder_info' AND NOT attisdropped)`,
		objs[0], objs[1], objs[2], objs[3]).Scan(&absent[0], &absent[1], &absent[2], &absent[3], &migrated, &inspectable)
	if err != nil {
		s.warnUnreachable(classify(err))
		return nil
	}
	var missing []string
	for i, a := range absent {
		if a {
			missing = append(missing, objs[i])
		}
	}
	how := ""
	if s.n.channel != DefaultTable {
		how = fmt.Sprintf(" (for this Schema: postgres.Schema{Table: %q}.CreateTable(ctx, pool), or its SQL())", s.n.channel)
	}
	if len(missing) == 0 && !absent[1] && !migrated {
		// A queue table of a release before hand-overs: this Locker's
		// statements need its handover column.
		return fmt.Errorf("%w%s: %s in database %q at %s %s", ErrNoTable, how, s.n.queue, s.pool.Config().ConnConfig.Database, s.address(), migrateHint)
	}
	if len(missing) == 0 && s.holderInfo != "" && !inspectable {
		// A lease table of a release before Inspect: a Locker given
		// WithHolderInfo writes the holder columns (a Locker without it
		// works on it as it is).
		return fmt.Errorf("%w%s: lockmw.WithHolderInfo needs the holder columns: %s in database %q at %s %s", ErrNoTable, how, s.n.table, s.pool.Config().ConnConfig.Database, s.address(), inspectHint)
	}
	if len(missing) == 0 {
		s.handsInfo = inspectable
		return nil
	}
	return fmt.Errorf("%w%s: missing in database %q at %s: %s", ErrNoTable, how, s.pool.Config().ConnConfig.Database, s.address(), strings.Join(missing, ", "))
}

// warnUnreachable logs, once, that New could not reach the server.
func (s *pgStore) warnUnreachable(err error) {
	if s.logger == nil {
		return
	}
	s.logger.Warn("lockmw: PostgreSQL cannot be reached; the Locker is made all the same, and its requests fail with ErrUnavailable until PostgreSQL answers",
		slog.String("address", s.address()), slog.Duration("waited", startupWait), slog.Any("error", err))
}

// address names the servers the pool connects to, as host:port.
func (s *pgStore) address() string {
	cc := s.pool.Config().ConnConfig
	addrs := []string{hostPort(cc.Host, cc.Port)}
	for _, f := range cc.Fallbacks {
		if a := hostPort(f.Host, f.Port); a != addrs[len(addrs)-1] {
			addrs = append(addrs, a)
		}
	}
	return strings.Join(addrs, ",")
}

func hostPort(host string, port uint16) string {
	if strings.HasPrefix(host, "/") {
		return host // a Unix socket's directory
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}
