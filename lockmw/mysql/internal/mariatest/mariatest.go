// Package mariatest starts real MariaDB servers for tests, on the process
// supervisor of internal/testkit/servertest: each Start makes a data directory
// under t.TempDir() with mariadb-install-db and runs mariadbd in the
// foreground on a free 127.0.0.1 port, as root (--user=root), with root
// reachable over TCP without a password and a database named Database.
// The server runs with innodb_flush_log_at_trx_commit=2 (a commit is
// written to the OS at once, flushed each second: a killed server loses
// nothing, a crashed machine up to a second), small buffers, and no binary
// log. Faults: Pause (SIGSTOP, returning once every thread has stopped),
// Resume, Kill (SIGKILL), Restart (crash recovery on the same data),
// KillConnections (KILL CONNECTION, as an administrator or a failover
// proxy would), SetReadOnly (read_only, as on a replica), and a TCP proxy
// (StartProxy) that cuts one client's link.
//
// MariaDB comes from the Debian package mariadb-server (apt-get install
// mariadb-server; make test installs it); LOCKMW_MARIADBD names another
// mariadbd, whose directory must also hold mariadb-install-db or
// LOCKMW_MARIADB_INSTALL_DB name it.
package mariatest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/lockmw/lockmw/internal/testkit/servertest"
)

// Database is the database every server has, where tests keep their tables.
const Database = "lockmw"

const installHint = "install MariaDB with `apt-get install mariadb-server` (or run `make test`, which installs it), " +
	"or set LOCKMW_MARIADBD to a mariadbd"

var (
	serverBinary = servertest.Binary{
		Name: "mariadbd", Env: "LOCKMW_MARIADBD", Hint: installHint,
		Find: func() (string, error) {
			// Debian puts mariadbd in /usr/sbin, which a user's PATH may
			// lack.
			if p, err := exec.LookPath("mariadbd"); err == nil {
				return p, nil
			}
			for _, p := range []string{"/usr/sbin/mariadbd", "/usr/sbin/mysqld"} {
				if _, err := os.Stat(p); err == nil {
					return p, nil
				}
			}
			return "", errors.New("mariadbd not found on PATH or in /usr/sbin: " + installHint)
		},
	}
	installBinary = servertest.Binary{
		Name: "mariadb-install-db", Env: "LOCKMW_MARIADB_INSTALL_DB", Hint: installHint,
	}
)

// Server is one MariaDB server. Pause, Resume, Kill (a crash) and Restart
// are servertest's Controls: Restart starts it again on the same data and
// port (InnoDB recovers its log) and returns once it serves.
type Server struct {
	servertest.Controls
	proc *servertest.Process
	dir  string // the data directory
	sock string // the Unix socket (a short path: sun_path is 108 bytes)
	port int
}

// Start starts a MariaDB server, stopped at t's cleanup. It fails the test
// when mariadbd is missing, saying how to install it.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := serverBinary.Path()
	if err != nil {
		t.Fatalf("mariatest: %v", err)
	}
	install, err := installBinary.Path()
	if err != nil {
		// Next to mariadbd, for a LOCKMW_MARIADBD outside PATH.
		alt := filepath.Join(filepath.Dir(bin), "mariadb-install-db")
		if _, serr := os.Stat(alt); serr != nil {
			t.Fatalf("mariatest: %v", err)
		}
		install = alt
	}
	s := &Server{dir: filepath.Join(t.TempDir(), "data")}
	sockDir, err := os.MkdirTemp("", "mariatest")
	if err != nil {
		t.Fatalf("mariatest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	s.sock = filepath.Join(sockDir, "sock")
	tmp := filepath.Join(sockDir, "tmp") // the server's own: bootstraps run in parallel
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatalf("mariatest: %v", err)
	}
	if err := installDB(install, s.dir, tmp); err != nil {
		t.Fatalf("mariatest: %v", err)
	}
	s.proc = servertest.New(servertest.Config{
		Name:  "mariadbd",
		Ports: func() []int { return []int{s.port} },
		Command: func() (servertest.Command, error) {
			if s.port == 0 {
				p, err := servertest.FreePort()
				if err != nil {
					return servertest.Command{}, err
				}
				s.port = p
			}
			return servertest.Command{Path: bin, Args: []string{
				"--no-defaults",
				"--datadir=" + s.dir,
				"--user=root",
				"--port=" + strconv.Itoa(s.port),
				"--bind-address=127.0.0.1",
				"--socket=" + s.sock,
				"--pid-file=" + filepath.Join(s.dir, "mariadbd.pid"),
				"--skip-name-resolve",
				"--innodb-flush-log-at-trx-commit=2",
				"--innodb-buffer-pool-size=32M",
				"--innodb-log-file-size=16M",
				"--performance-schema=OFF",
				"--max-connections=1000",
				"--skip-log-bin",
				"--tmpdir=" + tmp,
			}}, nil
		},
		Ready: func(ctx context.Context, r *servertest.Run) error {
			return servertest.Poll(ctx, 20*time.Millisecond, func(ctx context.Context) error {
				if r.Exited() {
					return fmt.Errorf("exited: %v", r.Err())
				}
				return s.ping(ctx)
			})
		},
		ReadyTimeout: 60 * time.Second,
	})
	s.Controls = servertest.NewControls("mariatest", s.proc, nil)
	t.Cleanup(func() {
		if err := s.proc.Stop(); err != nil {
			t.Errorf("mariatest: %v\n%s", err, s.proc.Tail())
		}
	})
	if _, err := s.proc.Start(); err != nil {
		t.Fatalf("mariatest: %v\n%s", err, s.proc.Tail())
	}
	return s
}

