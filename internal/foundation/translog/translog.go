// Package translog is an append-only, tamper-evident log of opaque
// entries in a directory of files: a Merkle tree over the entries with
// RFC 6962 hashing (golang.org/x/mod/sumdb/tlog), checkpoints signed as
// C2SP tlog-checkpoint notes (Ed25519), and the tree and its entries
// served read-only as C2SP tlog-tiles. It knows nothing of what an entry
// says: the layer above gives it bytes and gets back their index.
//
// # Layout
//
// Under Config.Dir:
//
//	segments/<index>.seg  the entries from index on, in checksummed groups,
//	                      zeroed ahead of the last
//	segments/<index>.idx  a full segment's index: where each of its entry
//	                      bundles starts, and its level-0 tiles
//	tile/<L>/<N>          a full hash tile above level 0 (C2SP tlog-tiles)
//	checkpoint            the latest signed checkpoint
//	witnessed-checkpoint  the newest checkpoint a quorum of witnesses
//	                      cosigned, with their cosignatures
//	pruned                the log's minimum index (Retention)
//
// # Appending and durability
//
// Add queues an entry and returns an IndexFuture. One goroutine (Run)
// takes whatever waits when its previous write returned — a group, up to
// Config.MaxGroup entries, with no timer — hashes it into the tree, and
// writes it to the newest segment in one write. Under DurableGroups (the
// default) the group is then fdatasync'd, and only then do its futures
// resolve: an entry whose future returned an index survives a crash of
// the process or of the machine. Under DurableCheckpoints a group's
// futures resolve once it is written (it survives the process, not the
// machine); entries may gather for Config.Linger first; and the segment
// is fdatasync'd before each checkpoint, so that a checkpoint never
// covers an entry that is not on disk.
//
// Each entry is written once, to its segment; entry bundles are served
// from there (the last 32 full ones, and the partial one, from memory).
// The tree's right edge — the roots of its complete subtrees and the
// partial tile of each level — stays in memory. A level-0 tile is written
// once, into its segment's index, when the segment is full
// (Config.SegmentEntries, a whole number of bundles); a tile above level 0
// once, into its file, when it is full, off the group's path. The next
// segment starts with the tree's right edge in its header.
//
// # Recovery
//
// Open rebuilds the log from its newest segment alone: its header's
// right edge, then each group whose checksum holds, in order. A torn tail
// (a group cut short or not matching its checksum, which no DurableGroups
// caller was told of) is cut, with the zeros written ahead. The rebuilt
// tree must extend the latest checkpoint (its root at the checkpoint's
// size equal to the checkpoint's), or Open refuses the directory. The
// full segments before it are trusted as their indexes say: their files
// were synced before the next segment began, and every tile read is
// checked against the tree's root.
//
// # Checkpoints and stopping
//
// Run signs a checkpoint every Config.SignEvery while the log grows
// (default DefaultSignEvery), when Sign asks, and once more when it
// stops: its context ending stops new entries (ErrStopped), appends what
// is queued (within Config.DrainTimeout), syncs the segment and signs the
// last checkpoint. Await waits for a checkpoint that covers an index. A
// write or a sync that fails stops the log taking entries (ErrBroken)
// until it is opened again.
//
// # Witnesses
//
// With Config.Witnesses, each checkpoint Run signs goes to every witness
// (C2SP tlog-witness add-checkpoint: the size the witness holds, the
// consistency proof from it, the checkpoint), one goroutine a witness
// that takes only the newest checkpoint when it is free: a slow or a
// down witness skips checkpoints and holds back nothing else. The
// cosignatures (C2SP tlog-cosignature, cosignature/v1) that verify are
// added to the checkpoint served while it is the latest; the newest
// checkpoint a quorum cosigned is kept (Witnessed). When Run stops, the
// last checkpoint goes to each witness once more, each request within
// Config.WitnessTimeout.
//
// # Pruning
//
// Prune (and Run, every Config.PruneEvery, by Config.Retention) moves the
// log's minimum index up by whole entry bundles, never past the latest
// checkpoint, and deletes the full segments wholly below it; the tiles
// above level 0 stay (a hash every 256 entries), so that every proof
// among what is left still verifies (C2SP tlog-tiles "Pruning").
package translog

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// MaxEntryBytes bounds an entry: a tlog-tiles entry bundle prefixes each
// entry with its length as a big-endian uint16.
const MaxEntryBytes = 1<<16 - 1

