package controller

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"database/sql"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/internal/foundation/datastore"
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

// ErrConflict is a report or a cancellation the job's state or lease does
// not allow.
var ErrConflict = errors.New("controller: the job does not allow this")

// ErrBadPageToken is a page token this tenant was not given.
var ErrBadPageToken = errors.New("page_token: not a token this tenant was given by ListJobs")

const columns = `id, tenant, reference, distorted, metrics, state, node, lease_expires_at, progress, scores, error, submitted_by, created_at, updated_at, reason, attempts`

func scan(row interface{ Scan(...any) error }) (*vmafxv1.Job, error) {
	var (
		j                vmafxv1.Job
		spec             vmafxv1.JobSpec
		metrics, scores  string
		state            int32
		lease            sql.NullInt64
		created, updated int64
	)
	if err := row.Scan(&j.Id, &j.Tenant, &spec.Reference, &spec.Distorted, &metrics, &state, &j.Node, &lease, &j.Progress, &scores, &j.Error, &j.SubmittedBy,
		&created, &updated, &j.Reason, &j.Attempts); err != nil {
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

// ErrPendingQuota is a submission refused because the tenant already has
// its quota of unfinished (PENDING or RUNNING) jobs.
var ErrPendingQuota = errors.New("controller: the tenant's quota of pending jobs is full")

// ErrJobsQuota is a submission refused because the tenant already has as
// many jobs stored, in any state, as it may.
var ErrJobsQuota = errors.New("controller: the tenant's quota of stored jobs is full")

// Submit stores a new PENDING job. With a requestID, a job of the tenant
// already stored under it is returned instead (idempotent submission: a
// retry is never refused by the quota). maxPending (0: none) bounds the
// tenant's unfinished jobs, PENDING or RUNNING — so its PENDING jobs
// whatever way they came back to PENDING: a submission beyond is
// ErrPendingQuota; maxJobs
// (0: none) its jobs in any state (finished ones until they expire): one
// beyond is ErrJobsQuota. The count
// and the insert are one transaction, serialised per tenant (SQLite's one
// writer; an advisory lock on PostgreSQL), so replicas cannot overshoot.
func (s *Store) Submit(ctx context.Context, tenant, by, requestID string, spec *vmafxv1.JobSpec, maxPending, maxJobs int) (*vmafxv1.Job, error) {
	now := s.now().UnixNano()
	id := uuid.NewString()
	var rid any
	if requestID != "" {
		rid = requestID
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("controller: storing a job: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if s.db.Dialect == datastore.Postgres {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 1))`, tenant); err != nil {
			return nil, fmt.Errorf("controller: storing a job: %w", err)
		}
	}
	if requestID != "" {
		j, err := scan(tx.QueryRowContext(ctx, s.q(`SELECT `+columns+` FROM jobs WHERE tenant = ? AND request_id = ?`), tenant, requestID))
		switch {
		case err == nil:
			return j, nil
		case !errors.Is(err, sql.ErrNoRows):
			return nil, fmt.Errorf("controller: reading the job of request %q: %w", requestID, err)
		}
	}
	if maxPending > 0 || maxJobs > 0 {
		// Counters kept by the schema's triggers (migrations 00006,
		// 00007): the check costs the same however many jobs the tenant
		// has. The pending quota counts the unfinished jobs, PENDING or
		// RUNNING: a claim, a lapsed lease, a give-back or a restart moves
		// a job between the two, never past the quota; only this adds one.
		var jobs, unfinished int
		err := tx.QueryRowContext(ctx, s.q(`SELECT jobs, unfinished FROM tenant_jobs WHERE tenant = ?`), tenant).Scan(&jobs, &unfinished)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("controller: counting the tenant's jobs: %w", err)
		}
		if maxPending > 0 && unfinished >= maxPending {
			return nil, ErrPendingQuota
		}
		if maxJobs > 0 && jobs >= maxJobs {
			return nil, ErrJobsQuota
		}
	}
	// SQLite numbers jobs itself (one writer); PostgreSQL's seq is an
	// identity column, safe under concurrent replicas.
	seq := "(SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs)"
	if s.db.Dialect == datastore.Postgres {
		seq = "DEFAULT"
	}
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO jobs (id, seq, tenant, reference, distorted, metrics, state, submitted_by, created_at, updated_at, request_id, queued_at)
		VALUES (?, `+seq+`, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		id, tenant, spec.GetReference(), spec.GetDistorted(), strings.Join(spec.GetMetrics(), ","), int32(vmafxv1.JobState_JOB_STATE_PENDING), by, now, now, rid, now); err != nil {
		return nil, fmt.Errorf("controller: storing a job: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("controller: storing a job: %w", err)
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

// pageTokenPrefix marks a page token: a cursor naming the tenant's own
// last listed job, which the tenant already knows. It says nothing about
// other tenants' jobs (a global sequence number would count them).
const pageTokenPrefix = "c1."

func pageToken(id string) string {
	return pageTokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(id))
}

// List pages through tenant's jobs, newest first: at most size jobs and,
// past the first, at most maxBytes of them encoded. The page token names the
// last job of the previous page.
func (s *Store) List(ctx context.Context, tenant string, state vmafxv1.JobState, size, maxBytes int, token string) ([]*vmafxv1.Job, string, error) {
	below := int64(1) << 62
	if token != "" {
		b64, ok := strings.CutPrefix(token, pageTokenPrefix)
		id, err := base64.RawURLEncoding.DecodeString(b64)
		if !ok || err != nil || len(id) == 0 || len(id) > 64 {
			return nil, "", ErrBadPageToken
		}
		err = s.db.QueryRowContext(ctx, s.q(`SELECT seq FROM jobs WHERE id = ? AND tenant = ?`), string(id), tenant).Scan(&below)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, "", ErrBadPageToken
		}
		if err != nil {
			return nil, "", err
		}
	}
	q := `SELECT ` + columns + ` FROM jobs WHERE tenant = ? AND seq < ?`
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
	bytes, more := 0, false
	for rows.Next() {
		j, err := scan(rows)
		if err != nil {
			return nil, "", err
		}
		bytes += proto.Size(j)
		if len(jobs) == size || (len(jobs) > 0 && bytes > maxBytes) {
			more = true
			break
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	next := ""
	if more {
		next = pageToken(jobs[len(jobs)-1].GetId())
	}
	return jobs, next, nil
}

// newLeaseID is an unguessable lease identifier: 128 random bits.
func newLeaseID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b)
}

// Claim leases the first queued PENDING job of tenant to node until
// now+lease, counting an attempt, and returns it with the lease ID every
// report of this claim must carry. It returns nil when nothing is pending.
//
// key (optional) makes the claim idempotent: when a claim of tenant with
// that key still holds its lease, Claim returns that job and lease again
// and replayed is true — the retry of a claim whose answer was lost,
// whatever node name it gives. The key is the caller's (ClaimJob scopes it
// by the token that sent it), not the node name's. Concurrent claims with
// one key lease at most one job, and each returns it.
func (s *Store) Claim(ctx context.Context, tenant, node, key string, lease time.Duration) (j *vmafxv1.Job, leaseID string, replayed bool, err error) {
	now := s.now()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, "", false, err
	}
	defer func() { _ = tx.Rollback() }()
	var id string
	if key != "" {
		// Claims under one key take turns (SQLite has one writer; on
		// PostgreSQL a transaction-scoped advisory lock of the key): the
		// second finds the first's claim and returns it, so concurrent
		// retries lease one job and all name it.
		if s.db.Dialect == datastore.Postgres {
			if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, tenant+"\x1f"+key); err != nil {
				return nil, "", false, err
			}
		}
		err := tx.QueryRowContext(ctx, s.q(`SELECT id, lease_id FROM jobs WHERE tenant = ? AND claim_key = ? AND state = ? AND lease_expires_at > ?`),
			tenant, key, int32(vmafxv1.JobState_JOB_STATE_RUNNING), now.UnixNano()).Scan(&id, &leaseID)
		switch {
		case err == nil:
			if err := tx.Commit(); err != nil {
				return nil, "", false, err
			}
			j, err := s.Get(ctx, tenant, id)
			return j, leaseID, true, err
		case !errors.Is(err, sql.ErrNoRows):
			return nil, "", false, err
		}
		// A claim that held this key and lost its lease (the expiry pass
		// has not run yet) no longer holds it: the key is free again.
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE jobs SET claim_key = NULL WHERE tenant = ? AND claim_key = ?`), tenant, key); err != nil {
			return nil, "", false, err
		}
	}
	err = tx.QueryRowContext(ctx, s.q(`SELECT id FROM jobs WHERE tenant = ? AND state = ? ORDER BY queued_at, seq LIMIT 1`+s.lockRow(true)),
		tenant, int32(vmafxv1.JobState_JOB_STATE_PENDING)).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, "", false, nil
	}
	if err != nil {
		return nil, "", false, err
	}
	leaseID = newLeaseID()
	claimKey := sql.NullString{String: key, Valid: key != ""}
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE jobs SET state = ?, node = ?, lease_id = ?, claim_key = ?, attempts = attempts + 1, lease_expires_at = ?, progress = 0, updated_at = ? WHERE id = ?`),
		int32(vmafxv1.JobState_JOB_STATE_RUNNING), node, leaseID, claimKey, now.Add(lease).UnixNano(), now.UnixNano(), id); err != nil {
		return nil, "", false, err
	}
	if err := tx.Commit(); err != nil {
		return nil, "", false, err
	}
	j, err = s.Get(ctx, tenant, id)
	return j, leaseID, false, err
}

