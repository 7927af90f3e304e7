// Package datastore opens the SQL datastore of a callerauth service: the
// embedded SQLite file (the default: one process, nothing to run beside
// it) or PostgreSQL (several replicas on one database), chosen by the
// datastore flag's value:
//
//	/var/lib/svc/db.sqlite          a path: SQLite
//	sqlite:///var/lib/svc/db.sqlite the same, as a URL
//	postgres://user@host:5432/db?sslmode=verify-full
//	postgresql://…                  PostgreSQL, a libpq connection URL
//
// Each service brings one set of migrations per dialect (goose SQL files
// under sqlite/ and postgres/ in an fs.FS). They are applied at start-up,
// under a PostgreSQL advisory lock so that replicas starting together do
// not race; a database written by a newer binary (a version this one does
// not know) is refused. A password belongs in PGPASSWORD or a PGPASSFILE
// (from a Secret), not in the URL, which shows in the process's arguments;
// a TCP connection to anything but loopback must be TLS that cannot
// silently fall back to plaintext (sslmode=require, verify-ca or
// verify-full).
package datastore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"
	_ "modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"

	"github.com/callerauth/callerauth/reason"
)

// ReasonUnavailable is the refusal of a request the datastore could not
// serve (a database that does not answer, a failed commit): nothing of it
// was stored; retry.
var ReasonUnavailable = reason.New("datastore_unavailable", reason.Unavailable, "the datastore is unavailable; retry")

// Dialect is the SQL a datastore speaks.
type Dialect string

// SystemName is the dialect as OpenTelemetry's database conventions name
// it (db.system.name).
func (d Dialect) SystemName() string {
	if d == Postgres {
		return "postgresql"
	}
	return string(d)
}

// The dialects.
const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
)

// DB is an open datastore.
type DB struct {
	*sql.DB
	Dialect Dialect
	// Target is the datastore as configured, with any password removed:
	// safe to log.
	Target string
}

// Options tune Open.
type Options struct {
	// MaxOpenConns bounds PostgreSQL connections per process. Default 10.
	// SQLite always has one (one writer).
	MaxOpenConns int
	// LockTimeout is how long a replica waits for another's migrations.
	// Default 5 minutes.
	LockTimeout time.Duration
	// Logger receives one line per migration applied; nil: none.
	Logger *slog.Logger
	// SQLitePageSize is the page size an SQLite file is created with (a
	// power of two, 512 to 65536; a file that exists keeps its own).
	// 0: SQLite's default, 4096. A store of rows of kilobytes (a decision
	// log's entries) writes fewer, fuller pages with larger ones.
	SQLitePageSize int
}

// Parse says which dialect target names and returns what the driver
// opens: a file path for SQLite, the URL for PostgreSQL. It refuses a
// PostgreSQL URL that would send credentials over plaintext TCP.
func Parse(target string) (Dialect, string, error) {
	switch {
	case target == "":
		return "", "", errors.New("no datastore: want a file path, sqlite:///path or postgres://…")
	case strings.HasPrefix(target, "postgres://"), strings.HasPrefix(target, "postgresql://"):
		if err := checkPostgres(target); err != nil {
			return "", "", err
		}
		return Postgres, target, nil
	case strings.HasPrefix(target, "sqlite://"):
		u, err := url.Parse(target)
		if err != nil || u.Host != "" || u.Path == "" {
			return "", "", fmt.Errorf("%s: want sqlite:///absolute/path (three slashes, no host)", target)
		}
		return SQLite, u.Path, nil
	case strings.Contains(target, "://"):
		return "", "", fmt.Errorf("%s: unknown scheme: want a file path, sqlite:///path or postgres://…", Redact(target))
	default:
		return SQLite, target, nil
	}
}

// checkPostgres parses the URL as pgx will and refuses plaintext TCP to a
// host that is not loopback.
func checkPostgres(target string) error {
	cfg, err := pgx.ParseConfig(target)
	if err != nil {
		return fmt.Errorf("%s: %w", Redact(target), err)
	}
	hosts := []string{cfg.Host}
	for _, fb := range cfg.Fallbacks {
		hosts = append(hosts, fb.Host)
	}
	u, _ := url.Parse(target)
	mode := ""
	if u != nil {
		mode = u.Query().Get("sslmode")
	}
	secure := mode == "require" || mode == "verify-ca" || mode == "verify-full"
	for _, h := range hosts {
		if strings.HasPrefix(h, "/") || secure {
			continue // a Unix socket, or TLS that cannot fall back
		}
		if ip := net.ParseIP(h); (ip != nil && ip.IsLoopback()) || h == "localhost" {
			continue
		}
		return fmt.Errorf("%s: host %s over TCP without TLS that is required (sslmode %q): credentials would travel in plaintext; set sslmode=verify-full (with sslrootcert) or require", Redact(target), h, mode)
	}
	return nil
}

