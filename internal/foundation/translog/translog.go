// Package translog keeps an append-only, tamper-evident log in a
// service's SQL datastore (SQLite, or PostgreSQL shared by replicas): a
// Merkle tree over its entries with RFC 6962 hashing, stored as
// golang.org/x/mod/sumdb/tlog lays out its hashes; checkpoints signed as
// C2SP tlog-checkpoint notes (Ed25519, golang.org/x/mod/sumdb/note); and
// the tree and its entries served read-only as C2SP tlog-tiles. An
// auditor proves that an entry is in the log (inclusion) and that the log
// only grew (consistency) with x/mod's verifier, not with this package.
//
// Appends are serialized by a lock on the log's one head row (PostgreSQL:
// SELECT … FOR UPDATE; SQLite has one writer), so that replicas on one
// database extend one tree. A log is pruned from its start (Prune): the
// entries and the tree's lower hashes go, whole tiles at a time; the
// tree's shape, its checkpoints and every proof among what is left stay
// valid (C2SP tlog-tiles "Pruning").
package translog

import (
	"context"
	"crypto/ed25519"
	"database/sql"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/callerauth/callerauth/internal/foundation/datastore"
)

//go:embed migrations
var migrations embed.FS

// Migrations are the log's tables, one set per dialect (sqlite/,
// postgres/), applied by Open under their own version table
// (translog_schema_version). A datastore that holds the log alone can be
// opened with them (datastore.Open with the name "translog").
var Migrations = func() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err)
	}
	return sub
}()

// MaxEntryBytes bounds an entry: a tlog-tiles entry bundle prefixes each
// entry with its length as a big-endian uint16.
const MaxEntryBytes = 1<<16 - 1

// SQLitePageSize is the page size a log's SQLite file is best created
// with (datastore.Options.SQLitePageSize): an entry of a few kilobytes
// fills a 4 KiB page alone; 16 KiB pages hold several, and a transaction
// writes fewer of them (docs/decision-log.md, "What it costs").
const SQLitePageSize = 16384

// TileHeight is tlog-tiles' fixed tile height: 256 hashes a tile.
const TileHeight = 8