// TileHeight is tlog-tiles' fixed tile height: 256 hashes a tile.
const TileHeight = 8

// tileWidth is the hashes (or entries) a full tile holds.
const tileWidth = 1 << TileHeight

// Durability says when an entry's future resolves.
type Durability int

const (
	// DurableGroups resolves a future once its group is written and
	// fdatasync'd.
	DurableGroups Durability = iota
	// DurableCheckpoints resolves it once its group is written; the
	// segment is fdatasync'd before each checkpoint.
	DurableCheckpoints
)

func (d Durability) String() string {
	if d == DurableCheckpoints {
		return "checkpoints"
	}
	return "groups"
}

// The defaults Open fills in.
const (
	DefaultSignEvery      = time.Second
	DefaultMaxQueue       = 8192
	DefaultMaxGroup       = 4096
	DefaultSegmentEntries = 64 * tileWidth
	DefaultPruneEvery     = time.Minute
	DefaultDrainTimeout   = 10 * time.Second
)

// Config is what Open needs.
type Config struct {
	// Dir holds the log (created, mode 0700, when absent).
	Dir string
	// Key signs checkpoints: an Ed25519 note signer key
	// (PRIVATE+KEY+name+hash+key); its name is the log's origin, the
	// checkpoint's first line.
	Key string
	// Durability: DurableGroups (the zero value) or DurableCheckpoints.
	Durability Durability
	// SignEvery: how often a checkpoint is signed while the log grows.
	SignEvery time.Duration
	// MaxQueue bounds the entries waiting for a group: past it Add
	// refuses (ErrQueueFull).
	MaxQueue int
	// MaxGroup bounds the entries one write takes.
	MaxGroup int
	// Linger, under DurableCheckpoints, lets entries gather for up to
	// this long before a write, unless 256 wait: nobody waits for them,
	// and one write of many costs less than many of one. 0: at once.
	Linger time.Duration
	// SegmentEntries: the entries a segment holds before the next starts,
	// a multiple of 256.
	SegmentEntries int64
	// Retention bounds the log, applied every PruneEvery; zero: kept.
	Retention  Retention
	PruneEvery time.Duration
	// DrainTimeout bounds the last appends when Run stops.
	DrainTimeout time.Duration
	// Witnesses, when it names any, are given each checkpoint Run signs
	// (C2SP tlog-witness add-checkpoint, with a consistency proof from
	// the size each holds), off every entry's path; their cosignatures
	// are added to the checkpoint served while it is the latest, and the
	// newest checkpoint a quorum cosigned is kept (Witnessed, the file
	// witnessed). Each request is bounded by WitnessTimeout (default
	// DefaultWitnessTimeout), made with WitnessClient (nil: a default
	// client).
	Witnesses      WitnessPolicy
	WitnessTimeout time.Duration
	WitnessClient  *http.Client
	// Metrics prefixes the metrics' names (pdp_decision_log); required.
	Metrics string
	// Logger receives a line per failed write, checkpoint or prune.
	Logger *slog.Logger
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Retention bounds a log: entries appended longer ago than MaxAge go,
// and at most MaxEntries stay (a bundle at a time). Zero: that bound is
// off.
type Retention struct {
	MaxAge     time.Duration
	MaxEntries int64
}

// Checkpoint is a signed tree head.
type Checkpoint struct {
	Size int64
	Root tlog.Hash
	// Note is the signed note (C2SP tlog-checkpoint) as served: with
	// the witnesses' cosignatures once they came.
	Note []byte
	// Signed is when this process signed it (zero when read back).
	Signed time.Time
}

// Errors an IndexFuture gives.
var (
	// ErrQueueFull: the queue of entries waiting for a group is full.
	ErrQueueFull = errors.New("translog: the queue of entries waiting for the log is full")
	// ErrStopped: the log has stopped (or has not started) taking entries.
	ErrStopped = errors.New("translog: the log is not taking entries")
	// ErrBroken: a write or a sync failed; the log takes no more entries
	// until it is opened again (what was written is recovered then).
	ErrBroken = errors.New("translog: a write to the log failed; it takes no more entries until it is opened again")
	// ErrNotHeld: an entry or a tile the log does not hold (beyond its
	// size, or pruned).
	ErrNotHeld = errors.New("translog: not held (beyond the log's size, or pruned)")
)

// Log is an open log. Run it.
type Log struct {
	cfg      Config
	dir      string
	origin   string
	signer   note.Signer
	verifier note.Verifier
	vkey     string
	m        *metrics
	// witnesses push checkpoints to Config.Witnesses (nil: none).
	witnesses *witnessing

	// queue is what waits for Run.
	qmu    sync.Mutex
	queue  []pending
	taking bool // Run takes entries
	broken bool
	// lingering: Run lets entries gather (Config.Linger) and takes them
	// when its timer fires.
	lingering bool
	wake      chan struct{}
	signReq   chan chan signResult
	pruneReq  chan chan pruneResult

	// mu guards what readers see: the published tree (size, edge,
	// partial tiles and bundle, tiles on their way to their files) and
	// the latest checkpoint.
	mu     sync.RWMutex
	t      tree
	minIdx int64
	latest Checkpoint
	grown  chan struct{} // closed and replaced when size grows
	signed chan struct{} // closed and replaced at each checkpoint
	// full are tiles that filled, served from here until their files
	// are written (level 0: until the segment's index is).
	full map[tileKey][]byte
	// sealed are the full segments, oldest first; active is the one
	// being written, as published.
	sealed []sealedSeg
	active activeSeg

	// Run's own state.
	running  bool // under qmu
	w        tree // the tree as written, ahead of t until published
	seg      *segment
	written  int64 // entries written to the segment (>= published size)
	synced   int64 // entries fdatasync'd
	files    *tileWriter
	batch    []pending
	frameBuf []byte
	fullBuf  []fullTile
	locs     []bundleLoc // where the active segment's bundles start

	bundleCache bundleCache
}

// activeSeg is the segment being written, as readers see it.
type activeSeg struct {
	first int64
	path  string
	locs  []bundleLoc
}

// pending is one queued entry.
type pending struct {
	data []byte
	g    *group
	at   int // its place in the group's results
}

// group is entries added together (AddAll), resolved together.
type group struct {
	done  chan struct{}
	first []int64 // each entry's index
	err   []error
	// remaining is the entries Run has still to resolve (Run's alone
	// once queued).
	remaining int
}

// IndexFuture is an entry's index once it is durable (Durability), or
// why it is not in the log.
type IndexFuture func() (int64, error)

// Open opens the log in cfg.Dir, recovering it from its segment.
func Open(cfg Config) (*Log, error) {
	signer, verifier, vkey, err := Keys(cfg.Key)
	if err != nil {
		return nil, fmt.Errorf("translog: the checkpoint key: %w", err)
	}
	if err := CheckOrigin(signer.Name()); err != nil {
		return nil, fmt.Errorf("translog: %w", err)
	}
	switch {
	case cfg.Dir == "":
		return nil, errors.New("translog: no directory")
	case cfg.Metrics == "":
		return nil, errors.New("translog: no metrics prefix")
	case cfg.Durability != DurableGroups && cfg.Durability != DurableCheckpoints:
		return nil, fmt.Errorf("translog: durability %d", cfg.Durability)
	case cfg.SignEvery < 0, cfg.Linger < 0, cfg.MaxQueue < 0, cfg.MaxGroup < 0, cfg.SegmentEntries < 0, cfg.PruneEvery < 0, cfg.DrainTimeout < 0, cfg.WitnessTimeout < 0:
		return nil, errors.New("translog: a negative bound")
	case cfg.SegmentEntries%tileWidth != 0:
		return nil, fmt.Errorf("translog: %d entries a segment: want a multiple of %d", cfg.SegmentEntries, tileWidth)
	case cfg.Retention.MaxAge < 0 || cfg.Retention.MaxEntries < 0:
		return nil, fmt.Errorf("translog: retention %+v: want non-negative bounds", cfg.Retention)
	}
	fill := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	fill(&cfg.SignEvery, DefaultSignEvery)
	fill(&cfg.PruneEvery, DefaultPruneEvery)
	fill(&cfg.DrainTimeout, DefaultDrainTimeout)
	fill(&cfg.WitnessTimeout, DefaultWitnessTimeout)
	if err := cfg.Witnesses.check(); err != nil {
		return nil, fmt.Errorf("translog: the witnesses: %w", err)
	}
	if cfg.MaxQueue == 0 {
		cfg.MaxQueue = DefaultMaxQueue
	}
	if cfg.MaxGroup == 0 {
		cfg.MaxGroup = DefaultMaxGroup
	}
	if cfg.SegmentEntries == 0 {
		cfg.SegmentEntries = DefaultSegmentEntries
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("translog: %w", err)
	}
	l := &Log{cfg: cfg, dir: dir, origin: signer.Name(), signer: signer, verifier: verifier, vkey: vkey,
		m: newMetrics(cfg.Metrics), wake: make(chan struct{}, 1), signReq: make(chan chan signResult), pruneReq: make(chan chan pruneResult),
		grown: make(chan struct{}), signed: make(chan struct{}), full: map[tileKey][]byte{}}
	if err := l.recover(); err != nil {
		if l.seg != nil {
			_ = l.seg.f.Close()
		}
		return nil, fmt.Errorf("translog: %s: %w", dir, err)
	}
	if len(cfg.Witnesses.Witnesses) > 0 {
		l.witnesses = newWitnessing(l)
		if err := l.witnesses.loadWitnessed(); err != nil {
			_ = l.seg.f.Close()
			return nil, fmt.Errorf("translog: %s: %w", dir, err)
		}
	}
	l.m.minIndex.Set(float64(l.minIdx))
	l.m.checkpointSize.Set(float64(l.latest.Size))
	l.taking = true // queued until Run takes them
	return l, nil
}

// CheckOrigin refuses an origin C2SP tlog-checkpoint does not allow: it
// is a non-empty schema-less URL, with no space, plus sign or newline.
func CheckOrigin(origin string) error {
	if origin == "" || strings.ContainsAny(origin, "\n+ ") {
		return fmt.Errorf("origin %q: want a non-empty schema-less URL with no space, plus sign or newline (C2SP tlog-checkpoint)", origin)
	}
	for _, r := range origin {
		if r < 0x21 || r == 0x7f || r == '\ufffd' {
			return fmt.Errorf("origin %q: want printable characters only", origin)
		}
	}
	return nil
}

// Origin is the log's checkpoint origin.
func (l *Log) Origin() string { return l.origin }

// VerifierKey is the checkpoint key's verifier key (name+hash+key), what
// an auditor is given to check checkpoints with note.NewVerifier.
func (l *Log) VerifierKey() string { return l.vkey }

// Verifier checks the log's checkpoints.
func (l *Log) Verifier() note.Verifier { return l.verifier }

// Dir is the log's directory.
func (l *Log) Dir() string { return l.dir }

// Size is the number of entries published: durable as Config.Durability
// says, and readable.
func (l *Log) Size() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.t.size
}

