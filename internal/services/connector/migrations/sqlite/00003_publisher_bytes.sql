-- +goose Up
-- Who stored each event, for the per-publisher share of the datastore
-- (--max-publisher-bytes): the pod of a pod-bound token, else the
-- caller's name, else the tokenless peer; and the event's bytes, so that
-- each publisher's share is summed from an index, never the events.
ALTER TABLE health_events ADD COLUMN publisher TEXT NOT NULL DEFAULT '';
ALTER TABLE health_events ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
UPDATE health_events SET publisher = caller, bytes = LENGTH(event);
CREATE INDEX health_events_publisher ON health_events(publisher, bytes);