// Config is what Open needs.
type Config struct {
	// DB is the service's datastore; Open adds the log's tables.
	DB *datastore.DB
	// Origin is the checkpoint's first line, the log's identity (a
	// schema-less URL such as pdp.example.com/decisions).
	Origin string
	// Key signs checkpoints: an Ed25519 note signer key, as
	// note.GenerateKey writes it (PRIVATE+KEY+name+hash+key), named
	// Origin.
	Key string
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Entry is one appended entry: its bytes, which the tree hashes and
// tlog-tiles serves, and what a search asks of it.
type Entry struct {
	Data    []byte
	At      time.Time
	Caller  string
	System  string
	Tenant  string
	Reason  string
	Allowed bool
}

// Stored is an entry as the log holds it, with its index.
type Stored struct {
	Index int64
	Entry
}

// Checkpoint is a signed tree head.
type Checkpoint struct {
	Size int64
	Root tlog.Hash
	// Note is the signed note (C2SP tlog-checkpoint) as served.
	Note []byte
}

// Log is an open log.
type Log struct {
	db       *datastore.DB
	origin   string
	signer   note.Signer
	verifier note.Verifier
	vkey     string
	now      func() time.Time

	// appendStmts are Append's statements, prepared once (on SQLite's
	// one connection, on each PostgreSQL connection as it is first used).
	appendStmts struct{ size, entry, grow *sql.Stmt }

	// mu serializes Append, which keeps the frontier: the roots of the
	// complete subtrees of the tree of size frontierSize, all an append
	// at that size reads of the tree. A replica that finds the log
	// grown by another reads them from the store instead.
	mu           sync.Mutex
	frontierSize int64
	frontier     map[int64]tlog.Hash
}

// Open adds the log's tables to cfg.DB (once) and returns the log.
func Open(ctx context.Context, cfg Config) (*Log, error) {
	signer, verifier, vkey, err := keys(cfg.Key)
	switch {
	case cfg.DB == nil:
		return nil, errors.New("translog: no datastore")
	case err != nil:
		return nil, fmt.Errorf("translog: the checkpoint key: %w", err)
	case cfg.Origin == "" || strings.ContainsAny(cfg.Origin, "\n+ ") || !utf8Printable(cfg.Origin):
		return nil, fmt.Errorf("translog: origin %q: want a non-empty schema-less URL with no space, plus sign or newline (C2SP tlog-checkpoint)", cfg.Origin)
	case signer.Name() != cfg.Origin:
		return nil, fmt.Errorf("translog: the checkpoint key is named %q, the origin is %q: C2SP tlog-checkpoint wants them equal", signer.Name(), cfg.Origin)
	}
	if err := cfg.DB.Migrate(ctx, "translog", Migrations, datastore.Options{}); err != nil {
		return nil, fmt.Errorf("translog: %w", err)
	}
	l := &Log{db: cfg.DB, origin: cfg.Origin, signer: signer, verifier: verifier, vkey: vkey, now: cfg.Now, frontierSize: -1}
	if l.now == nil {
		l.now = time.Now
	}
	for _, s := range []struct {
		stmt  **sql.Stmt
		query string
	}{
		{&l.appendStmts.size, "SELECT size FROM translog_head WHERE id = 1" + l.forUpdate()},
		{&l.appendStmts.entry, "INSERT INTO translog_entries (idx, at, caller, system, tenant, reason, allowed, hashes, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"},
		{&l.appendStmts.grow, "UPDATE translog_head SET size = ? WHERE id = 1"},
	} {
		if *s.stmt, err = cfg.DB.PrepareContext(ctx, l.q(s.query)); err != nil {
			return nil, fmt.Errorf("translog: preparing %q: %w", s.query, err)
		}
	}
	return l, nil
}

func utf8Printable(s string) bool {
	for _, r := range s {
		if r < 0x21 || r == 0x7f || r == '\ufffd' {
			return false
		}
	}
	return true
}

// Origin is the log's checkpoint origin.
func (l *Log) Origin() string { return l.origin }

// VerifierKey is the checkpoint key's verifier key (name+hash+key), what
// an auditor is given to check checkpoints with note.NewVerifier.
func (l *Log) VerifierKey() string { return l.vkey }

// q writes a query's placeholders for the log's dialect.
func (l *Log) q(query string) string { return l.db.Rebind(query) }

// forUpdate locks the head row for the rest of a transaction (PostgreSQL;
// SQLite has one writer).
func (l *Log) forUpdate() string {
	if l.db.Dialect == datastore.Postgres {
		return " FOR UPDATE"
	}
	return ""
}

// Append adds entries at the end of the log in one transaction and
// returns the index of the first. An entry over MaxEntryBytes refuses the
// whole call, naming it; nothing of a failed call is kept.
func (l *Log) Append(ctx context.Context, entries ...Entry) (first int64, err error) {
	if len(entries) == 0 {
		return 0, errors.New("translog: nothing to append")
	}
	for i, e := range entries {
		if len(e.Data) == 0 || len(e.Data) > MaxEntryBytes {
			return 0, fmt.Errorf("translog: entry %d is %d bytes: want 1 to %d (tlog-tiles' uint16 length)", i, len(e.Data), MaxEntryBytes)
		}
	}
	if l.db.Dialect == datastore.SQLite {
		// A statement on a local SQLite file ends on its own (a lock wait
		// within busy_timeout); watching a context that can end costs the
		// driver a goroutine a statement, and database/sql one a
		// transaction: more than an entry's insert.
		ctx = context.WithoutCancel(ctx)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("translog: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	st := l.appendStmts
	var size int64
	if err := tx.StmtContext(ctx, st.size).QueryRowContext(ctx).Scan(&size); err != nil {
		return 0, fmt.Errorf("translog: reading the log's size: %w", err)
	}
	r := &hashReader{ctx: ctx, query: tx.QueryContext, q: l.q, cache: map[int64]tlog.Hash{}}
	if size == l.frontierSize {
		for i, h := range l.frontier {
			r.cache[i] = h
		}
	}
	entry := tx.StmtContext(ctx, st.entry)
	for i, e := range entries {
		n := size + int64(i)
		hs, err := tlog.StoredHashes(n, e.Data, r)
		if err != nil {
			return 0, fmt.Errorf("translog: hashing entry %d: %w", n, err)
		}
		base := tlog.StoredHashIndex(0, n)
		hashes := make([]byte, 0, len(hs)*tlog.HashSize)
		for j, h := range hs {
			r.cache[base+int64(j)] = h
			hashes = append(hashes, h[:]...)
		}
		allowed := 0
		if e.Allowed {
			allowed = 1
		}
		if _, err := entry.ExecContext(ctx, n, e.At.UnixMilli(), e.Caller, e.System, e.Tenant, e.Reason, allowed, hashes, e.Data); err != nil {
			return 0, fmt.Errorf("translog: storing entry %d: %w", n, err)
		}
	}
	end := size + int64(len(entries))
	if _, err := tx.StmtContext(ctx, st.grow).ExecContext(ctx, end); err != nil {
		return 0, fmt.Errorf("translog: %w", err)
	}
	if err := tx.Commit(); err != nil {
		l.frontierSize = -1
		return 0, fmt.Errorf("translog: %w", err)
	}
	l.frontierSize, l.frontier = -1, nil
	if f, ok := frontier(end, r.cache); ok {
		l.frontierSize, l.frontier = end, f
	}
	return size, nil
}

// frontier picks from hashes the roots of the complete subtrees of the
// tree of size size (one a set bit of size): all tlog.StoredHashes reads
// to append at that size. ok is false when one is not there.
func frontier(size int64, hashes map[int64]tlog.Hash) (map[int64]tlog.Hash, bool) {
	f := make(map[int64]tlog.Hash, 64)
	for level := 0; size>>level > 0; level++ {
		if size>>level&1 == 0 {
			continue
		}
		i := tlog.StoredHashIndex(level, size>>level-1)
		h, ok := hashes[i]
		if !ok {
			return nil, false
		}
		f[i] = h
	}
	return f, true
}

// errMissing: hashes asked for are not stored (pruned, beyond the end, or
// a damaged store).
var errMissing = errors.New("stored hashes not in the store (pruned, or the store is damaged)")

// hashReader reads stored hashes (tlog.HashReader) through query, a
// transaction's or the database's, the hashes of this append first. A
// stored hash is held by the entry whose append stored it (tlog's
// level-L hash of subtree k by entry (k+1)·2^L−1, at place L of its
// hashes); once that entry is pruned, a hash at level 8 or above is in
// translog_hashes, and one below is gone.
type hashReader struct {
	ctx   context.Context
	query func(context.Context, string, ...any) (*sql.Rows, error)
	q     func(string) string
	cache map[int64]tlog.Hash
}

// holder is the entry that stored the hash of stored-hash index x, and
// its place in the entry's hashes; ok is false for an index beyond any
// entry.
func holder(x int64) (entry int64, level int, ok bool) {
	level, k := tlog.SplitStoredHashIndex(x)
	if level > 62 || k >= 1<<(62-level) {
		return 0, 0, false
	}
	return (k+1)<<level - 1, level, true
}

func (r *hashReader) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	type place struct{ out, level int }
	byEntry := map[int64][]place{}
	var entries []int64
	for i, x := range indexes {
		if h, ok := r.cache[x]; ok {
			out[i] = h
			continue
		}
		n, level, ok := holder(x)
		if !ok {
			return nil, fmt.Errorf("%w: stored hash %d is beyond any entry", errMissing, x)
		}
		if _, seen := byEntry[n]; !seen {
			entries = append(entries, n)
		}
		byEntry[n] = append(byEntry[n], place{i, level})
	}
	found := map[int64]bool{}
	if err := r.rows(entries, "SELECT idx, hashes FROM translog_entries WHERE idx IN (?", func(n int64, hashes []byte) error {
		for _, p := range byEntry[n] {
			if len(hashes)%tlog.HashSize != 0 || (p.level+1)*tlog.HashSize > len(hashes) {
				return fmt.Errorf("entry %d holds %d bytes of hashes, not its level-%d hash: the store is damaged", n, len(hashes), p.level)
			}
			copy(out[p.out][:], hashes[p.level*tlog.HashSize:])
		}
		found[n] = true
		return nil
	}); err != nil {
		return nil, err
	}
	// What pruned entries held: the hashes kept apart.
	at := map[int64][]int{}
	var kept []int64
	for _, n := range entries {
		if found[n] {
			continue
		}
		for _, p := range byEntry[n] {
			x := indexes[p.out]
			if _, seen := at[x]; !seen {
				kept = append(kept, x)
			}
			at[x] = append(at[x], p.out)
		}
	}
	got := 0
	if err := r.rows(kept, "SELECT idx, hash FROM translog_hashes WHERE idx IN (?", func(x int64, h []byte) error {
		if len(h) != tlog.HashSize {
			return fmt.Errorf("stored hash %d is %d bytes: the store is damaged", x, len(h))
		}
		for _, i := range at[x] {
			copy(out[i][:], h)
		}
		got++
		return nil
	}); err != nil {
		return nil, err
	}
	if got != len(kept) {
		return nil, fmt.Errorf("%w: %d of %d", errMissing, len(kept)-got, len(indexes))
	}
	return out, nil
}

// rows runs query (ending "IN (?") over keys, 256 at a time, and gives
// each row's key and bytes to f.
func (r *hashReader) rows(keys []int64, query string, f func(int64, []byte) error) error {
	for start := 0; start < len(keys); start += 256 {
		part := keys[start:min(len(keys), start+256)]
		args := make([]any, len(part))
		for i, x := range part {
			args[i] = x
		}
		rows, err := r.query(r.ctx, r.q(query+strings.Repeat(",?", len(part)-1)+")"), args...)
		if err != nil {
			return err
		}
		if err := eachPair(rows, f); err != nil {
			return err
		}
	}
	return nil
}

// eachPair gives f each row's integer and bytes, and closes rows.
func eachPair(rows *sql.Rows, f func(int64, []byte) error) error {
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var x int64
		var b []byte
		if err := rows.Scan(&x, &b); err != nil {
			return err
		}
		if err := f(x, b); err != nil {
			return err
		}
	}
	return errors.Join(rows.Err(), rows.Close())
}

// reader reads the committed tree.
func (l *Log) reader(ctx context.Context) *hashReader {
	return &hashReader{ctx: ctx, query: l.db.QueryContext, q: l.q}
}

// Size is the number of entries committed.
func (l *Log) Size(ctx context.Context) (int64, error) {
	var size int64
	if err := l.db.QueryRowContext(ctx, "SELECT size FROM translog_head WHERE id = 1").Scan(&size); err != nil {
		return 0, fmt.Errorf("translog: %w", err)
	}
	return size, nil
}

// TreeHash is the root of the tree of the first size entries.
func (l *Log) TreeHash(ctx context.Context, size int64) (tlog.Hash, error) {
	h, err := tlog.TreeHash(size, l.reader(ctx))
	if err != nil {
		return tlog.Hash{}, fmt.Errorf("translog: the tree of size %d: %w", size, err)
	}
	return h, nil
}

// Sign signs a checkpoint of the log as it stands and stores it; when
// the latest stored checkpoint already has that size, it is returned.
func (l *Log) Sign(ctx context.Context) (Checkpoint, error) {
	size, err := l.Size(ctx)
	if err != nil {
		return Checkpoint{}, err
	}
	if c, err := l.Latest(ctx); err == nil && c.Size == size {
		return c, nil
	}
	root, err := l.TreeHash(ctx, size)
	if err != nil {
		return Checkpoint{}, err
	}
	text := CheckpointText(l.origin, size, root)
	signed, err := note.Sign(&note.Note{Text: text}, l.signer)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("translog: signing the checkpoint: %w", err)
	}
	if _, err := l.db.ExecContext(ctx, l.q("INSERT INTO translog_checkpoints (size, at, note) VALUES (?, ?, ?) ON CONFLICT (size) DO NOTHING"), size, l.now().UnixMilli(), signed); err != nil {
		return Checkpoint{}, fmt.Errorf("translog: storing the checkpoint: %w", err)
	}
	return Checkpoint{Size: size, Root: root, Note: signed}, nil
}

