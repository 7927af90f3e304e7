package datastore_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/callerauth/callerauth/internal/foundation/datastore"
	"github.com/callerauth/callerauth/internal/kit/pgtest"
)

var migrations = os.DirFS("testdata/migrations")

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		target  string
		dialect datastore.Dialect
		dsn     string
		err     string
	}{
		{target: "/var/lib/x.db", dialect: datastore.SQLite, dsn: "/var/lib/x.db"},
		{target: "x.db", dialect: datastore.SQLite, dsn: "x.db"},
		{target: "sqlite:///var/lib/x.db", dialect: datastore.SQLite, dsn: "/var/lib/x.db"},
		{target: "sqlite://host/x.db", err: "three slashes"},
		{target: "mysql://h/db", err: "unknown scheme"},
		{target: "", err: "no datastore"},
		{target: "postgres:///db?host=/run/postgresql", dialect: datastore.Postgres},
		{target: "postgres://u@127.0.0.1:5432/db?sslmode=disable", dialect: datastore.Postgres},
		{target: "postgres://u@localhost/db", dialect: datastore.Postgres},
		{target: "postgresql://u@db.example:5432/db?sslmode=verify-full", dialect: datastore.Postgres},
		{target: "postgres://u@db.example:5432/db?sslmode=require", dialect: datastore.Postgres},
		// Plaintext, or TLS that may fall back to it, to a remote host.
		{target: "postgres://u@db.example:5432/db", err: "plaintext"},
		{target: "postgres://u@db.example:5432/db?sslmode=prefer", err: "plaintext"},
		{target: "postgres://u:hunter2@db.example/db?sslmode=disable", err: "plaintext"},
	} {
		d, dsn, err := datastore.Parse(tt.target)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: err %v, want %q", tt.target, err, tt.err)
			}
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Errorf("%q: the error shows the password: %v", tt.target, err)
			}
			continue
		}
		if err != nil || d != tt.dialect || (tt.dsn != "" && dsn != tt.dsn) {
			t.Errorf("%q: %q %q %v; want %q %q", tt.target, d, dsn, err, tt.dialect, tt.dsn)
		}
	}
	if got := datastore.Redact("postgres://u:hunter2@h/db?password=x&sslmode=require"); strings.Contains(got, "hunter2") || strings.Contains(got, "password=x") {
		t.Errorf("Redact: %s", got)
	}
}

func TestRebind(t *testing.T) {
	pg := &datastore.DB{Dialect: datastore.Postgres}
	if got := pg.Rebind("SELECT a FROM t WHERE b = ? AND c IN (?, ?)"); got != "SELECT a FROM t WHERE b = $1 AND c IN ($2, $3)" {
		t.Errorf("postgres: %s", got)
	}
	lite := &datastore.DB{Dialect: datastore.SQLite}
	if got := lite.Rebind("b = ?"); got != "b = ?" {
		t.Errorf("sqlite: %s", got)
	}
}