// Report applies a node's report to a job of tenant whose current lease
// the report names: RUNNING renews the lease and records progress;
// SUCCEEDED stores the scores; FAILED the error and reason; PENDING gives
// the job back (queued again, or FAILED attempts_exhausted after
// maxAttempts claims). A SUCCEEDED or FAILED report repeated under the
// lease that ended the job returns the job as it ended, replayed, and
// changes nothing. Anything else is ErrConflict.
func (s *Store) Report(ctx context.Context, tenant string, r *vmafxv1.ReportJobRequest, lease time.Duration, maxAttempts int) (j *vmafxv1.Job, replayed bool, err error) {
	now := s.now()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = tx.Rollback() }()
	var (
		state           int32
		holder, leaseID string
		metrics         string
		expires         sql.NullInt64
		attempts        int
	)
	err = tx.QueryRowContext(ctx, s.q(`SELECT state, node, lease_id, lease_expires_at, metrics, attempts FROM jobs WHERE id = ? AND tenant = ?`+s.lockRow(false)),
		r.GetId(), tenant).Scan(&state, &holder, &leaseID, &expires, &metrics, &attempts)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, ErrNotFound
	}
	if err != nil {
		return nil, false, err
	}
	sameLease := subtle.ConstantTimeCompare([]byte(leaseID), []byte(r.GetLeaseId())) == 1
	switch st := vmafxv1.JobState(state); {
	case sameLease && r.GetLeaseId() != "" && st == r.GetState() && (st == vmafxv1.JobState_JOB_STATE_SUCCEEDED || st == vmafxv1.JobState_JOB_STATE_FAILED):
		// The outcome this lease already reported, sent again after a lost
		// answer: the job as it ended, nothing changed.
		_ = tx.Rollback()
		j, err := s.Get(ctx, tenant, r.GetId())
		return j, true, err
	case st != vmafxv1.JobState_JOB_STATE_RUNNING:
		return nil, false, fmt.Errorf("%w: it is %s, not RUNNING", ErrConflict, st)
	case !sameLease:
		return nil, false, fmt.Errorf("%w: lease_id is not the job's current lease (another claim holds it, or this one was lost)", ErrConflict)
	case !expires.Valid || now.UnixNano() >= expires.Int64:
		return nil, false, fmt.Errorf("%w: the lease expired", ErrConflict)
	}
	switch r.GetState() {
	case vmafxv1.JobState_JOB_STATE_RUNNING:
		_, err = tx.ExecContext(ctx, s.q(`UPDATE jobs SET progress = ?, lease_expires_at = ?, updated_at = ? WHERE id = ?`),
			r.GetProgress(), now.Add(lease).UnixNano(), now.UnixNano(), r.GetId())
	case vmafxv1.JobState_JOB_STATE_SUCCEEDED:
		if err := ScoresMatch(r.GetScores(), strings.Split(metrics, ",")); err != nil {
			return nil, false, err
		}
		b, merr := json.Marshal(r.GetScores())
		if merr != nil {
			return nil, false, merr
		}
		_, err = tx.ExecContext(ctx, s.q(`UPDATE jobs SET state = ?, scores = ?, claim_key = NULL, lease_expires_at = NULL, updated_at = ? WHERE id = ?`),
			int32(vmafxv1.JobState_JOB_STATE_SUCCEEDED), string(b), now.UnixNano(), r.GetId())
	case vmafxv1.JobState_JOB_STATE_FAILED:
		_, err = tx.ExecContext(ctx, s.q(`UPDATE jobs SET state = ?, error = ?, reason = ?, claim_key = NULL, lease_expires_at = NULL, updated_at = ? WHERE id = ?`),
			int32(vmafxv1.JobState_JOB_STATE_FAILED), r.GetError(), r.GetReason(), now.UnixNano(), r.GetId())
	case vmafxv1.JobState_JOB_STATE_PENDING:
		msg := "given back by " + holder
		if r.GetError() != "" {
			msg += ": " + r.GetError()
		}
		err = s.requeue(ctx, tx, r.GetId(), attempts, maxAttempts, msg, now)
	default:
		return nil, false, fmt.Errorf("%w: a report is RUNNING, SUCCEEDED, FAILED or PENDING (given back), not %s", ErrConflict, r.GetState())
	}
	if err != nil {
		return nil, false, err
	}
	if err := tx.Commit(); err != nil {
		return nil, false, err
	}
	j, err = s.Get(ctx, tenant, r.GetId())
	return j, false, err
}