// CheckpointText is a checkpoint's note text (C2SP tlog-checkpoint): the
// origin, the tree size in decimal and the root hash in standard base64,
// each on a line of its own.
func CheckpointText(origin string, size int64, root tlog.Hash) string {
	return origin + "\n" + strconv.FormatInt(size, 10) + "\n" + base64.StdEncoding.EncodeToString(root[:]) + "\n"
}

// ParseCheckpoint reads a checkpoint's note text: its origin, size and
// root. Extension lines are refused (this log writes none).
func ParseCheckpoint(text string) (origin string, size int64, root tlog.Hash, err error) {
	lines := strings.Split(text, "\n")
	if len(lines) != 4 || lines[3] != "" || lines[0] == "" {
		return "", 0, root, errors.New("a checkpoint is three lines: origin, size, root hash")
	}
	size, err = strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 || strconv.FormatInt(size, 10) != lines[1] {
		return "", 0, root, fmt.Errorf("checkpoint size %q: want a decimal with no leading zero", lines[1])
	}
	h, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(h) != tlog.HashSize {
		return "", 0, root, fmt.Errorf("checkpoint root %q: want a base64 SHA-256 hash", lines[2])
	}
	copy(root[:], h)
	return lines[0], size, root, nil
}

// Latest is the latest stored checkpoint; sql.ErrNoRows wrapped when none
// was signed yet.
func (l *Log) Latest(ctx context.Context) (Checkpoint, error) {
	var c Checkpoint
	if err := l.db.QueryRowContext(ctx, "SELECT size, note FROM translog_checkpoints ORDER BY size DESC LIMIT 1").Scan(&c.Size, &c.Note); err != nil {
		return Checkpoint{}, fmt.Errorf("translog: the latest checkpoint: %w", err)
	}
	n, err := note.Open(c.Note, note.VerifierList(l.verifier))
	if err != nil {
		return Checkpoint{}, fmt.Errorf("translog: the stored checkpoint of size %d does not verify with the log's key: %w", c.Size, err)
	}
	origin, size, root, err := ParseCheckpoint(n.Text)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("translog: the stored checkpoint of size %d: %w", c.Size, err)
	}
	if origin != l.origin || size != c.Size {
		return Checkpoint{}, fmt.Errorf("translog: the stored checkpoint of size %d is of %s at size %d: not this log's", c.Size, origin, size)
	}
	c.Root = root
	return c, nil
}

