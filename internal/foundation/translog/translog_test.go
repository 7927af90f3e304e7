package translog

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// testKey is a checkpoint key named origin.
func testKey(t testing.TB, origin string) string {
	skey, _, err := note.GenerateKey(rand.Reader, origin)
	if err != nil {
		t.Fatal(err)
	}
	return skey
}

// entryData is entry i's bytes in the tests: of varied length.
func entryData(i int64) []byte {
	return fmt.Appendf(nil, "entry %d %s", i, strings.Repeat("x", int(i*7919%3000)))
}

// running is a log opened in dir and run until the test ends (or stop).
type running struct {
	*Log
	cancel  context.CancelFunc
	done    chan error
	once    sync.Once
	stopErr error
}

func start(t testing.TB, cfg Config) *running {
	t.Helper()
	if cfg.Metrics == "" {
		cfg.Metrics = "test_log"
	}
	l, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Log: l, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- l.Run(ctx) }()
	for l.Ready() != nil {
		time.Sleep(time.Millisecond)
	}
	t.Cleanup(func() { _ = r.stop() })
	return r
}

func (r *running) stop() error {
	r.once.Do(func() {
		r.cancel()
		r.stopErr = <-r.done
	})
	return r.stopErr
}

// add appends entries from..to-1 and checks their indexes.
func (r *running) add(t testing.TB, from, to int64) {
	t.Helper()
	var es [][]byte
	for i := from; i < to; i++ {
		es = append(es, entryData(i))
	}
	g := r.AddAll(es)
	for i := range es {
		idx, err := g.Wait(context.Background(), i)
		if err != nil || idx != from+int64(i) {
			t.Fatalf("entry %d: index %d, %v", from+int64(i), idx, err)
		}
	}
}

// model is the tree of entries 0..n-1 worked out apart from the log.
type model map[int64]tlog.Hash

func (m model) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		h, ok := m[x]
		if !ok {
			return nil, fmt.Errorf("no hash %d", x)
		}
		out[i] = h
	}
	return out, nil
}

func modelOf(t testing.TB, n int64) model {
	m := model{}
	for i := range n {
		hs, err := tlog.StoredHashes(i, entryData(i), m)
		if err != nil {
			t.Fatal(err)
		}
		for j, h := range hs {
			m[tlog.StoredHashIndex(0, i)+int64(j)] = h
		}
	}
	return m
}

