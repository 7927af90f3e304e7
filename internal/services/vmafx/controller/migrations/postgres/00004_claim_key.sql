-- +goose Up
-- Idempotent claims: the key of the claim that holds a RUNNING job's
-- lease, set by ClaimJob and cleared when the claim ends. A retried claim
-- with the same key (same tenant and node) finds its claim again.
ALTER TABLE jobs ADD COLUMN claim_key TEXT;
CREATE UNIQUE INDEX jobs_claim_key ON jobs(tenant, node, claim_key) WHERE claim_key IS NOT NULL;