// MinIndex is the log's minimum index: entries below it are pruned.
func (l *Log) MinIndex() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.minIdx
}

// Latest is the latest signed checkpoint; ok is false while none is.
func (l *Log) Latest() (c Checkpoint, ok bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.latest, l.latest.Note != nil
}

// Add queues data (1 to MaxEntryBytes; the log keeps the slice, which
// the caller must not change) and returns its future. The log takes
// entries from Open until Run stops; they wait for Run.
func (l *Log) Add(data []byte) IndexFuture {
	g := l.AddAll([][]byte{data})
	return func() (int64, error) { return g.Wait(context.Background(), 0) }
}

// Group is entries added together (AddAll).
type Group struct{ g *group }

// AddAll queues entries together, so that one write takes them all when
// the group has room.
func (l *Log) AddAll(entries [][]byte) Group {
	g := &group{done: make(chan struct{}), first: make([]int64, len(entries)), err: make([]error, len(entries))}
	queued := 0
	l.qmu.Lock()
	for i, e := range entries {
		switch {
		case len(e) == 0 || len(e) > MaxEntryBytes:
			g.err[i] = fmt.Errorf("translog: an entry of %d bytes: want 1 to %d", len(e), MaxEntryBytes)
		case l.broken:
			g.err[i] = ErrBroken
		case !l.taking:
			g.err[i] = ErrStopped
		case len(l.queue) >= l.cfg.MaxQueue:
			g.err[i] = ErrQueueFull
		}
		if g.err[i] != nil {
			l.m.dropped.Inc()
			continue
		}
		l.queue = append(l.queue, pending{e, g, i})
		queued++
	}
	g.remaining = queued // before Run can take any: it reads it under qmu too
	l.m.queued.Set(float64(len(l.queue)))
	// A lingering Run takes these when its timer fires: it need not be
	// woken for each, only once enough wait.
	wake := queued > 0 && (!l.lingering || len(l.queue) >= tileWidth)
	l.qmu.Unlock()
	if queued == 0 {
		close(g.done)
		return Group{g}
	}
	if wake {
		l.poke()
	}
	return Group{g}
}

