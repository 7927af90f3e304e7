package connector_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
	"github.com/callerauth/callerauth/internal/kit/pgtest"
	"github.com/callerauth/callerauth/internal/services/connector"
)

// backends are the datastores every store test runs against: an SQLite
// file and a database on a real PostgreSQL server.
func backends(t *testing.T) []struct{ driver, target string } {
	pg := pgtest.Start(t)
	return []struct{ driver, target string }{
		{"sqlite", filepath.Join(t.TempDir(), "events.db")},
		{"pgx", pg.NewDatabase(t)},
	}
}

// TestStoreBatchIsAllOrNothing: when one event of a batch cannot be
// written, none of the batch is stored — on both backends.
func TestStoreBatchIsAllOrNothing(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.driver, func(t *testing.T) {
			s, err := connector.OpenStore(b.target)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			if _, _, err := s.Append(ctx, "u", "u", "node_local", "", []*pcv1.HealthEvent{{NodeName: "node-a", CheckName: "first"}}); err != nil {
				t.Fatal(err)
			}
			// A trigger, installed through a second connection, refuses one
			// node name: the write fails in the middle of the batch.
			dsn := b.target
			poison := []string{`CREATE FUNCTION poison() RETURNS trigger AS $$ BEGIN IF NEW.node_name = 'poison' THEN RAISE EXCEPTION 'poisoned'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql`,
				`CREATE TRIGGER poison BEFORE INSERT ON health_events FOR EACH ROW EXECUTE FUNCTION poison()`}
			if b.driver == "sqlite" {
				dsn = "file:" + b.target
				poison = []string{`CREATE TRIGGER poison BEFORE INSERT ON health_events WHEN NEW.node_name = 'poison' BEGIN SELECT RAISE(ABORT, 'poisoned'); END;`}
			}
			db, err := sql.Open(b.driver, dsn)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range poison {
				if _, err := db.Exec(q); err != nil {
					t.Fatal(err)
				}
			}
			db.Close()
			_, _, err = s.Append(ctx, "u", "u", "cross_node", "k-poison", []*pcv1.HealthEvent{{NodeName: "node-b"}, {NodeName: "poison"}, {NodeName: "node-c"}})
			if err == nil || !strings.Contains(err.Error(), "poisoned") {
				t.Fatalf("Append = %v; want the trigger's refusal", err)
			}
			got, err := s.List(ctx, "", 0)
			if err != nil || len(got) != 1 || got[0].Event.GetCheckName() != "first" {
				t.Fatalf("after a failed batch: %+v %v; want only the first batch", got, err)
			}
			if _, _, err := s.Append(ctx, "u", "u", "node_local", "", []*pcv1.HealthEvent{{NodeName: ""}}); err == nil {
				t.Fatal("an event with no node name was stored")
			}
			// Order, the node filter and the limit.
			if _, _, err := s.Append(ctx, "v", "v", "node_local", "", []*pcv1.HealthEvent{{NodeName: "node-b", CheckName: "second"}, {NodeName: "node-a", CheckName: "third"}}); err != nil {
				t.Fatal(err)
			}
			all, err := s.List(ctx, "", 0)
			if err != nil || len(all) != 3 || all[1].Event.GetCheckName() != "second" || all[2].Caller != "v" || all[0].ID >= all[1].ID {
				t.Fatalf("all: %+v %v", all, err)
			}
			a, err := s.List(ctx, "node-a", 1)
			if err != nil || len(a) != 1 || a[0].Event.GetCheckName() != "first" {
				t.Fatalf("node-a, limit 1: %+v %v", a, err)
			}
			// The failed batch's key went with it: the retry is stored.
			if dup, _, err := s.Append(ctx, "u", "u", "cross_node", "k-poison", []*pcv1.HealthEvent{{NodeName: "node-c", CheckName: "retried"}}); dup || err != nil {
				t.Fatalf("the retry of a failed batch: %t %v", dup, err)
			}
		})
	}
}

