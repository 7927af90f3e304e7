-- +goose Up
-- Finished jobs expire (--finished-job-retention): found oldest first by
-- state and last update.
CREATE INDEX jobs_finished ON jobs(state, updated_at);
