package connector

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
	"github.com/callerauth/callerauth/internal/foundation/datastore"
)

// Store keeps accepted events in SQLite or PostgreSQL, one transaction per
// batch: a batch is stored whole or not at all, and is durable when Append
// returns. Several deployment-role replicas share one PostgreSQL database:
// each batch is stored once, by the replica that received it.
type Store struct {
	db   *datastore.DB
	path string // the SQLite file's, "" for PostgreSQL
}

// StoredEvent is an event as stored: with the node name as stamped, and who
// sent it under which scope.
type StoredEvent struct {
	ID         int64
	Node       string
	Caller     string
	Scope      string
	ReceivedAt time.Time
	Event      *pcv1.HealthEvent
}

// migrations are the datastore's schema versions, one set per dialect.
//
//go:embed migrations
var migrations embed.FS

// OpenStore opens (creating and migrating if needed) the datastore target
// names: an SQLite file path (or sqlite:///path), or a postgres:// URL.
func OpenStore(target string) (*Store, error) {
	sub, _ := fs.Sub(migrations, "migrations")
	db, err := datastore.Open(context.Background(), "connector", target, sub, datastore.Options{})
	if err != nil {
		return nil, err
	}
	s := &Store{db: db}
	if d, path, err := datastore.Parse(target); err == nil && d == datastore.SQLite {
		s.path = path
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// ErrKeyReused is a batch whose idempotency key the caller already used
// for other events.
var ErrKeyReused = errors.New("connector: the idempotency key was used for another batch")

// Append stores a batch in one transaction. Every event must carry a node
// name by now. With an idempotency key, the key is stored in the same
// transaction (unique per caller): a batch whose key is already stored
// with the same events is not stored again (duplicate true, no error), and
// one with other events is ErrKeyReused.
//
// publisher names who stored the events for its share of the datastore
// (PublisherBytes); bytes is what the events' stored forms took.
func (s *Store) Append(ctx context.Context, publisher, caller, scope, key string, events []*pcv1.HealthEvent) (duplicate bool, bytes int64, err error) {
	bodies := make([]string, len(events))
	sum := sha256.New()
	for i, e := range events {
		if e.GetNodeName() == "" {
			return false, 0, fmt.Errorf("connector: event %d has no node name", i)
		}
		b, err := protojson.Marshal(e)
		if err != nil {
			return false, 0, fmt.Errorf("connector: encoding event: %w", err)
		}
		bodies[i] = string(b)
		bytes += int64(len(b))
		if key == "" {
			continue // no key, no digest to compare
		}
		// The digest reads the deterministic binary form: protojson's
		// spacing may differ between builds, a retry may meet another.
		w, err := proto.MarshalOptions{Deterministic: true}.Marshal(e)
		if err != nil {
			return false, 0, fmt.Errorf("connector: encoding event: %w", err)
		}
		fmt.Fprintf(sum, "%d:", len(w))
		sum.Write(w)
	}
	digest := hex.EncodeToString(sum.Sum(nil))
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, 0, fmt.Errorf("connector: datastore: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit.
	now := time.Now().UnixNano()
	if key != "" {
		res, err := tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO health_event_batches(caller, idempotency_key, digest, events, received_at) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (caller, idempotency_key) DO NOTHING`), caller, key, digest, len(events), now)
		if err != nil {
			return false, 0, fmt.Errorf("connector: datastore: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return false, 0, fmt.Errorf("connector: datastore: %w", err)
		} else if n == 0 {
			var stored string
			if err := tx.QueryRowContext(ctx, s.db.Rebind(`SELECT digest FROM health_event_batches WHERE caller = ? AND idempotency_key = ?`), caller, key).Scan(&stored); err != nil {
				return false, 0, fmt.Errorf("connector: datastore: %w", err)
			}
			if stored != digest {
				return false, 0, ErrKeyReused
			}
			return true, 0, nil
		}
	}
	stmt, err := tx.PrepareContext(ctx, s.db.Rebind(`INSERT INTO health_events(node_name, caller, scope, received_at, event, publisher, bytes) VALUES (?, ?, ?, ?, ?, ?, ?)`))
	if err != nil {
		return false, 0, fmt.Errorf("connector: datastore: %w", err)
	}
	defer stmt.Close()
	for i, e := range events {
		if _, err := stmt.ExecContext(ctx, e.GetNodeName(), caller, scope, now, bodies[i], publisher, len(bodies[i])); err != nil {
			return false, 0, fmt.Errorf("connector: datastore: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return false, 0, fmt.Errorf("connector: datastore: %w", err)
	}
	return false, bytes, nil
}

// List returns stored events in order, for one node or all ("").
func (s *Store) List(ctx context.Context, node string, limit int) ([]StoredEvent, error) {
	if limit <= 0 {
		limit = 1000
	}
	q := `SELECT id, node_name, caller, scope, received_at, event FROM health_events`
	args := []any{}
	if node != "" {
		q += ` WHERE node_name = ?`
		args = append(args, node)
	}
	q += ` ORDER BY id LIMIT ?`
	args = append(args, limit)
	rows, err := s.db.QueryContext(ctx, s.db.Rebind(q), args...)
	if err != nil {
		return nil, fmt.Errorf("connector: datastore: %w", err)
	}
	defer rows.Close()
	var out []StoredEvent
	for rows.Next() {
		var e StoredEvent
		var at int64
		var body string
		if err := rows.Scan(&e.ID, &e.Node, &e.Caller, &e.Scope, &at, &body); err != nil {
			return nil, fmt.Errorf("connector: datastore: %w", err)
		}
		e.ReceivedAt = time.Unix(0, at)
		e.Event = &pcv1.HealthEvent{}
		if err := protojson.Unmarshal([]byte(body), e.Event); err != nil {
			return nil, fmt.Errorf("connector: datastore: event %d: %w", e.ID, err)
		}
		out = append(out, e)
	}
	return out, errors.Join(rows.Err())
}

// Size is how many bytes the datastore holds for the connector: the
// SQLite file's pages and its write-ahead log (which holds pages not yet
// written back, up to a few MB under load), or the PostgreSQL tables with
// their indexes and TOAST.
func (s *Store) Size(ctx context.Context) (int64, error) {
	q := `SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()`
	if s.db.Dialect == datastore.Postgres {
		q = `SELECT pg_total_relation_size('health_events') + pg_total_relation_size('health_event_batches')`
	}
	var n int64
	if err := s.db.QueryRowContext(ctx, q).Scan(&n); err != nil {
		return 0, fmt.Errorf("connector: datastore size: %w", err)
	}
	if s.db.Dialect == datastore.SQLite && s.path != "" {
		if st, err := os.Stat(s.path + "-wal"); err == nil {
			n += st.Size()
		}
	}
	return n, nil
}

// PublisherBytes is what each publisher's stored events take (their
// stored forms), summed from an index.
func (s *Store) PublisherBytes(ctx context.Context) (map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT publisher, SUM(bytes) FROM health_events GROUP BY publisher`)
	if err != nil {
		return nil, fmt.Errorf("connector: datastore: publishers' bytes: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var p string
		var n int64
		if err := rows.Scan(&p, &n); err != nil {
			return nil, fmt.Errorf("connector: datastore: publishers' bytes: %w", err)
		}
		out[p] = n
	}
	return out, rows.Err()
}

// ExpireKeys forgets the idempotency keys of batches received before
// before: a retry that late is a new batch. It returns how many went.
func (s *Store) ExpireKeys(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, s.db.Rebind(`DELETE FROM health_event_batches WHERE received_at < ?`), before.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("connector: expiring idempotency keys: %w", err)
	}
	return res.RowsAffected()
}
