-- +goose Up
ALTER TABLE items ADD COLUMN note TEXT NOT NULL DEFAULT '';
-- a slow migration, so that replicas starting together overlap
SELECT pg_sleep(0.5);
