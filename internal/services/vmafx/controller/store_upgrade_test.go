package controller

import (
	"context"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/internal/foundation/datastore"
	"github.com/callerauth/callerauth/internal/kit/pgtest"
)

// TestUpgradeCountsTheJobsThere: a store at schema 5 with jobs of two
// tenants in every state, upgraded, has counters equal to its rows', and
// they keep up with a submission, a state change and a deletion.
func TestUpgradeCountsTheJobsThere(t *testing.T) {
	for name, target := range map[string]string{"sqlite": filepath.Join(t.TempDir(), "jobs.db"), "postgres": pgtest.Start(t).NewDatabase(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			old := fstest.MapFS{}
			err := fs.WalkDir(migrations, "migrations", func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				if v, _ := strconv.Atoi(strings.SplitN(filepath.Base(path), "_", 2)[0]); v > 5 {
					return nil
				}
				b, err := fs.ReadFile(migrations, path)
				old[strings.TrimPrefix(path, "migrations/")] = &fstest.MapFile{Data: b}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			db, err := datastore.Open(ctx, "controller", target, old, datastore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for i, row := range []struct {
				tenant string
				state  int
			}{{"a", 1}, {"a", 1}, {"a", 2}, {"a", 3}, {"a", 5}, {"b", 1}, {"b", 4}} {
				if _, err := db.ExecContext(ctx, db.Rebind(`INSERT INTO jobs (id, seq, tenant, reference, distorted, metrics, state, submitted_by, created_at, updated_at, queued_at)
					VALUES (?, ?, ?, 'r', 'd', 'psnr', ?, 'ci', 0, 0, 0)`), row.tenant+string(rune('0'+i)), i+1, row.tenant, row.state); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			s, err := OpenStore(target, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			check := func(when string) {
				t.Helper()
				rows, err := s.db.QueryContext(ctx, `SELECT j.tenant, COUNT(*), SUM(CASE WHEN j.state = 1 THEN 1 ELSE 0 END), SUM(CASE WHEN j.state IN (1, 2) THEN 1 ELSE 0 END), MAX(c.jobs), MAX(c.pending), MAX(c.unfinished)
					FROM jobs j JOIN tenant_jobs c ON c.tenant = j.tenant GROUP BY j.tenant ORDER BY j.tenant`)
				if err != nil {
					t.Fatal(err)
				}
				defer rows.Close()
				n := 0
				for rows.Next() {
					var tenant string
					var jobs, pending, unfinished, cjobs, cpending, cunfinished int
					if err := rows.Scan(&tenant, &jobs, &pending, &unfinished, &cjobs, &cpending, &cunfinished); err != nil {
						t.Fatal(err)
					}
					if jobs != cjobs || pending != cpending || unfinished != cunfinished {
						t.Errorf("%s, tenant %s: counters say %d jobs, %d pending, %d unfinished; the rows %d, %d, %d", when, tenant, cjobs, cpending, cunfinished, jobs, pending, unfinished)
					}
					n++
				}
				if err := rows.Err(); err != nil || n != 2 {
					t.Fatalf("%s: %d tenants counted, %v", when, n, err)
				}
			}
			check("after the upgrade")
			if _, err := s.Submit(ctx, "a", "ci", "", &vmafxv1.JobSpec{Reference: "r", Distorted: "d", Metrics: []string{"psnr"}}, 4, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Cancel(ctx, "b", "b5"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.db.ExecContext(ctx, s.q(`DELETE FROM jobs WHERE id = ?`), "a3"); err != nil {
				t.Fatal(err)
			}
			check("after a submission, a cancel and a deletion")
		})
	}
}