// verify checks the log of n entries against the model: its root, the
// latest checkpoint, each entry, and proofs from a sample of them.
func verify(t testing.TB, l *Log, n int64) {
	t.Helper()
	if got := l.Size(); got != n {
		t.Fatalf("size %d, want %d", got, n)
	}
	m := modelOf(t, n)
	want, err := tlog.TreeHash(n, m)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := l.TreeHash(n); err != nil || got != want {
		t.Fatalf("root %v, %v; want %v", got, err, want)
	}
	c, err := l.Sign(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c.Size != n || c.Root != want {
		t.Fatalf("checkpoint %d %v, want %d %v", c.Size, c.Root, n, want)
	}
	if _, err := OpenCheckpoint(c.Note, l.Verifier()); err != nil {
		t.Fatal(err)
	}
	minIdx := l.MinIndex()
	es, err := l.Entries(minIdx, int(n-minIdx))
	if err != nil || int64(len(es)) != n-minIdx {
		t.Fatalf("entries from %d: %d, %v", minIdx, len(es), err)
	}
	for i, e := range es {
		if !bytes.Equal(e, entryData(minIdx+int64(i))) {
			t.Fatalf("entry %d differs", minIdx+int64(i))
		}
	}
	for _, i := range []int64{minIdx, minIdx + 1, (minIdx + n) / 2, n - 2, n - 1} {
		if i < minIdx || i >= n {
			continue
		}
		for _, size := range []int64{i + 1, n} {
			p, err := l.ProveEntry(i, size)
			if err != nil {
				t.Fatalf("proving %d in %d: %v", i, size, err)
			}
			root, _ := tlog.TreeHash(size, m)
			if err := tlog.CheckRecord(p, size, root, i, tlog.RecordHash(entryData(i))); err != nil {
				t.Fatalf("the proof of %d in %d: %v", i, size, err)
			}
		}
		if i >= 1 && i >= minIdx+256 || minIdx == 0 && i >= 1 {
			p, err := l.ProveTree(n, i)
			if err != nil {
				t.Fatalf("proving %d in %d: %v", i, n, err)
			}
			old, _ := tlog.TreeHash(i, m)
			if err := tlog.CheckTree(p, n, want, i, old); err != nil {
				t.Fatalf("the consistency of %d in %d: %v", i, n, err)
			}
		}
	}
}

// TestAppendVerifyReopen appends across bundles, tiles of level 1 and
// segments, checks the tree against one worked out apart, and reopens
// the log to find it whole.
func TestAppendVerifyReopen(t *testing.T) {
	dir := t.TempDir()
	key := testKey(t, "example.com/log")
	cfg := Config{Dir: dir, Key: key, SegmentEntries: 512, MaxGroup: 100}
	r := start(t, cfg)
	r.add(t, 0, 1)
	verify(t, r.Log, 1)
	r.add(t, 1, 300)
	verify(t, r.Log, 300)
	for from := int64(300); from < 66_000; from += 3000 {
		r.add(t, from, min(from+3000, 66_000))
	}
	verify(t, r.Log, 66_000)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	segs, _ := segments(filepath.Join(dir, "segments"))
	if len(segs) != 66_000/512+1 || segs[len(segs)-1] != 66_000&^511 {
		t.Fatalf("segments %v: want one every 512 entries", segs)
	}
	for _, first := range segs[:len(segs)-1] {
		if _, err := readIndex(filepath.Join(dir, "segments", indexName(first))); err != nil {
			t.Fatalf("the full segment from %d: %v", first, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "tile", "1", "000")); err != nil {
		t.Fatalf("the first level-1 tile: %v", err)
	}
	r = start(t, cfg)
	verify(t, r.Log, 66_000)
	r.add(t, 66_000, 66_700)
	verify(t, r.Log, 66_700)
}

// tileClient reads a served log as golang.org/x/mod's tiles client
// does: every tile checked against the checkpoint's root.
type tileClient struct {
	base string
	t    testing.TB
}

func (c tileClient) Height() int { return TileHeight }

func (c tileClient) ReadTiles(tiles []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	for i, tl := range tiles {
		b, status := get(c.t, c.base+"/"+TilePath(tl))
		if status != http.StatusOK {
			return nil, fmt.Errorf("%s: %d", TilePath(tl), status)
		}
		out[i] = b
	}
	return out, nil
}

func (c tileClient) SaveTiles([]tlog.Tile, [][]byte) {}

func get(t testing.TB, url string) ([]byte, int) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b, resp.StatusCode
}

// TestServedTiles reads the served log with x/mod's tiles client: every
// entry's record hash, authenticated against the signed checkpoint, and
// every entry bundle.
func TestServedTiles(t *testing.T) {
	r := start(t, Config{Dir: t.TempDir(), Key: testKey(t, "example.com/log"), SegmentEntries: 1024})
	const n = 3000
	r.add(t, 0, n)
	if _, err := r.Sign(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	cp, status := get(t, srv.URL+"/checkpoint")
	if status != http.StatusOK {
		t.Fatalf("checkpoint: %d", status)
	}
	c, err := OpenCheckpoint(cp, r.Verifier())
	if err != nil || c.Size != n {
		t.Fatalf("checkpoint %d, %v", c.Size, err)
	}
	hr := tlog.TileHashReader(tlog.Tree{N: c.Size, Hash: c.Root}, tileClient{srv.URL, t})
	for i := int64(0); i < n; i++ {
		hs, err := hr.ReadHashes([]int64{tlog.StoredHashIndex(0, i)})
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if hs[0] != tlog.RecordHash(entryData(i)) {
			t.Fatalf("entry %d: the tiles' leaf is not the entry's hash", i)
		}
	}
	for i := int64(0); i < n; i += tileWidth {
		w := min(tileWidth, n-i)
		tl := tlog.Tile{H: TileHeight, L: -1, N: i / tileWidth, W: int(w)}
		b, status := get(t, srv.URL+"/"+TilePath(tl))
		if status != http.StatusOK {
			t.Fatalf("%s: %d", TilePath(tl), status)
		}
		for j := range w {
			e, err := bundleEntry(b, int(j))
			if err != nil || !bytes.Equal(e, entryData(i+j)) {
				t.Fatalf("%s entry %d: %v", TilePath(tl), j, err)
			}
		}
	}
	for _, path := range []string{"tile/0/012", "tile/entries/011.p/200", "tile/1/000", "tile/0/x001/000", "tile/entries/000.p/256", "nothing"} {
		if _, status := get(t, srv.URL+"/"+path); status != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", path, status)
		}
	}
}

// TestTornTail cuts a segment's last group short, and flips a byte in
// it: Open cuts it, keeps everything before it, and the log goes on.
func TestTornTail(t *testing.T) {
	for _, damage := range []string{"cut", "flip", "garbage"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			cfg := Config{Dir: dir, Key: testKey(t, "example.com/log")}
			r := start(t, cfg)
			r.add(t, 0, 700)
			if _, err := r.Sign(context.Background()); err != nil {
				t.Fatal(err)
			}
			r.add(t, 700, 710) // one group: the one torn
			seg := filepath.Join(dir, "segments", segmentName(0))
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
			end := framesEnd(t, seg, "example.com/log")
			f, err := os.OpenFile(seg, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			switch damage {
			case "cut":
				err = f.Truncate(end - 5)
			case "flip":
				_, err = f.WriteAt([]byte{0xff}, end-100)
			case "garbage":
				_, err = f.WriteAt([]byte("not a frame at all"), end)
			}
			_ = f.Close()
			if err != nil {
				t.Fatal(err)
			}
			// The checkpoint signed on stop covers the torn group: take the
			// one before it, as a crash before that signing would leave.
			if damage != "garbage" {
				writeCheckpointAt(t, dir, cfg.Key, 700)
			}
			r = start(t, cfg)
			want := int64(700)
			if damage == "garbage" {
				want = 710
			}
			verify(t, r.Log, want)
			r.add(t, want, want+300)
			verify(t, r.Log, want+300)
		})
	}
}

