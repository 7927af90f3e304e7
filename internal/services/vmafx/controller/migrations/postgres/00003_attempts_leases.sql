-- +goose Up
-- Attempts (a job is FAILED attempts_exhausted after --max-attempts
-- claims), the lease ID a report must carry, the stable reason of a failed
-- or cancelled job, and queued_at: claims take the oldest queued_at first,
-- and a job given back or whose lease expired is queued again at that time,
-- behind the tenant's other pending jobs.
ALTER TABLE jobs ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN lease_id TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN reason TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN queued_at BIGINT NOT NULL DEFAULT 0;
UPDATE jobs SET queued_at = created_at;
CREATE INDEX jobs_queue ON jobs(tenant, state, queued_at, seq);
