-- +goose Up
-- A batch's idempotency key, per caller: a retry of a stored batch finds
-- its key here and is answered without being stored again. digest is the
-- SHA-256 of the stored events, so that a key reused for other events is
-- told apart from a retry.
CREATE TABLE health_event_batches (
	caller          TEXT NOT NULL,
	idempotency_key TEXT NOT NULL,
	digest          TEXT NOT NULL,
	events          INTEGER NOT NULL,
	received_at     BIGINT NOT NULL, -- Unix nanoseconds
	PRIMARY KEY (caller, idempotency_key)
);
