-- +goose Up
-- The search index: a row for each decision of each log that feeds it
-- (replicas' logs share a PostgreSQL index), in the order they were
-- indexed (seq, the search's cursor), with what a search asks of it and
-- the entry as the log holds it (in PostgreSQL, where replicas read
-- each other's; an SQLite index, one process's, reads it from its log).
-- It follows the logs and can be dropped
-- and built again from them at any time (docs/decision-log.md).
CREATE TABLE decision_search (
	seq     INTEGER PRIMARY KEY,
	origin  TEXT NOT NULL,
	idx     INTEGER NOT NULL,
	at      INTEGER NOT NULL,
	caller  TEXT NOT NULL,
	system  TEXT NOT NULL,
	tenant  TEXT NOT NULL,
	reason  TEXT NOT NULL,
	allowed INTEGER NOT NULL,
	data    BLOB,
	UNIQUE (origin, idx)
);
CREATE INDEX decision_search_caller ON decision_search (caller, seq);
-- How far each log is indexed: its next index.
CREATE TABLE decision_search_logs (
	origin TEXT PRIMARY KEY,
	next   INTEGER NOT NULL
);
