// Package sqlitedb opens the embedded SQLite datastores of callerauth's
// services (the pure-Go driver): durable commits, one writer, and schema
// migrations applied in order, each in its own transaction, recorded by
// version so that a datastore written by an older binary is brought up to
// date and one written by a newer binary is refused.
package sqlitedb

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"
)

// Open opens (creating if needed) the database at path and applies the
// migrations not yet applied; migrations[i] is schema version i+1. Name
// labels errors ("connector: datastore").
func Open(name, path string, migrations []string) (*sql.DB, error) {
	// WAL keeps readers off the writer's back; synchronous=FULL makes every
	// committed transaction durable before it returns.
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(5000)&_pragma=foreign_keys(ON)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", name, path, err)
	}
	db.SetMaxOpenConns(1) // one writer; SQLite serialises writes anyway
	if err := migrate(db, migrations); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%s %s: %w", name, path, err)
	}
	return db, nil
}

func migrate(db *sql.DB, migrations []string) error {
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		return err
	}
	var current int
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return err
	}
	if current > len(migrations) {
		return fmt.Errorf("schema version %d is newer than this binary knows (%d): a newer release wrote it", current, len(migrations))
	}
	for v := current + 1; v <= len(migrations); v++ {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("schema migration %d: %w", v, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`, v, time.Now().Unix()); err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("schema migration %d: %w", v, err)
		}
	}
	return nil
}
