package controller

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/internal/datastore"
)

// migrations are the job store's schema versions, one set per dialect.
//
//go:embed migrations
var migrations embed.FS

// Store keeps jobs in SQLite (one controller) or PostgreSQL (replicas on
// one database), one transaction per state change, durable when the call
// returns. On PostgreSQL a claim locks the job it takes and skips the ones
// other replicas are taking (FOR UPDATE SKIP LOCKED), so each job goes to
// exactly one node.
type Store struct {
	db  *datastore.DB
	now func() time.Time
}

// OpenStore opens (creating and migrating if needed) the store target
// names: an SQLite file path (or sqlite:///path), or a postgres:// URL.
func OpenStore(target string, now func() time.Time) (*Store, error) {
	sub, _ := fs.Sub(migrations, "migrations")
	db, err := datastore.Open(context.Background(), "controller", target, sub, datastore.Options{})
	if err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	return &Store{db: db, now: now}, nil
}

// q writes a query's placeholders for the store's dialect.
func (s *Store) q(query string) string { return s.db.Rebind(query) }

// lockRow is the clause that locks the rows a transaction's SELECT reads
// until it ends (PostgreSQL; SQLite has one writer at a time anyway), and
// with skip set passes over rows another transaction holds.
func (s *Store) lockRow(skip bool) string {
	switch {
	case s.db.Dialect != datastore.Postgres:
		return ""
	case skip:
		return " FOR UPDATE SKIP LOCKED"
	default:
		return " FOR UPDATE"
	}
}

// Close closes the store.
func (s *Store) Close() error { return s.db.Close() }

// Ping checks the store answers.
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// ErrNotFound is a job that does not exist in the caller's tenant.
var ErrNotFound = errors.New("controller: job not found")

// ErrConflict is a report the job's state or lease does not allow.
var ErrConflict = errors.New("controller: the job does not allow this report")

const columns = `id, tenant, reference, distorted, metrics, state, node, lease_expires_at, progress, scores, error, submitted_by, created_at, updated_at`

func scan(row interface{ Scan(...any) error }) (*vmafxv1.Job, error) {
	var (
		j                vmafxv1.Job
		spec             vmafxv1.JobSpec
		metrics, scores  string
		state            int32
		lease            sql.NullInt64
		created, updated int64
	)
	if err := row.Scan(&j.Id, &j.Tenant, &spec.Reference, &spec.Distorted, &metrics, &state, &j.Node, &lease, &j.Progress, &scores, &j.Error, &j.SubmittedBy, &created, &updated); err != nil {
		return nil, err
	}
	spec.Metrics = strings.Split(metrics, ",")
	j.Spec = &spec
	j.State = vmafxv1.JobState(state)
	if lease.Valid {
		j.LeaseExpiresAt = timestamp(lease.Int64)
	}
	j.CreatedAt, j.UpdatedAt = timestamp(created), timestamp(updated)
	var sc []*vmafxv1.Score
	if err := json.Unmarshal([]byte(scores), &sc); err != nil {
		return nil, fmt.Errorf("controller: job %s: scores: %w", j.Id, err)
	}
	j.Scores = sc
	return &j, nil
}

