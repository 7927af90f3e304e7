-- +goose Up
-- A submission's quota checks read two counters instead of counting the
-- tenant's rows: work that grows with one tenant's rows stays that
-- tenant's (the counters row is locked per tenant, as submissions are).
CREATE TABLE tenant_jobs (
	tenant  TEXT PRIMARY KEY,
	jobs    BIGINT NOT NULL DEFAULT 0, -- in any state, finished ones until they expire
	pending BIGINT NOT NULL DEFAULT 0  -- state PENDING (1)
);
INSERT INTO tenant_jobs (tenant, jobs, pending)
	SELECT tenant, COUNT(*), COUNT(*) FILTER (WHERE state = 1) FROM jobs GROUP BY tenant;
-- +goose StatementBegin
CREATE FUNCTION jobs_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'INSERT' THEN
		INSERT INTO tenant_jobs (tenant, jobs, pending) VALUES (NEW.tenant, 1, (NEW.state = 1)::int)
			ON CONFLICT (tenant) DO UPDATE SET jobs = tenant_jobs.jobs + 1, pending = tenant_jobs.pending + EXCLUDED.pending;
	ELSIF TG_OP = 'DELETE' THEN
		UPDATE tenant_jobs SET jobs = jobs - 1, pending = pending - (OLD.state = 1)::int WHERE tenant = OLD.tenant;
	ELSIF (OLD.state = 1) <> (NEW.state = 1) THEN
		UPDATE tenant_jobs SET pending = pending + (NEW.state = 1)::int - (OLD.state = 1)::int WHERE tenant = NEW.tenant;
	END IF;
	RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER jobs_count AFTER INSERT OR DELETE OR UPDATE OF state ON jobs
	FOR EACH ROW EXECUTE FUNCTION jobs_count();