// ProveEntry is the proof that entry index is in the tree of size
// entries (tlog.CheckRecord verifies it).
func (l *Log) ProveEntry(ctx context.Context, index, size int64) (tlog.RecordProof, error) {
	p, err := tlog.ProveRecord(size, index, l.reader(ctx))
	if err != nil {
		return nil, fmt.Errorf("translog: proving entry %d in the tree of size %d: %w", index, size, err)
	}
	return p, nil
}

// ProveTree is the proof that the tree of size old is a prefix of the
// tree of size size (tlog.CheckTree verifies it).
func (l *Log) ProveTree(ctx context.Context, size, old int64) (tlog.TreeProof, error) {
	p, err := tlog.ProveTree(size, old, l.reader(ctx))
	if err != nil {
		return nil, fmt.Errorf("translog: proving the tree of size %d a prefix of size %d: %w", old, size, err)
	}
	return p, nil
}

// Get is entry index; sql.ErrNoRows wrapped when it is not held (beyond
// the end, or pruned).
func (l *Log) Get(ctx context.Context, index int64) (Stored, error) {
	rows, err := l.db.QueryContext(ctx, l.q(selectEntries+" WHERE idx = ?"), index)
	if err != nil {
		return Stored{}, fmt.Errorf("translog: %w", err)
	}
	s, err := scanEntries(rows)
	if err != nil {
		return Stored{}, err
	}
	if len(s) == 0 {
		return Stored{}, fmt.Errorf("translog: entry %d: %w", index, sql.ErrNoRows)
	}
	return s[0], nil
}