// Redact returns target with any password replaced.
func Redact(target string) string {
	u, err := url.Parse(target)
	if err != nil || u.User == nil {
		if err != nil && strings.Contains(target, "@") {
			return "(an unparsable URL)"
		}
		return target
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "redacted")
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "redacted")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// Open opens the datastore target names and applies the migrations under
// migrations/<dialect>/ that it lacks. Name labels errors and the
// migrations' version table ("connector" → connector_schema_version).
func Open(ctx context.Context, name, target string, migrations fs.FS, o Options) (*DB, error) {
	dialect, dsn, err := Parse(target)
	if err != nil {
		return nil, fmt.Errorf("%s: datastore %w", name, err)
	}
	var db *sql.DB
	switch dialect {
	case SQLite:
		// SQLite says "unable to open database file (14)" of a missing
		// directory: say which.
		if dir := filepath.Dir(dsn); dir != "" {
			if st, serr := os.Stat(dir); serr != nil || !st.IsDir() {
				return nil, fmt.Errorf("%s: datastore %s: the directory %s does not exist (or is not a directory): create it, or give a path in one that does", name, dsn, dir)
			}
		}
		if err := restrict(dsn); err != nil {
			return nil, fmt.Errorf("%s: datastore %s: %w", name, dsn, err)
		}
		if err := createWithPageSize(dsn, o.SQLitePageSize); err != nil {
			return nil, fmt.Errorf("%s: datastore %s: %w", name, dsn, err)
		}
		// WAL keeps readers off the writer's back; synchronous=FULL makes
		// every committed transaction durable before it returns.
		db, err = sql.Open("sqlite", "file:"+dsn+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(5000)&_pragma=foreign_keys(ON)")
		if err == nil {
			db.SetMaxOpenConns(1) // one writer; SQLite serialises writes anyway
		}
	case Postgres:
		var cfg *pgx.ConnConfig
		if cfg, err = pgx.ParseConfig(dsn); err == nil {
			db = stdlib.OpenDB(*cfg)
			n := o.MaxOpenConns
			if n <= 0 {
				n = 10
			}
			db.SetMaxOpenConns(n)
			db.SetMaxIdleConns(n)
			db.SetConnMaxIdleTime(5 * time.Minute)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: datastore %s: %w", name, Redact(target), err)
	}
	d := &DB{DB: db, Dialect: dialect, Target: Redact(target)}
	if err := d.migrate(ctx, name, migrations, o); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%s: datastore %s: %w", name, d.Target, err)
	}
	return d, nil
}

// restrict makes a SQLite datastore readable by its owner alone: the file
// is created 0600 before SQLite opens it (SQLite gives its -wal and -shm
// files the database file's mode), an existing database, -wal or -shm
// file open to others is made 0600, and the directory, when this process
// owns it, 0700. The datastore holds callers' names and what they sent; a
// node's hostPath is read by whatever else runs there.
// createWithPageSize gives an SQLite file that is still empty pages of
// size bytes (0: SQLite's default), setting them before the switch to WAL
// writes its first page: the driver runs a DSN's pragmas in name order,
// journal_mode before page_size, too late for it.
func createWithPageSize(path string, size int) error {
	if size == 0 {
		return nil
	}
	if size < 512 || size > 65536 || size&(size-1) != 0 {
		return fmt.Errorf("an SQLite page size of %d: want a power of two from 512 to 65536", size)
	}
	if st, err := os.Stat(path); err != nil || st.Size() > 0 {
		return err
	}
	db, err := sql.Open("sqlite", "file:"+path+fmt.Sprintf("?_pragma=page_size(%d)", size))
	if err != nil {
		return err
	}
	_, err = db.Exec("PRAGMA journal_mode=WAL")
	return errors.Join(err, db.Close())
}

func restrict(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Stat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return err
		case st.Mode().Perm()&0o077 != 0:
			if err := os.Chmod(p, 0o600); err != nil {
				return fmt.Errorf("making %s readable by its owner alone: %w", p, err)
			}
		}
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) == os.Getuid() && st.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil { //nolint:gosec // a directory needs its search bit: 0700 is its owner's alone
			return fmt.Errorf("making the directory %s its owner's alone: %w", dir, err)
		}
	}
	return nil
}

// versionTable is the goose version table of a service.
func versionTable(name string) string { return strings.ReplaceAll(name, "-", "_") + "_schema_version" }