// writeCheckpointAt signs a checkpoint of the first size test entries
// into dir, as a log that stopped there would have left it.
func writeCheckpointAt(t testing.TB, dir, key string, size int64) {
	t.Helper()
	signer, _, _, err := Keys(key)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := tlog.TreeHash(size, modelOf(t, size))
	b, err := note.Sign(&note.Note{Text: CheckpointText(signer.Name(), size, root)}, signer)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "checkpoint"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRefusesWhatItCannotVouchFor: a log that no longer extends its
// checkpoint, or lost entries the checkpoint covers, or is another
// log's, is not opened.
func TestRefusesWhatItCannotVouchFor(t *testing.T) {
	dir := t.TempDir()
	key := testKey(t, "example.com/log")
	r := start(t, Config{Dir: dir, Key: key})
	r.add(t, 0, 300)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	open := func(key string) error {
		l, err := Open(Config{Dir: dir, Key: key, Metrics: "x"})
		if err == nil {
			_ = l.files.close()
			_ = l.seg.f.Close()
		}
		return err
	}
	if err := open(testKey(t, "example.com/other")); err == nil || !strings.Contains(err.Error(), "example.com/other") {
		t.Errorf("another origin's key: %v", err)
	}
	if err := open(testKey(t, "example.com/log")); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Errorf("another key of the same name: %v", err)
	}
	// An entry forged in the segment, checksum and all: the tree no
	// longer extends the checkpoint.
	forgeDir := t.TempDir()
	r = start(t, Config{Dir: forgeDir, Key: key})
	r.add(t, 0, 300)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	e := entryData(7)
	if err := Forge(forgeDir, "example.com/log", 7, bytes.ToUpper(e)); err != nil {
		t.Fatal(err)
	}
	if l, err := Open(Config{Dir: forgeDir, Key: key, Metrics: "x"}); err == nil || !strings.Contains(err.Error(), "does not extend its checkpoint") {
		if err == nil {
			_ = l.files.close()
			_ = l.seg.f.Close()
		}
		t.Errorf("a forged entry: %v", err)
	}
	// An entry forged in a full segment: the log opens (only the newest
	// segment is replayed), and the entry no longer verifies.
	sealedDir := t.TempDir()
	r = start(t, Config{Dir: sealedDir, Key: key, SegmentEntries: 256})
	r.add(t, 0, 600)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if err := Forge(sealedDir, "example.com/log", 7, bytes.ToUpper(entryData(7))); err != nil {
		t.Fatal(err)
	}
	r = start(t, Config{Dir: sealedDir, Key: key, SegmentEntries: 256})
	if e, err := r.Entry(7); err != nil || !bytes.Equal(e, bytes.ToUpper(entryData(7))) {
		t.Fatalf("the forged entry reads %.20q, %v", e, err)
	}
	if _, err := r.VerifiedEntry(7); err == nil || !strings.Contains(err.Error(), "does not hash to its leaf") {
		t.Errorf("a forged entry verified: %v", err)
	}
	if _, err := r.VerifiedEntry(8); err != nil {
		t.Errorf("its neighbour: %v", err)
	}
	_ = r.stop()

	// Entries the checkpoint covers, lost.
	writeCheckpointAt(t, dir, key, 300)
	seg := filepath.Join(dir, "segments", segmentName(0))
	_ = os.Truncate(seg, framesEnd(t, seg, "example.com/log")-10)
	if err := open(key); err == nil || !strings.Contains(err.Error(), "lost") {
		t.Errorf("entries the checkpoint covers, lost: %v", err)
	}
}

