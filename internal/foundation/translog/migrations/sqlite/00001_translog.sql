-- +goose Up
-- The log's size, the one row every append locks and moves, and its
-- minimum index: entries below it are pruned (C2SP tlog-tiles).
CREATE TABLE translog_head (
	id        INTEGER PRIMARY KEY CHECK (id = 1),
	size      INTEGER NOT NULL,
	min_index INTEGER NOT NULL
);
INSERT INTO translog_head (id, size, min_index) VALUES (1, 0, 0);
-- The Merkle tree: golang.org/x/mod/sumdb/tlog's stored hashes, by their
-- stored-hash index (tlog.StoredHashIndex).
CREATE TABLE translog_hashes (
	idx  INTEGER PRIMARY KEY,
	hash BLOB NOT NULL
);
-- The entries, by leaf index, with what a search asks of them.
CREATE TABLE translog_entries (
	idx     INTEGER PRIMARY KEY,
	at      INTEGER NOT NULL,
	caller  TEXT NOT NULL,
	system  TEXT NOT NULL,
	tenant  TEXT NOT NULL,
	reason  TEXT NOT NULL,
	allowed INTEGER NOT NULL,
	data    BLOB NOT NULL
);
CREATE INDEX translog_entries_caller ON translog_entries(caller, idx);
CREATE INDEX translog_entries_at ON translog_entries(at);
-- Signed checkpoints, one per size signed.
CREATE TABLE translog_checkpoints (
	size INTEGER PRIMARY KEY,
	at   INTEGER NOT NULL,
	note BLOB NOT NULL
);