// TestBothDialects opens, migrates and reopens a datastore of each
// dialect: the migrations apply once, and a database a newer binary wrote
// is refused.
func TestBothDialects(t *testing.T) {
	pg := pgtest.Start(t)
	for _, target := range []string{filepath.Join(t.TempDir(), "x.db"), pg.NewDatabase(t)} {
		ctx := context.Background()
		db, err := datastore.Open(ctx, "test-svc", target, migrations, datastore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, db.Rebind(`INSERT INTO items (name, note) VALUES (?, ?)`), "a", "b"); err != nil {
			t.Fatalf("%s: %v", db.Dialect, err)
		}
		_ = db.Close()
		// Again: nothing to apply, the row is there.
		db, err = datastore.Open(ctx, "test-svc", target, migrations, datastore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM items`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%s: %d items, %v", db.Dialect, n, err)
		}
		_ = db.Close()
		// A binary that knows only version 1 refuses the database.
		older := fstest.MapFS{
			"sqlite/00001_items.sql":   {Data: mustRead(t, "testdata/migrations/sqlite/00001_items.sql")},
			"postgres/00001_items.sql": {Data: mustRead(t, "testdata/migrations/postgres/00001_items.sql")},
		}
		if _, err := datastore.Open(ctx, "test-svc", target, older, datastore.Options{}); err == nil || !strings.Contains(err.Error(), "newer than this binary knows") {
			t.Fatalf("older binary: %v", err)
		}
	}
}

// TestReplicasMigrateTogether starts five replicas on one new PostgreSQL
// database at once; the advisory lock makes one apply each migration and
// the others wait: every Open succeeds, each version is recorded once.
func TestReplicasMigrateTogether(t *testing.T) {
	pg := pgtest.Start(t)
	url := pg.NewDatabase(t)
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for range 5 {
		wg.Go(func() {
			db, err := datastore.Open(context.Background(), "test-svc", url, migrations, datastore.Options{})
			if err == nil {
				_ = db.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows, distinct int
	if err := db.QueryRow(`SELECT COUNT(*), COUNT(DISTINCT version_id) FROM test_svc_schema_version WHERE version_id > 0`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != 2 || distinct != 2 {
		t.Fatalf("%d version rows (%d distinct), want 2", rows, distinct)
	}
}

// TestAdoptsTheLegacyVersionTable opens an SQLite datastore written by a
// release before goose (its own schema_migrations table at version 1):
// version 1 is not applied again, version 2 is.
func TestAdoptsTheLegacyVersionTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	old, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`,
		`INSERT INTO schema_migrations VALUES (1, 0)`,
		`CREATE TABLE items (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL)`,
		`INSERT INTO items (name) VALUES ('kept')`,
	} {
		if _, err := old.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	_ = old.Close()
	db, err := datastore.Open(context.Background(), "test-svc", path, migrations, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var name, note string
	if err := db.QueryRow(`SELECT name, note FROM items`).Scan(&name, &note); err != nil || name != "kept" {
		t.Fatalf("%q %q %v", name, note, err)
	}
}

func mustRead(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestURLFile: the URL read from a mounted Secret's file, one line, checked
// like the flag; an error never shows the file's content.
func TestURLFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "uri")
	if err := os.WriteFile(good, []byte("postgres://app:hunter2@127.0.0.1:5432/app?sslmode=disable\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := datastore.Resolve("/ignored.db", good); err != nil || got != "postgres://app:hunter2@127.0.0.1:5432/app?sslmode=disable" {
		t.Fatalf("%q %v", got, err)
	}
	if got, err := datastore.Resolve("/var/lib/x.db", ""); err != nil || got != "/var/lib/x.db" {
		t.Fatalf("no file: %q %v", got, err)
	}
	for name, content := range map[string]string{"empty": "\n", "two lines": "postgres://a@127.0.0.1/x\npostgres://b@127.0.0.1/y\n", "plaintext": "postgres://app:hunter2@db.example/app\n"} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		_ = os.WriteFile(p, []byte(content), 0o600)
		_, err := datastore.Resolve("", p)
		if err == nil || !strings.Contains(err.Error(), "--datastore-url-file") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := datastore.Resolve("", filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file was accepted")
	}
	if _, err := datastore.Resolve("", good); err != nil {
		t.Errorf("an empty --datastore with a file: %v", err)
	}
	if _, err := datastore.Resolve("mysql://x", ""); err == nil || !strings.Contains(err.Error(), "--datastore: ") {
		t.Errorf("another scheme: %v", err)
	}
}

// TestMissingDirectoryIsNamed: an SQLite file in a directory that does not
// exist is refused naming the directory (SQLite's own word is "unable to
// open database file (14)").
func TestMissingDirectoryIsNamed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not-there")
	_, err := datastore.Open(context.Background(), "test-svc", filepath.Join(dir, "x.db"), migrations, datastore.Options{})
	if err == nil || !strings.Contains(err.Error(), "the directory "+dir+" does not exist") {
		t.Fatalf("err = %v", err)
	}
}

// TestSQLiteFilesAreTheOwnersAlone: a SQLite datastore's file, its -wal
// and -shm are created 0600 and its directory made 0700 whatever the
// umask; files an earlier version left 0644 are tightened at open.
func TestSQLiteFilesAreTheOwnersAlone(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "events.db")
	for round := range 2 {
		db, err := datastore.Open(context.Background(), "test-svc", path, migrations, datastore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS t (x INTEGER)`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`INSERT INTO t VALUES (1)`); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{path, path + "-wal", path + "-shm"} {
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if m := st.Mode().Perm(); m != 0o600 {
				t.Errorf("round %d: %s is %v; want 0600", round, filepath.Base(p), m)
			}
		}
		if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
			t.Errorf("round %d: the directory is %v; want 0700", round, st.Mode().Perm())
		}
		// Open to others again, as an older version left them.
		for _, p := range []string{path, path + "-wal", path + "-shm", dir} {
			_ = os.Chmod(p, 0o755)
		}
		_ = db.Close()
	}
}

// TestSQLitePageSize: a new SQLite file takes the page size asked for;
// one that exists keeps its own; a size SQLite has not is refused,
// named.
func TestSQLitePageSize(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "log.db")
	pageSize := func(o datastore.Options) int {
		t.Helper()
		db, err := datastore.Open(ctx, "test-svc", path, migrations, o)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = db.Close() }()
		var n int
		if err := db.QueryRowContext(ctx, "PRAGMA page_size").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := pageSize(datastore.Options{SQLitePageSize: 16384}); n != 16384 {
		t.Fatalf("a new file has pages of %d bytes, want 16384", n)
	}
	if n := pageSize(datastore.Options{SQLitePageSize: 8192}); n != 16384 {
		t.Fatalf("the file was made again with pages of %d bytes; want it to keep 16384", n)
	}
	for _, bad := range []int{256, 3000, 131072, -1} {
		_, err := datastore.Open(ctx, "test-svc", filepath.Join(t.TempDir(), "x.db"), migrations, datastore.Options{SQLitePageSize: bad})
		if err == nil || !strings.Contains(err.Error(), "page size of") {
			t.Errorf("page size %d: %v; want a refusal naming it", bad, err)
		}
	}
}
