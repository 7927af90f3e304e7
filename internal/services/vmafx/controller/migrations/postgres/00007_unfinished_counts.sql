-- +goose Up
-- The pending quota bounds a tenant's unfinished jobs, PENDING or RUNNING:
-- a job moves between the two (a claim, a lapsed lease, a give-back, a
-- restart) without changing their sum, so no way back to PENDING can pass
-- the quota; only a submission adds one, and it is checked.
ALTER TABLE tenant_jobs ADD COLUMN unfinished BIGINT NOT NULL DEFAULT 0; -- state PENDING (1) or RUNNING (2)
UPDATE tenant_jobs SET unfinished = c.n FROM (SELECT tenant, COUNT(*) AS n FROM jobs WHERE state IN (1, 2) GROUP BY tenant) c
	WHERE tenant_jobs.tenant = c.tenant;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobs_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'INSERT' THEN
		INSERT INTO tenant_jobs (tenant, jobs, pending, unfinished) VALUES (NEW.tenant, 1, (NEW.state = 1)::int, (NEW.state IN (1, 2))::int)
			ON CONFLICT (tenant) DO UPDATE SET jobs = tenant_jobs.jobs + 1, pending = tenant_jobs.pending + EXCLUDED.pending,
				unfinished = tenant_jobs.unfinished + EXCLUDED.unfinished;
	ELSIF TG_OP = 'DELETE' THEN
		UPDATE tenant_jobs SET jobs = jobs - 1, pending = pending - (OLD.state = 1)::int, unfinished = unfinished - (OLD.state IN (1, 2))::int
			WHERE tenant = OLD.tenant;
	ELSIF (OLD.state = 1) <> (NEW.state = 1) OR (OLD.state IN (1, 2)) <> (NEW.state IN (1, 2)) THEN
		UPDATE tenant_jobs SET pending = pending + (NEW.state = 1)::int - (OLD.state = 1)::int,
			unfinished = unfinished + (NEW.state IN (1, 2))::int - (OLD.state IN (1, 2))::int WHERE tenant = NEW.tenant;
	END IF;
	RETURN NULL;
END
$$;
-- +goose StatementEnd