// ReasonAttemptsExhausted is the reason of a job failed because it was
// claimed --max-attempts times without an outcome.
const ReasonAttemptsExhausted = "attempts_exhausted"

// ReasonCancelled is the reason of a cancelled job.
const ReasonCancelled = "cancelled"

// requeue ends a claim without an outcome: the job is queued again behind
// the tenant's other pending jobs, or, after maxAttempts claims, FAILED
// attempts_exhausted; lastError says why the claim ended.
func (s *Store) requeue(ctx context.Context, tx *sql.Tx, id string, attempts, maxAttempts int, lastError string, now time.Time) error {
	if attempts >= maxAttempts {
		_, err := tx.ExecContext(ctx, s.q(`UPDATE jobs SET state = ?, reason = ?, error = ?, lease_id = '', claim_key = NULL, lease_expires_at = NULL, updated_at = ? WHERE id = ?`),
			int32(vmafxv1.JobState_JOB_STATE_FAILED), ReasonAttemptsExhausted, fmt.Sprintf("claimed %d times without an outcome; the last: %s", attempts, lastError), now.UnixNano(), id)
		return err
	}
	_, err := tx.ExecContext(ctx, s.q(`UPDATE jobs SET state = ?, error = ?, lease_id = '', claim_key = NULL, lease_expires_at = NULL, progress = 0, queued_at = ?, updated_at = ? WHERE id = ?`),
		int32(vmafxv1.JobState_JOB_STATE_PENDING), lastError, now.UnixNano(), now.UnixNano(), id)
	return err
}