// installMu serializes the bootstraps of one test process, which starts
// many servers at once: each is a short burst of work.
var installMu sync.Mutex

// installDB makes a data directory in dir, trying up to three times (a
// bootstrap run beside many others has failed on its temporary tables).
func installDB(install, dir, tmp string) error {
	installMu.Lock()
	defer installMu.Unlock()
	var err error
	for range 3 {
		_ = os.RemoveAll(dir)
		var out []byte
		out, err = exec.Command(install, "--no-defaults", "--datadir="+dir, "--user=root",
			"--auth-root-authentication-method=normal", "--skip-test-db",
			"--skip-name-resolve", "--tmpdir="+tmp).CombinedOutput()
		if err == nil {
			return nil
		}
		err = fmt.Errorf("%s: %w\n%s", install, err, out)
	}
	return err
}

// ping connects as root and makes sure Database exists.
func (s *Server) ping(ctx context.Context) error {
	cfg := s.config()
	cfg.DBName = ""
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(c)
	defer db.Close()
	_, err = db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+Database)
	return err
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// config is a client configuration for root on Database.
func (s *Server) config() *mysql.Config {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = s.Addr()
	cfg.DBName = Database
	cfg.Timeout = 5 * time.Second
	return cfg
}

// DSN is a data source name for root on Database through addr (the
// server's own when ""; a proxy's otherwise), with params (such as
// "interpolateParams=true") added.
func (s *Server) DSN(addr string, params ...string) string {
	cfg := s.config()
	if addr != "" {
		cfg.Addr = addr
	}
	dsn := cfg.FormatDSN()
	for _, p := range params {
		if strings.Contains(dsn, "?") {
			dsn += "&" + p
		} else {
			dsn += "?" + p
		}
	}
	return dsn
}

// DB opens a pool on DSN(addr, params...), closed at t's cleanup.
func (s *Server) DB(t testing.TB, addr string, params ...string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", s.DSN(addr, params...))
	if err != nil {
		t.Fatalf("mariatest: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// Exec runs query as root on Database, failing the test on error.
func (s *Server) Exec(t testing.TB, query string, args ...any) {
	t.Helper()
	if err := s.exec(query, args...); err != nil {
		t.Fatalf("mariatest: %s: %v", query, err)
	}
}

func (s *Server) exec(query string, args ...any) error {
	c, err := mysql.NewConnector(s.config())
	if err != nil {
		return err
	}
	db := sql.OpenDB(c)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = db.ExecContext(ctx, query, args...)
	return err
}

// KillConnections kills (KILL CONNECTION) every client connection but the
// one it runs on, and returns how many it killed: what an administrator,
// a proxy failing over or a server restart does to a pool's connections.
// It returns after a failure it reports, for a t whose Fatalf does not
// end the goroutine (the chaos checker's fault goroutines).
func (s *Server) KillConnections(t testing.TB) int {
	t.Helper()
	c, err := mysql.NewConnector(s.config())
	if err != nil {
		t.Fatalf("mariatest: %v", err)
		return 0
	}
	db := sql.OpenDB(c)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatalf("mariatest: %v", err)
		return 0
	}
	defer conn.Close()
	rows, err := conn.QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND COMMAND <> 'Daemon' AND USER <> 'system user'")
	if err != nil {
		t.Fatalf("mariatest: listing connections: %v", err)
		return 0
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatalf("mariatest: %v", err)
			break
		}
		ids = append(ids, id)
	}
	_ = rows.Close()
	n := 0
	for _, id := range ids {
		if _, err := conn.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(id, 10)); err == nil {
			n++
		}
	}
	return n
}

// KillConnection kills (KILL CONNECTION) the connection with id, as
// CONNECTION_ID() tells it.
func (s *Server) KillConnection(t testing.TB, id int64) {
	t.Helper()
	s.Exec(t, "KILL CONNECTION "+strconv.FormatInt(id, 10))
}

// SetReadOnly sets the server's global read_only, as on a replica or a
// demoted primary: writes of users without READ_ONLY ADMIN fail. root has
// that privilege, so tests that want the refusal connect as a user made by
// User.
func (s *Server) SetReadOnly(t testing.TB, on bool) {
	t.Helper()
	v := "0"
	if on {
		v = "1"
	}
	s.Exec(t, "SET GLOBAL read_only = "+v)
}

// User creates a user name (no password) with every privilege on Database
// but none of the administrator's (so read_only binds it), and returns a
// DSN for it through the server's own address with params added.
func (s *Server) User(t testing.TB, name string, params ...string) string {
	t.Helper()
	s.Exec(t, "CREATE USER IF NOT EXISTS '"+name+"'@'%'")
	s.Exec(t, "GRANT ALL PRIVILEGES ON "+Database+".* TO '"+name+"'@'%'")
	cfg := s.config()
	cfg.User = name
	dsn := cfg.FormatDSN()
	for _, p := range params {
		if strings.Contains(dsn, "?") {
			dsn += "&" + p
		} else {
			dsn += "?" + p
		}
	}
	return dsn
}

// Proxy is a TCP proxy in front of a server: servertest's toxiproxy.
type Proxy = servertest.Proxy

// StartProxy starts a TCP proxy to s, stopped at t's cleanup: clients
// dialing its Addr reach s until Cut.
func (s *Server) StartProxy(t testing.TB) *Proxy {
	t.Helper()
	return servertest.StartProxy(t, s.Addr())
}