const selectEntries = "SELECT idx, at, caller, system, tenant, reason, allowed, data FROM translog_entries"

func scanEntries(rows *sql.Rows) ([]Stored, error) {
	defer func() { _ = rows.Close() }()
	var out []Stored
	for rows.Next() {
		var s Stored
		var at int64
		var allowed int
		if err := rows.Scan(&s.Index, &at, &s.Caller, &s.System, &s.Tenant, &s.Reason, &allowed, &s.Data); err != nil {
			return nil, fmt.Errorf("translog: %w", err)
		}
		s.At, s.Allowed = time.UnixMilli(at).UTC(), allowed != 0
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("translog: %w", err)
	}
	return out, nil
}

// keys reads a note signer key (note.GenerateKey's first result:
// PRIVATE+KEY+name+hash+base64 of 0x01 and an Ed25519 seed) into its
// signer and its verifier key (name+hash+base64 of 0x01 and the public
// key), the one an auditor is given.
func keys(skey string) (note.Signer, note.Verifier, string, error) {
	signer, err := note.NewSigner(skey)
	if err != nil {
		return nil, nil, "", errors.New("not a note signer key (PRIVATE+KEY+name+hash+key, as callerauth decisions keygen writes it)")
	}
	// PRIVATE, KEY, the name (no +), the hash (hex), the key (base64,
	// which may hold +).
	f := strings.SplitN(skey, "+", 5)
	raw, err := base64.StdEncoding.DecodeString(f[len(f)-1])
	if len(f) != 5 || err != nil || len(raw) != 1+ed25519.SeedSize || raw[0] != 1 {
		return nil, nil, "", errors.New("not an Ed25519 note signer key")
	}
	pub := ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey)
	vkey, err := note.NewEd25519VerifierKey(signer.Name(), pub)
	if err != nil {
		return nil, nil, "", err
	}
	verifier, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, nil, "", err
	}
	return signer, verifier, vkey, nil
}