// Cancel cancels a PENDING or RUNNING job of tenant. A CANCELLED job is
// returned as it is; a finished one is ErrConflict.
func (s *Store) Cancel(ctx context.Context, tenant, id string) (*vmafxv1.Job, error) {
	now := s.now().UnixNano()
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE jobs SET state = ?, reason = ?, lease_id = '', claim_key = NULL, lease_expires_at = NULL, updated_at = ? WHERE id = ? AND tenant = ? AND state IN (?, ?)`),
		int32(vmafxv1.JobState_JOB_STATE_CANCELLED), ReasonCancelled, now, id, tenant, int32(vmafxv1.JobState_JOB_STATE_PENDING), int32(vmafxv1.JobState_JOB_STATE_RUNNING))
	if err != nil {
		return nil, err
	}
	j, err := s.Get(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if n, _ := res.RowsAffected(); n == 0 && j.GetState() != vmafxv1.JobState_JOB_STATE_CANCELLED {
		return nil, fmt.Errorf("%w: it is %s; only a PENDING or RUNNING job can be cancelled", ErrConflict, j.GetState())
	}
	return j, nil
}

// RequeueExpired ends every claim whose lease has expired (its node died,
// stalled or lost its way): the job is queued again behind the tenant's
// other pending jobs, or FAILED attempts_exhausted after maxAttempts
// claims. It says how many of each.
func (s *Store) RequeueExpired(ctx context.Context, maxAttempts int) (requeued, exhausted int64, err error) {
	now := s.now()
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT id, node, attempts FROM jobs WHERE state = ? AND lease_expires_at <= ? LIMIT 1000`),
		int32(vmafxv1.JobState_JOB_STATE_RUNNING), now.UnixNano())
	if err != nil {
		return 0, 0, fmt.Errorf("controller: finding expired leases: %w", err)
	}
	type lapsed struct {
		id, node string
		attempts int
	}
	var found []lapsed
	for rows.Next() {
		var l lapsed
		if err := rows.Scan(&l.id, &l.node, &l.attempts); err != nil {
			_ = rows.Close()
			return 0, 0, err
		}
		found = append(found, l)
	}
	_ = rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	for _, l := range found {
		n, err := s.expire(ctx, l.id, l.node, l.attempts, maxAttempts, now)
		if err != nil {
			return requeued, exhausted, fmt.Errorf("controller: requeueing an expired lease: %w", err)
		}
		switch {
		case n == 0:
		case l.attempts >= maxAttempts:
			exhausted++
		default:
			requeued++
		}
	}
	return requeued, exhausted, nil
}

