-- +goose Up
-- A submission's quota checks read two counters instead of counting the
-- tenant's rows, and a new job's seq comes off an index instead of a scan
-- of every tenant's jobs: under SQLite's one writer, work that grows with
-- one tenant's rows would be waited out by every tenant.
CREATE UNIQUE INDEX jobs_seq ON jobs(seq);
CREATE TABLE tenant_jobs (
	tenant  TEXT PRIMARY KEY,
	jobs    INTEGER NOT NULL DEFAULT 0, -- in any state, finished ones until they expire
	pending INTEGER NOT NULL DEFAULT 0  -- state PENDING (1)
);
INSERT INTO tenant_jobs (tenant, jobs, pending)
	SELECT tenant, COUNT(*), SUM(state = 1) FROM jobs GROUP BY tenant;
-- +goose StatementBegin
CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs BEGIN
	INSERT INTO tenant_jobs (tenant, jobs, pending) VALUES (NEW.tenant, 1, NEW.state = 1)
		ON CONFLICT (tenant) DO UPDATE SET jobs = jobs + 1, pending = pending + (NEW.state = 1);
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs BEGIN
	UPDATE tenant_jobs SET jobs = jobs - 1, pending = pending - (OLD.state = 1) WHERE tenant = OLD.tenant;
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER jobs_count_state AFTER UPDATE OF state ON jobs WHEN (OLD.state = 1) <> (NEW.state = 1) BEGIN
	UPDATE tenant_jobs SET pending = pending + (NEW.state = 1) - (OLD.state = 1) WHERE tenant = NEW.tenant;
END;
-- +goose StatementEnd