// CountByCaller is how many entries each caller holds in the log.
func (l *Log) CountByCaller(ctx context.Context) (map[string]int64, error) {
	rows, err := l.db.QueryContext(ctx, "SELECT caller, COUNT(*) FROM translog_entries GROUP BY caller")
	if err != nil {
		return nil, fmt.Errorf("translog: %w", err)
	}
	defer func() { _ = rows.Close() }()
	counts := map[string]int64{}
	for rows.Next() {
		var caller string
		var n int64
		if err := rows.Scan(&caller, &n); err != nil {
			return nil, fmt.Errorf("translog: %w", err)
		}
		counts[caller] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("translog: %w", err)
	}
	return counts, nil
}

// Query selects entries: each set field must match; After is a cursor
// (entries after that index; -1 for from the start).
type Query struct {
	Caller, System, Tenant, Reason string
	Allowed                        *bool
	Since, Until                   time.Time
	After                          int64
	// Limit bounds the entries returned: 1 to MaxSearch.
	Limit int
}

// MaxSearch bounds a search's page.
const MaxSearch = 1000

// Search returns the entries q selects, in index order.
func (l *Log) Search(ctx context.Context, q Query) ([]Stored, error) {
	if q.Limit <= 0 || q.Limit > MaxSearch {
		return nil, fmt.Errorf("translog: a search page of %d: want 1 to %d", q.Limit, MaxSearch)
	}
	where := []string{"idx > ?"}
	args := []any{q.After}
	for _, c := range []struct{ col, v string }{{"caller", q.Caller}, {"system", q.System}, {"tenant", q.Tenant}, {"reason", q.Reason}} {
		if c.v != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.v)
		}
	}
	if q.Allowed != nil {
		allowed := 0
		if *q.Allowed {
			allowed = 1
		}
		where = append(where, "allowed = ?")
		args = append(args, allowed)
	}
	if !q.Since.IsZero() {
		where = append(where, "at >= ?")
		args = append(args, q.Since.UnixMilli())
	}
	if !q.Until.IsZero() {
		where = append(where, "at < ?")
		args = append(args, q.Until.UnixMilli())
	}
	args = append(args, q.Limit)
	rows, err := l.db.QueryContext(ctx, l.q(selectEntries+" WHERE "+strings.Join(where, " AND ")+" ORDER BY idx LIMIT ?"), args...)
	if err != nil {
		return nil, fmt.Errorf("translog: %w", err)
	}
	return scanEntries(rows)
}
