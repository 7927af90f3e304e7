-- +goose Up
CREATE TABLE jobs (
	id               TEXT PRIMARY KEY,
	seq              INTEGER NOT NULL,
	tenant           TEXT NOT NULL,
	reference        TEXT NOT NULL,
	distorted        TEXT NOT NULL,
	metrics          TEXT NOT NULL,
	state            INTEGER NOT NULL,
	node             TEXT NOT NULL DEFAULT '',
	lease_expires_at INTEGER,
	progress         REAL NOT NULL DEFAULT 0,
	scores           TEXT NOT NULL DEFAULT '[]',
	error            TEXT NOT NULL DEFAULT '',
	submitted_by     TEXT NOT NULL,
	created_at       INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL
);
CREATE INDEX jobs_claim ON jobs(tenant, state, seq);
CREATE INDEX jobs_lease ON jobs(state, lease_expires_at);