// Migrate applies a second component's migrations to an open datastore
// (a service's decision log beside its own tables), under the
// component's own version table (name_schema_version) and, on
// PostgreSQL, its own lock, as Open applies the service's.
func (d *DB) Migrate(ctx context.Context, name string, migrations fs.FS, o Options) error {
	if err := d.migrate(ctx, name, migrations, o); err != nil {
		return fmt.Errorf("datastore %s: %s: %w", d.Target, name, err)
	}
	return nil
}

func (d *DB) migrate(ctx context.Context, name string, migrations fs.FS, o Options) error {
	sub, err := fs.Sub(migrations, string(d.Dialect))
	if err != nil {
		return err
	}
	table := versionTable(name)
	opts := []goose.ProviderOption{goose.WithTableName(table), goose.WithDisableGlobalRegistry(true)}
	gd := goose.DialectSQLite3
	if d.Dialect == Postgres {
		gd = goose.DialectPostgres
		timeout := o.LockTimeout
		if timeout <= 0 {
			timeout = 5 * time.Minute
		}
		// One lock per service, so that two services sharing a database do
		// not wait for each other; polled every second.
		h := fnv.New64a()
		_, _ = h.Write([]byte("callerauth/" + name))
		locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(int64(h.Sum64()>>1)), lock.WithLockTimeout(1, uint64(timeout/time.Second)))
		if err != nil {
			return err
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	if d.Dialect == SQLite {
		if err := adoptLegacy(ctx, d.DB, table); err != nil {
			return fmt.Errorf("adopting the schema version table of an older release: %w", err)
		}
	}
	p, err := goose.NewProvider(gd, d.DB, sub, opts...)
	if err != nil {
		return err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("schema migration: %w", err)
	}
	if o.Logger != nil {
		for _, r := range results {
			o.Logger.Info("datastore schema migrated", "datastore", d.Target, "version", r.Source.Version, "file", r.Source.Path, "duration", r.Duration)
		}
	}
	current, err := p.GetDBVersion(ctx)
	if err != nil {
		return err
	}
	known := int64(0)
	for _, s := range p.ListSources() {
		known = max(known, s.Version)
	}
	if current > known {
		return fmt.Errorf("schema version %d is newer than this binary knows (%d): a newer release wrote it", current, known)
	}
	return nil
}

// adoptLegacy carries an SQLite datastore of a release before goose over:
// its schema_migrations table (version, applied_at) becomes goose's
// version table, so that the versions applied are not applied again.
func adoptLegacy(ctx context.Context, db *sql.DB, table string) error {
	var legacy, current int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`).Scan(&legacy); err != nil || legacy == 0 {
		return err
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&current); err != nil || current > 0 {
		return err
	}
	store, err := database.NewStore(database.DialectSQLite3, table)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := store.CreateVersionTable(ctx, tx); err != nil {
		return err
	}
	if err := store.Insert(ctx, tx, database.InsertRequest{Version: 0}); err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		return err
	}
	var versions []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			_ = rows.Close()
			return err
		}
		versions = append(versions, v)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	for _, v := range versions {
		if err := store.Insert(ctx, tx, database.InsertRequest{Version: v}); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `DROP TABLE schema_migrations`); err != nil {
		return err
	}
	return tx.Commit()
}

// Rebind writes a query's ? placeholders in the dialect's form: $1, $2, …
// for PostgreSQL. Queries are written with ? (SQLite's) and contain no ?
// in a literal.
func (d *DB) Rebind(q string) string {
	if d.Dialect != Postgres || !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// FileFlagHelp is the help of a service's --datastore-url-file flag.
const FileFlagHelp = "read the datastore URL from this file instead of --datastore (a mounted Secret: the URL may then carry the password without showing in the process's arguments)"

// Resolve is the datastore a service opens, checked: the first line of
// urlFile when set (a Secret's key, mounted), else target; the error names
// the flag (--datastore, --datastore-url-file). The file's content is
// never echoed in an error.
func Resolve(target, urlFile string) (string, error) {
	if urlFile == "" {
		if _, _, err := Parse(target); err != nil {
			return "", fmt.Errorf("--datastore: %w", err)
		}
		return target, nil
	}
	b, err := os.ReadFile(urlFile)
	if err != nil {
		return "", fmt.Errorf("--datastore-url-file: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" || strings.ContainsAny(s, "\r\n") {
		return "", fmt.Errorf("--datastore-url-file %s: want one URL on one line", urlFile)
	}
	if _, _, err := Parse(s); err != nil {
		return "", fmt.Errorf("--datastore-url-file %s: %w", urlFile, err)
	}
	return s, nil
}
