-- +goose Up
-- The log's size, the one row every append locks and moves, and its
-- minimum index: entries below it are pruned (C2SP tlog-tiles).
CREATE TABLE translog_head (
	id        SMALLINT PRIMARY KEY CHECK (id = 1),
	size      BIGINT NOT NULL,
	min_index BIGINT NOT NULL
);
INSERT INTO translog_head (id, size, min_index) VALUES (1, 0, 0);
-- The Merkle tree's stored hashes (golang.org/x/mod/sumdb/tlog) that
-- outlive their entries: when a tile's entries are pruned, the hashes at
-- level 8 and above that their rows held move here, by stored-hash
-- index (tlog.StoredHashIndex).
CREATE TABLE translog_hashes (
	idx  BIGINT PRIMARY KEY,
	hash BYTEA NOT NULL
);
-- The entries, by leaf index, with what a search asks of them and the
-- tree's hashes that appending each stored (tlog.StoredHashes: its leaf
-- hash, then the root of each subtree it completed, 32 bytes each,
-- before the data so that reading them leaves the data unread).
CREATE TABLE translog_entries (
	idx     BIGINT PRIMARY KEY,
	at      BIGINT NOT NULL,
	caller  TEXT NOT NULL,
	system  TEXT NOT NULL,
	tenant  TEXT NOT NULL,
	reason  TEXT NOT NULL,
	allowed SMALLINT NOT NULL,
	hashes  BYTEA NOT NULL,
	data    BYTEA NOT NULL
);
CREATE INDEX translog_entries_caller ON translog_entries(caller, idx);
CREATE INDEX translog_entries_at ON translog_entries(at);
-- Signed checkpoints, one per size signed.
CREATE TABLE translog_checkpoints (
	size BIGINT PRIMARY KEY,
	at   BIGINT NOT NULL,
	note BYTEA NOT NULL
);
