// Package pgtest starts a real PostgreSQL server for a test, the way the
// end-to-end tests start the kube-apiserver: Debian's postgresql binaries
// (make test installs the package when they are missing), initdb into a
// fresh directory, a Unix socket in it and a random loopback port, torn
// down when the test ends. As root (CI), the server runs as the postgres
// user, since PostgreSQL refuses to run as root.
package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/callerauth/callerauth/internal/kit/loopback"
	"github.com/callerauth/callerauth/internal/kit/proc"
)

// Server is a running PostgreSQL.
type Server struct {
	Dir  string // data directory; the Unix socket is here too
	Port int
	User string
	proc *proc.Process
	seq  atomic.Int64
}

// BinDir finds PostgreSQL's server binaries: $CALLERAUTH_PG_BIN, else the
// newest /usr/lib/postgresql/<version>/bin (Debian's layout).
func BinDir() (string, error) {
	if d := os.Getenv("CALLERAUTH_PG_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return va - vb
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	return "", fmt.Errorf("pgtest: no PostgreSQL server binaries (initdb) under /usr/lib/postgresql/*/bin and CALLERAUTH_PG_BIN unset: run the tests through make test, which installs Debian's postgresql package, or apt-get install postgresql")
}

// Start starts a server for t and stops it when t ends. It fails t when
// PostgreSQL is not installed: the PostgreSQL tests are never skipped.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s := &Server{Dir: dir, User: "postgres"}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("pgtest: running as root, and no postgres user to run the server as: %v", err)
		}
		uid, uerr := strconv.ParseUint(u.Uid, 10, 32)
		gid, gerr := strconv.ParseUint(u.Gid, 10, 32)
		if uerr != nil || gerr != nil {
			t.Fatalf("pgtest: the postgres user's ids %q/%q", u.Uid, u.Gid)
		}
		if err := os.Chown(dir, int(uid), int(gid)); err != nil {
			t.Fatal(err)
		}
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	run := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(bin, name), args...) //nolint:gosec // PostgreSQL's own binaries, with the test's arguments.
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "LC_ALL=C")
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		return cmd
	}
	data := filepath.Join(dir, "data")
	if out, err := run("initdb", "-D", data, "-U", s.User, "--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	ports, err := loopback.Ports(1)
	if err != nil {
		t.Fatal(err)
	}
	s.Port = ports[0]
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	// Durability is not under test here: fsync off keeps the runs short.
	s.proc, err = proc.Start(proc.Spec{Bin: filepath.Join(bin, "postgres"), Dir: dir, Env: []string{"LC_ALL=C"}, Credential: cred, Output: logf,
		StopSignal: syscall.SIGINT, StopTimeout: 30 * time.Second, // SIGINT: PostgreSQL's fast shutdown
		Args: []string{"-D", data, "-p", strconv.Itoa(s.Port), "-k", dir, "-c", "listen_addresses=127.0.0.1",
			"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=200"}})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		_ = s.proc.Stop()
		_ = logf.Close()
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		db, err := sql.Open("pgx", s.URL("postgres"))
		if err == nil {
			err = db.PingContext(context.Background())
			_ = db.Close()
		}
		if err == nil {
			return s
		}
		select {
		case <-s.proc.Done():
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			t.Fatalf("pgtest: postgres exited: %v\n%s", s.proc.Err(), log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			t.Fatalf("pgtest: postgres did not answer in 60s: %v\n%s", err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// URL is a connection URL for database db over the Unix socket.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres:///%s?host=%s&port=%d&user=%s&sslmode=disable", db, s.Dir, s.Port, s.User)
}

// TCPURL is a connection URL for database db over loopback TCP.
func (s *Server) TCPURL(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", s.User, s.Port, db)
}

// NewDatabase creates an empty database and returns its (Unix socket) URL.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d", s.seq.Add(1))
	db, err := sql.Open("pgx", s.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	return s.URL(name)
}