// TestPrune keeps whole bundles, never past the checkpoint; what is
// left still proves, pruned tiles are not served, upper tiles stay.
func TestPrune(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Dir: dir, Key: testKey(t, "example.com/log"), SegmentEntries: 1024, Retention: Retention{MaxEntries: 1000}}
	r := start(t, cfg)
	r.add(t, 0, 5000)
	if _, err := r.Sign(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	l, err := Open(Config{Dir: dir, Key: cfg.Key, Metrics: "x", Retention: cfg.Retention})
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.applyRetention()
	if err != nil || got != (5000-1000)&^255 {
		t.Fatalf("pruned to %d, %v; want %d", got, err, (5000-1000)&^255)
	}
	_ = l.files.close()
	_ = l.seg.f.Close()
	r = start(t, cfg)
	if r.MinIndex() != 3840 {
		t.Fatalf("min index %d after reopening", r.MinIndex())
	}
	verify(t, r.Log, 5000)
	if _, err := r.Entry(3839); !errors.Is(err, ErrNotHeld) {
		t.Errorf("a pruned entry: %v", err)
	}
	for _, k := range []tileKey{{-1, 14}, {0, 14}} {
		if _, err := os.Stat(r.tileFile(k)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s not deleted: %v", TilePath(k.tile()), err)
		}
	}
	if _, err := r.ProveEntry(3840, 5000); err != nil {
		t.Errorf("the first entry kept: %v", err)
	}
	if _, err := r.ProveTree(5000, 100); !errors.Is(err, ErrNotHeld) && err == nil {
		t.Errorf("a consistency proof from a pruned size: %v", err)
	}
}

// TestBounds: entries too small or too large, a full queue, a stopped
// log.
func TestBounds(t *testing.T) {
	r := start(t, Config{Dir: t.TempDir(), Key: testKey(t, "example.com/log"), MaxQueue: 4})
	for _, size := range []int{0, MaxEntryBytes + 1} {
		if _, err := r.Add(make([]byte, size))(); err == nil {
			t.Errorf("an entry of %d bytes accepted", size)
		}
	}
	if _, err := r.Add(make([]byte, MaxEntryBytes))(); err != nil {
		t.Errorf("an entry of %d bytes: %v", MaxEntryBytes, err)
	}
	g := r.AddAll(make([][]byte, 10))
	<-g.Done()
	if _, errs := g.Results(); errs[0] == nil {
		t.Errorf("empty entries accepted")
	}
	big := make([][]byte, 10)
	for i := range big {
		big[i] = []byte("x")
	}
	g = r.AddAll(big)
	<-g.Done()
	_, errs := g.Results()
	if !errors.Is(errs[9], ErrQueueFull) {
		t.Errorf("entry 10 of a queue of 4: %v", errs[9])
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Add([]byte("late"))(); !errors.Is(err, ErrStopped) {
		t.Errorf("after the stop: %v", err)
	}
}

// TestAwait: a checkpoint that covers an entry arrives within the
// signing cadence; stopping signs the last.
func TestAwait(t *testing.T) {
	r := start(t, Config{Dir: t.TempDir(), Key: testKey(t, "example.com/log"), SignEvery: 20 * time.Millisecond})
	idx, err := r.Add([]byte("one"))()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := r.Await(ctx, idx)
	if err != nil || c.Size <= idx {
		t.Fatalf("await: %d, %v", c.Size, err)
	}
}

// framesEnd is where a segment's last whole frame ends (the zeros
// written ahead follow).
func framesEnd(t testing.TB, path, origin string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	r := bufio.NewReader(f)
	_, off, err := readHeader(r, origin)
	if err != nil {
		t.Fatal(err)
	}
	for {
		fi, _, err := readFrame(r, nil)
		if err != nil {
			return off
		}
		off += fi.size
	}
}
