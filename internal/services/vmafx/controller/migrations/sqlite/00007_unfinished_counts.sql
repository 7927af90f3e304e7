-- +goose Up
-- The pending quota bounds a tenant's unfinished jobs, PENDING or RUNNING:
-- a job moves between the two (a claim, a lapsed lease, a give-back, a
-- restart) without changing their sum, so no way back to PENDING can pass
-- the quota; only a submission adds one, and it is checked.
ALTER TABLE tenant_jobs ADD COLUMN unfinished INTEGER NOT NULL DEFAULT 0; -- state PENDING (1) or RUNNING (2)
UPDATE tenant_jobs SET unfinished = (SELECT COUNT(*) FROM jobs WHERE jobs.tenant = tenant_jobs.tenant AND jobs.state IN (1, 2));
DROP TRIGGER jobs_count_insert;
DROP TRIGGER jobs_count_delete;
DROP TRIGGER jobs_count_state;
-- +goose StatementBegin
CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs BEGIN
	INSERT INTO tenant_jobs (tenant, jobs, pending, unfinished) VALUES (NEW.tenant, 1, NEW.state = 1, NEW.state IN (1, 2))
		ON CONFLICT (tenant) DO UPDATE SET jobs = jobs + 1, pending = pending + (NEW.state = 1), unfinished = unfinished + (NEW.state IN (1, 2));
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs BEGIN
	UPDATE tenant_jobs SET jobs = jobs - 1, pending = pending - (OLD.state = 1), unfinished = unfinished - (OLD.state IN (1, 2)) WHERE tenant = OLD.tenant;
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER jobs_count_state AFTER UPDATE OF state ON jobs
	WHEN (OLD.state = 1) <> (NEW.state = 1) OR (OLD.state IN (1, 2)) <> (NEW.state IN (1, 2)) BEGIN
	UPDATE tenant_jobs SET pending = pending + (NEW.state = 1) - (OLD.state = 1),
		unfinished = unfinished + (NEW.state IN (1, 2)) - (OLD.state IN (1, 2)) WHERE tenant = NEW.tenant;
END;
-- +goose StatementEnd
