-- +goose Up
-- IF NOT EXISTS: a datastore from before versions were recorded is adopted
-- as version 1.
CREATE TABLE IF NOT EXISTS health_events (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	node_name   TEXT NOT NULL,
	caller      TEXT NOT NULL,
	scope       TEXT NOT NULL,
	received_at INTEGER NOT NULL,
	event       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS health_events_node ON health_events(node_name, id);