// Submit stores a new PENDING job. With a requestID, a job of the tenant
// already stored under it is returned instead (idempotent submission).
func (s *Store) Submit(ctx context.Context, tenant, by, requestID string, spec *vmafxv1.JobSpec) (*vmafxv1.Job, error) {
	now := s.now().UnixNano()
	id := uuid.NewString()
	var rid any
	if requestID != "" {
		rid = requestID
	}
	// SQLite numbers jobs itself (one writer); PostgreSQL's seq is an
	// identity column, safe under concurrent replicas.
	seq := "(SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs)"
	if s.db.Dialect == datastore.Postgres {
		seq = "DEFAULT"
	}
	res, err := s.db.ExecContext(ctx, s.q(`INSERT INTO jobs (id, seq, tenant, reference, distorted, metrics, state, submitted_by, created_at, updated_at, request_id)
		VALUES (?, `+seq+`, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`),
		id, tenant, spec.GetReference(), spec.GetDistorted(), strings.Join(spec.GetMetrics(), ","), int32(vmafxv1.JobState_JOB_STATE_PENDING), by, now, now, rid)
	if err != nil {
		return nil, fmt.Errorf("controller: storing a job: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 && requestID != "" {
		j, err := scan(s.db.QueryRowContext(ctx, s.q(`SELECT `+columns+` FROM jobs WHERE tenant = ? AND request_id = ?`), tenant, requestID))
		if err != nil {
			return nil, fmt.Errorf("controller: reading the job of request %q: %w", requestID, err)
		}
		return j, nil
	}
	return s.Get(ctx, tenant, id)
}

// Get reads a job of tenant; another tenant's job is ErrNotFound.
func (s *Store) Get(ctx context.Context, tenant, id string) (*vmafxv1.Job, error) {
	j, err := scan(s.db.QueryRowContext(ctx, s.q(`SELECT `+columns+` FROM jobs WHERE id = ? AND tenant = ?`), id, tenant))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	return j, err
}

// List pages through tenant's jobs, newest first. The page token is the seq
// to continue below.
func (s *Store) List(ctx context.Context, tenant string, state vmafxv1.JobState, size int, token string) ([]*vmafxv1.Job, string, error) {
	below := int64(1) << 62
	if token != "" {
		v, err := strconv.ParseInt(token, 10, 64)
		if err != nil || v <= 0 {
			return nil, "", fmt.Errorf("%w: page_token %q", errBadToken, token)
		}
		below = v
	}
	q := `SELECT ` + columns + `, seq FROM jobs WHERE tenant = ? AND seq < ?`
	args := []any{tenant, below}
	if state != vmafxv1.JobState_JOB_STATE_UNSPECIFIED {
		q += ` AND state = ?`
		args = append(args, int32(state))
	}
	q += ` ORDER BY seq DESC LIMIT ?`
	args = append(args, size+1)
	rows, err := s.db.QueryContext(ctx, s.q(q), args...)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	var jobs []*vmafxv1.Job
	var seqs []int64
	for rows.Next() {
		var seq int64
		j, err := scan(scanner(func(dest ...any) error { return rows.Scan(append(dest, &seq)...) }))
		if err != nil {
			return nil, "", err
		}
		jobs, seqs = append(jobs, j), append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	next := ""
	if len(jobs) > size {
		jobs, next = jobs[:size], strconv.FormatInt(seqs[size-1], 10)
	}
	return jobs, next, nil
}

type scanner func(dest ...any) error

func (f scanner) Scan(dest ...any) error { return f(dest...) }

var errBadToken = errors.New("controller: bad page token")

// Claim leases the oldest PENDING job of tenant to node until now+lease.
// It returns nil when nothing is pending.
func (s *Store) Claim(ctx context.Context, tenant, node string, lease time.Duration) (*vmafxv1.Job, error) {
	now := s.now()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	var id string
	err = tx.QueryRowContext(ctx, s.q(`SELECT id FROM jobs WHERE tenant = ? AND state = ? ORDER BY seq LIMIT 1`+s.lockRow(true)), tenant, int32(vmafxv1.JobState_JOB_STATE_PENDING)).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE jobs SET state = ?, node = ?, lease_expires_at = ?, progress = 0, updated_at = ? WHERE id = ?`),
		int32(vmafxv1.JobState_JOB_STATE_RUNNING), node, now.Add(lease).UnixNano(), now.UnixNano(), id); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	return s.Get(ctx, tenant, id)
}

// Report applies a node's report to a job of tenant it holds the lease of:
// RUNNING renews the lease and records progress; SUCCEEDED stores the
// scores; FAILED the error. Anything else is ErrConflict.
func (s *Store) Report(ctx context.Context, tenant, node string, r *vmafxv1.ReportJobRequest, lease time.Duration) (*vmafxv1.Job, error) {
	now := s.now()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	var state int32
	var holder string
	var expires sql.NullInt64
	err = tx.QueryRowContext(ctx, s.q(`SELECT state, node, lease_expires_at FROM jobs WHERE id = ? AND tenant = ?`+s.lockRow(false)), r.GetId(), tenant).Scan(&state, &holder, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	switch {
	case vmafxv1.JobState(state) != vmafxv1.JobState_JOB_STATE_RUNNING:
		return nil, fmt.Errorf("%w: it is %s, not RUNNING", ErrConflict, vmafxv1.JobState(state))
	case holder != node:
		return nil, fmt.Errorf("%w: its lease is held by another node", ErrConflict)
	case !expires.Valid || now.UnixNano() >= expires.Int64:
		return nil, fmt.Errorf("%w: the lease expired", ErrConflict)
	}
	switch r.GetState() {
	case vmafxv1.JobState_JOB_STATE_RUNNING:
		_, err = tx.ExecContext(ctx, s.q(`UPDATE jobs SET progress = ?, lease_expires_at = ?, updated_at = ? WHERE id = ?`),
			r.GetProgress(), now.Add(lease).UnixNano(), now.UnixNano(), r.GetId())
	case vmafxv1.JobState_JOB_STATE_SUCCEEDED:
		b, merr := json.Marshal(r.GetScores())
		if merr != nil {
			return nil, merr
		}
		_, err = tx.ExecContext(ctx, s.q(`UPDATE jobs SET state = ?, scores = ?, lease_expires_at = NULL, updated_at = ? WHERE id = ?`),
			int32(vmafxv1.JobState_JOB_STATE_SUCCEEDED), string(b), now.UnixNano(), r.GetId())
	case vmafxv1.JobState_JOB_STATE_FAILED:
		_, err = tx.ExecContext(ctx, s.q(`UPDATE jobs SET state = ?, error = ?, lease_expires_at = NULL, updated_at = ? WHERE id = ?`),
			int32(vmafxv1.JobState_JOB_STATE_FAILED), r.GetError(), now.UnixNano(), r.GetId())
	default:
		return nil, fmt.Errorf("%w: a report is RUNNING, SUCCEEDED or FAILED, not %s", ErrConflict, r.GetState())
	}
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	return s.Get(ctx, tenant, r.GetId())
}

// RequeueExpired returns every RUNNING job whose lease has expired to
// PENDING (its node died or stalled) and says how many.
func (s *Store) RequeueExpired(ctx context.Context) (int64, error) {
	now := s.now().UnixNano()
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE jobs SET state = ?, node = '', lease_expires_at = NULL, progress = 0, updated_at = ?
		WHERE state = ? AND lease_expires_at <= ?`), int32(vmafxv1.JobState_JOB_STATE_PENDING), now, int32(vmafxv1.JobState_JOB_STATE_RUNNING), now)
	if err != nil {
		return 0, fmt.Errorf("controller: requeueing expired leases: %w", err)
	}
	return res.RowsAffected()
}

// CountByState counts every tenant's jobs by state.
func (s *Store) CountByState(ctx context.Context) (map[vmafxv1.JobState]int64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT state, COUNT(*) FROM jobs GROUP BY state`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[vmafxv1.JobState]int64{}
	for rows.Next() {
		var st int32
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		out[vmafxv1.JobState(st)] = n
	}
	return out, rows.Err()
}

func timestamp(nanos int64) *timestamppb.Timestamp { return timestamppb.New(time.Unix(0, nanos)) }