// TestStoreIdempotencyKey: a batch retried under its key is stored once
// (the retry answered as a duplicate), the same key with other events is
// refused, and another caller's same key is its own — on both backends,
// with retries racing each other. (A failed batch's key goes with it:
// TestStoreBatchIsAllOrNothing.)
func TestStoreIdempotencyKey(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.driver, func(t *testing.T) {
			s, err := connector.OpenStore(b.target)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			batch := []*pcv1.HealthEvent{{NodeName: "node-a", CheckName: "GpuXid"}, {NodeName: "node-b", CheckName: "GpuXid"}}
			if dup, _, err := s.Append(ctx, "u", "u", "cross_node", "k1", batch); dup || err != nil {
				t.Fatalf("first: %t %v", dup, err)
			}
			// Eight retries at once, as after a cut connection.
			var wg sync.WaitGroup
			var dups atomic.Int32
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					dup, _, err := s.Append(ctx, "u", "u", "cross_node", "k1", batch)
					if err != nil {
						t.Error(err)
					}
					if dup {
						dups.Add(1)
					}
				}()
			}
			wg.Wait()
			if dups.Load() != 8 {
				t.Errorf("%d of 8 retries answered as duplicates", dups.Load())
			}
			if _, _, err := s.Append(ctx, "u", "u", "cross_node", "k1", batch[:1]); !errors.Is(err, connector.ErrKeyReused) {
				t.Errorf("the key with other events: %v; want ErrKeyReused", err)
			}
			if dup, _, err := s.Append(ctx, "v", "v", "cross_node", "k1", batch[:1]); dup || err != nil {
				t.Errorf("another caller's same key: %t %v", dup, err)
			}
			all, err := s.List(ctx, "", 0)
			if err != nil || len(all) != 3 {
				t.Fatalf("stored %d events (%v); want 3: the batch once and the other caller's", len(all), err)
			}
		})
	}
}

func TestEventsCommand(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.driver, func(t *testing.T) { testEventsCommand(t, b.target) })
	}
}

func testEventsCommand(t *testing.T, path string) {
	s, err := connector.OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Append(context.Background(), "system:serviceaccount:ns:mon", "system:serviceaccount:ns:mon", "cross_node", "", []*pcv1.HealthEvent{
		{NodeName: "node-a", CheckName: "GpuXid"}, {NodeName: "node-b", CheckName: "GpuXid", IsFatal: true},
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	var out bytes.Buffer
	cmd := connector.NewCommand(&out, &out, func(string) string { return "" })
	cmd.SetArgs([]string{"events", "--datastore", path, "--node", "node-b"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines:\n%s", len(lines), out.String())
	}
	var row struct {
		Node, Caller, Scope string
		Event               struct {
			NodeName string `json:"nodeName"`
			IsFatal  bool   `json:"isFatal"`
		}
	}
	if err := json.Unmarshal([]byte(lines[0]), &row); err != nil {
		t.Fatal(err)
	}
	if row.Node != "node-b" || row.Caller != "system:serviceaccount:ns:mon" || row.Scope != "cross_node" || !row.Event.IsFatal || row.Event.NodeName != "node-b" {
		t.Fatalf("row %+v", row)
	}
	cmd = connector.NewCommand(&out, &out, func(string) string { return "" })
	cmd.SetArgs([]string{"events", "--datastore", filepath.Join(t.TempDir(), "missing.db")})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "missing.db") {
		t.Fatalf("missing datastore: %v", err)
	}
}

// TestStoreExpiresKeysAndMeasures: idempotency keys older than the
// retention are forgotten (a later batch under the same key is a new one,
// stored), newer ones kept; the store says how many bytes it holds, and
// that grows as events are stored — on SQLite and PostgreSQL alike.
func TestStoreExpiresKeysAndMeasures(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.driver, func(t *testing.T) {
			s, err := connector.OpenStore(b.target)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			before, err := s.Size(ctx)
			if err != nil || before <= 0 {
				t.Fatalf("size of a new store: %d %v", before, err)
			}
			old := []*pcv1.HealthEvent{{NodeName: "node-a", CheckName: "old", Message: strings.Repeat("m", 4000)}}
			if _, _, err := s.Append(ctx, "u", "u", "node_local", "k-old", old); err != nil {
				t.Fatal(err)
			}
			cut := time.Now()
			if _, _, err := s.Append(ctx, "u", "u", "node_local", "k-new", old); err != nil {
				t.Fatal(err)
			}
			n, err := s.ExpireKeys(ctx, cut)
			if err != nil || n != 1 {
				t.Fatalf("expired %d keys, %v; want the one older than the cut", n, err)
			}
			other := []*pcv1.HealthEvent{{NodeName: "node-a", CheckName: "other"}}
			if dup, _, err := s.Append(ctx, "u", "u", "node_local", "k-old", other); dup || err != nil {
				t.Fatalf("the forgotten key with other events: duplicate %t, %v; want stored", dup, err)
			}
			if _, _, err := s.Append(ctx, "u", "u", "node_local", "k-new", other); !errors.Is(err, connector.ErrKeyReused) {
				t.Fatalf("a kept key with other events: %v; want ErrKeyReused", err)
			}
			for range 50 {
				if _, _, err := s.Append(ctx, "u", "u", "node_local", "", old); err != nil {
					t.Fatal(err)
				}
			}
			if after, err := s.Size(ctx); err != nil || after <= before {
				t.Fatalf("size after 52 events of 4 KB: %d (was %d), %v; want it grown", after, before, err)
			}
		})
	}
}