// expire ends one lapsed claim, unless a report renewed it meanwhile.
func (s *Store) expire(ctx context.Context, id, node string, attempts, maxAttempts int, now time.Time) (int, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	var still string
	err = tx.QueryRowContext(ctx, s.q(`SELECT id FROM jobs WHERE id = ? AND state = ? AND attempts = ? AND lease_expires_at <= ?`+s.lockRow(false)),
		id, int32(vmafxv1.JobState_JOB_STATE_RUNNING), attempts, now.UnixNano()).Scan(&still)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil // a report renewed it, or another replica ended it
	}
	if err != nil {
		return 0, err
	}
	if err := s.requeue(ctx, tx, id, attempts, maxAttempts, "the lease of "+node+" expired", now); err != nil {
		return 0, err
	}
	return 1, tx.Commit()
}

// DeleteFinished deletes at most limit jobs that finished (SUCCEEDED,
// FAILED, CANCELLED) before before, oldest first, and returns how many.
func (s *Store) DeleteFinished(ctx context.Context, before time.Time, limit int) (int64, error) {
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE state IN (?, ?, ?) AND updated_at < ? ORDER BY updated_at LIMIT ?)`),
		int32(vmafxv1.JobState_JOB_STATE_SUCCEEDED), int32(vmafxv1.JobState_JOB_STATE_FAILED), int32(vmafxv1.JobState_JOB_STATE_CANCELLED), before.UnixNano(), limit)
	if err != nil {
		return 0, fmt.Errorf("controller: deleting finished jobs: %w", err)
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
