-- +goose Up
CREATE TABLE health_events (
	id          BIGSERIAL PRIMARY KEY,
	node_name   TEXT NOT NULL,
	caller      TEXT NOT NULL,
	scope       TEXT NOT NULL,
	received_at BIGINT NOT NULL, -- Unix nanoseconds
	event       TEXT NOT NULL    -- the HealthEvent, protojson
);
CREATE INDEX health_events_node ON health_events(node_name, id);
