-- +goose Up
-- Idempotent submissions.
ALTER TABLE jobs ADD COLUMN request_id TEXT;
CREATE UNIQUE INDEX jobs_request ON jobs(tenant, request_id) WHERE request_id IS NOT NULL;