// Wait waits for the group (or for ctx): entry i's index, or why it is
// not in the log.
func (g Group) Wait(ctx context.Context, i int) (int64, error) {
	select {
	case <-g.g.done:
		return g.g.first[i], g.g.err[i]
	case <-ctx.Done():
		return 0, fmt.Errorf("translog: waiting for the entry: %w", ctx.Err())
	}
}

// Done is closed once every entry of the group is resolved.
func (g Group) Done() <-chan struct{} { return g.g.done }

// Results are each entry's index or error; read them after Done.
func (g Group) Results() ([]int64, []error) { return g.g.first, g.g.err }

// Ready reports whether the log takes entries: Run runs and no write
// failed.
func (l *Log) Ready() error {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	switch {
	case l.broken:
		return ErrBroken
	case !l.taking || !l.running:
		return ErrStopped
	}
	return nil
}

// Await waits until a checkpoint covers index (its size is above it)
// and returns it.
func (l *Log) Await(ctx context.Context, index int64) (Checkpoint, error) {
	for {
		l.mu.RLock()
		c, signed := l.latest, l.signed
		l.mu.RUnlock()
		if c.Size > index {
			return c, nil
		}
		select {
		case <-signed:
		case <-ctx.Done():
			return Checkpoint{}, fmt.Errorf("translog: waiting for a checkpoint of entry %d: %w", index, ctx.Err())
		}
	}
}

// Grown returns a channel closed once the log's size is above size.
func (l *Log) Grown(size int64) <-chan struct{} {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.t.size > size {
		c := make(chan struct{})
		close(c)
		return c
	}
	return l.grown
}

// Keys reads a note signer key (note.GenerateKey's first result:
// PRIVATE+KEY+name+hash+base64 of 0x01 and an Ed25519 seed) into its
// signer, its verifier and its verifier key (name+hash+base64 of 0x01
// and the public key), the one an auditor is given.
func Keys(skey string) (note.Signer, note.Verifier, string, error) {
	signer, err := note.NewSigner(skey)
	if err != nil {
		return nil, nil, "", errors.New("not a note signer key (PRIVATE+KEY+name+hash+key, as callerauth decisions checkpoint-key writes it)")
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

// mkdirs makes the log's directories.
func (l *Log) mkdirs() error {
	for _, d := range []string{l.dir, filepath.Join(l.dir, "segments"), filepath.Join(l.dir, "tile")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	return nil
}
