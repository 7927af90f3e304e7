package translog

import (
	"compress/gzip"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"golang.org/x/mod/sumdb/tlog"
)

// view is the published tree as one reader sees it.
func (l *Log) view() (tree, int64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.t, l.minIdx
}

// tile reads tile t of the tree of size: from memory (the right edge,
// or a full tile on its way to its file) or from its file.
func (l *Log) tile(t tlog.Tile, tr *tree, minIdx int64, size int64) ([]byte, error) {
	level := max(t.L, 0)
	first, end := t.N<<TileHeight, t.N<<TileHeight+int64(t.W)
	if t.H != TileHeight || t.W < 1 || t.W > tileWidth || level > 7 || end > size>>(level*TileHeight) {
		return nil, fmt.Errorf("%w: tile %s of the tree of %d", ErrNotHeld, TilePath(t), size)
	}
	if level == 0 && first < minIdx {
		return nil, fmt.Errorf("%w: tile %s is pruned", ErrNotHeld, TilePath(t))
	}
	if b, ok := tr.tileData(tileKey{t.L, t.N}, t.W); ok {
		return b, nil
	}
	if t.L == -1 {
		b, err := l.bundle(tileKey{-1, t.N})
		if err != nil {
			return nil, err
		}
		p, ok := bundlePrefix(b, t.W)
		if !ok {
			return nil, fmt.Errorf("the entry bundle %s is damaged", TilePath(t))
		}
		return p, nil
	}
	return l.readTile(tileKey{t.L, t.N}, t.W)
}

// tileReader reads the published tree's tiles for tlog.TileHashReader,
// which checks each against the tree's root.
type tileReader struct {
	l      *Log
	t      tree
	minIdx int64
}

func (r *tileReader) Height() int { return TileHeight }

func (r *tileReader) ReadTiles(tiles []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	for i, t := range tiles {
		b, err := r.l.tile(t, &r.t, r.minIdx, r.t.size)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

func (r *tileReader) SaveTiles([]tlog.Tile, [][]byte) {}

// hashes reads the published tree's hashes, each tile checked against
// its root.
func (l *Log) hashes() (tlog.HashReader, int64) {
	t, minIdx := l.view()
	return tlog.TileHashReader(tlog.Tree{N: t.size, Hash: t.root()}, &tileReader{l, t, minIdx}), t.size
}

// TreeHash is the root of the tree of the first size entries.
func (l *Log) TreeHash(size int64) (tlog.Hash, error) {
	r, n := l.hashes()
	if size > n || size < 0 {
		return tlog.Hash{}, fmt.Errorf("%w: the tree of %d (the log holds %d)", ErrNotHeld, size, n)
	}
	if size == n {
		t, _ := l.view()
		if t.size == n {
			return t.root(), nil
		}
	}
	h, err := tlog.TreeHash(size, r)
	if err != nil {
		return tlog.Hash{}, fmt.Errorf("translog: the tree of %d: %w", size, err)
	}
	return h, nil
}

// ProveEntry is the proof that entry index is in the tree of size
// entries (tlog.CheckRecord verifies it).
func (l *Log) ProveEntry(index, size int64) (tlog.RecordProof, error) {
	r, n := l.hashes()
	if size > n || index < 0 || index >= size {
		return nil, fmt.Errorf("%w: entry %d in the tree of %d (the log holds %d)", ErrNotHeld, index, size, n)
	}
	p, err := tlog.ProveRecord(size, index, r)
	if err != nil {
		return nil, fmt.Errorf("translog: proving entry %d in the tree of %d: %w", index, size, err)
	}
	return p, nil
}

// ProveTree is the proof that the tree of size old is a prefix of the
// tree of size size (tlog.CheckTree verifies it).
func (l *Log) ProveTree(size, old int64) (tlog.TreeProof, error) {
	r, n := l.hashes()
	if size > n || old < 1 || old > size {
		return nil, fmt.Errorf("%w: the tree of %d in the tree of %d (the log holds %d)", ErrNotHeld, old, size, n)
	}
	p, err := tlog.ProveTree(size, old, r)
	if err != nil {
		return nil, fmt.Errorf("translog: proving the tree of %d a prefix of %d: %w", old, size, err)
	}
	return p, nil
}

// Entry is entry index's bytes (ErrNotHeld beyond the size or pruned).
func (l *Log) Entry(index int64) ([]byte, error) {
	es, err := l.Entries(index, 1)
	if err != nil {
		return nil, err
	}
	return es[0], nil
}

// VerifiedEntry is entry index's bytes, checked against the tree: its
// leaf hash is the one the tiles hold, themselves checked against the
// root. A damaged or altered file is an error, not an answer.
func (l *Log) VerifiedEntry(index int64) ([]byte, error) {
	data, err := l.Entry(index)
	if err != nil {
		return nil, err
	}
	r, _ := l.hashes()
	hs, err := r.ReadHashes([]int64{tlog.StoredHashIndex(0, index)})
	if err != nil {
		return nil, fmt.Errorf("translog: entry %d's leaf: %w", index, err)
	}
	if hs[0] != tlog.RecordHash(data) {
		return nil, fmt.Errorf("translog: entry %d as read does not hash to its leaf in the tree: the log's files are damaged or altered", index)
	}
	return data, nil
}

// Entries are up to n entries from index from on, as many as the log
// holds (none at its end).
func (l *Log) Entries(from int64, n int) ([][]byte, error) {
	t, minIdx := l.view()
	if from < minIdx || from > t.size {
		return nil, fmt.Errorf("%w: entry %d (the log holds %d to %d)", ErrNotHeld, from, minIdx, t.size)
	}
	end := min(t.size, from+int64(n))
	var out [][]byte
	for i := from; i < end; {
		k := tileKey{-1, i >> TileHeight}
		w := int(min(end-k.N<<TileHeight, tileWidth))
		if k.N == t.size>>TileHeight { // the partial bundle
			out = append(out, t.bundle[i-k.N<<TileHeight:w]...)
			break
		}
		if es, ok := t.recentBundle(k.N); ok {
			out = append(out, es[i-k.N<<TileHeight:w]...)
			i = k.N<<TileHeight + int64(w)
			continue
		}
		b, err := l.bundle(k)
		if err != nil {
			return nil, err
		}
		for j := int(i - k.N<<TileHeight); j < w; j++ {
			e, err := bundleEntry(b, j)
			if err != nil {
				return nil, fmt.Errorf("translog: the entry bundle %s: %w", TilePath(k.tile()), err)
			}
			out = append(out, e)
		}
		i = k.N<<TileHeight + int64(w)
	}
	if len(out) == 0 && n > 0 && from < end {
		return nil, fmt.Errorf("%w: entry %d", ErrNotHeld, from)
	}
	return out, nil
}

// bundleCache keeps the full bundles read last: a follower reads one
// bundle's entries many times over.
type bundleCache struct {
	mu   sync.Mutex
	keys [4]tileKey
	data [4][]byte
	next int
}

// bundle is full bundle k, read from its segment.
func (l *Log) bundle(k tileKey) ([]byte, error) {
	c := &l.bundleCache
	c.mu.Lock()
	for i, ck := range c.keys {
		if ck == k && c.data[i] != nil {
			b := c.data[i]
			c.mu.Unlock()
			return b, nil
		}
	}
	c.mu.Unlock()
	path, loc, err := l.whereBundle(k.N)
	if err != nil {
		return nil, err
	}
	b, err := readBundle(path, loc, k.N)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.keys[c.next], c.data[c.next] = k, b
	c.next = (c.next + 1) % len(c.keys)
	c.mu.Unlock()
	return b, nil
}

// whereBundle is the segment that holds full bundle n, and where in it.
func (l *Log) whereBundle(n int64) (string, bundleLoc, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	at := n << TileHeight
	if a := l.active; at >= a.first {
		if i := (at - a.first) >> TileHeight; i < int64(len(a.locs)) {
			return a.path, a.locs[i], nil
		}
		return "", bundleLoc{}, fmt.Errorf("%w: bundle %d", ErrNotHeld, n)
	}
	s, ok := l.sealedAt(at)
	if !ok {
		return "", bundleLoc{}, fmt.Errorf("%w: bundle %d (pruned)", ErrNotHeld, n)
	}
	return filepath.Join(l.dir, "segments", segmentName(s.first)), s.locs[(at-s.first)>>TileHeight], nil
}

// sealedAt is the full segment holding index at (under l.mu).
func (l *Log) sealedAt(at int64) (sealedSeg, bool) {
	i := sort.Search(len(l.sealed), func(i int) bool { return l.sealed[i].end > at })
	if i == len(l.sealed) || l.sealed[i].first > at {
		return sealedSeg{}, false
	}
	return l.sealed[i], true
}

// levelZeroTile reads full level-0 tile n from its segment's index.
func (l *Log) levelZeroTile(n int64) ([]byte, error) {
	l.mu.RLock()
	s, ok := l.sealedAt(n << TileHeight)
	l.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: tile 0/%d", ErrNotHeld, n)
	}
	f, err := os.Open(filepath.Join(l.dir, "segments", indexName(s.first)))
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	b := make([]byte, tileWidth*tlog.HashSize)
	if _, err := f.ReadAt(b, s.tilesOff+(n-s.first>>TileHeight)*int64(len(b))); err != nil {
		return nil, fmt.Errorf("the index of the segment from %d: %w", s.first, err)
	}
	return b, nil
}

// Handler serves the log read-only as C2SP tlog-tiles, under whatever
// prefix the caller strips: GET <prefix>/checkpoint (the latest signed
// checkpoint), <prefix>/witnessed-checkpoint (the newest a quorum of
// witnesses cosigned), <prefix>/tile/<L>/<N>[.p/<W>] (hash tiles) and
// <prefix>/tile/entries/<N>[.p/<W>] (entry bundles, gzip when asked).
// What the log does not hold (beyond the latest checkpoint's tree, or
// pruned) is 404.
func (l *Log) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "read-only: GET or HEAD", http.StatusMethodNotAllowed)
			return
		}
		path := strings.TrimPrefix(r.URL.Path, "/")
		if path == "checkpoint" || path == "witnessed-checkpoint" {
			c, ok := l.Latest()
			if path == "witnessed-checkpoint" {
				c, ok = l.Witnessed()
			}
			if !ok {
				http.Error(w, "no checkpoint", http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache, max-age=0")
			_, _ = w.Write(c.Note)
			return
		}
		t, ok := parseTile(path)
		if !ok {
			http.NotFound(w, r)
			return
		}
		tr, minIdx := l.view()
		data, err := l.tile(t, &tr, minIdx, tr.size)
		switch {
		case errors.Is(err, ErrNotHeld):
			http.NotFound(w, r)
			return
		case err != nil:
			l.logError("serving a tile failed", err)
			http.Error(w, "the log could not read that tile", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		if t.L == -1 && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Add("Vary", "Accept-Encoding")
			z := gzip.NewWriter(w)
			_, _ = z.Write(data)
			_ = z.Close()
			return
		}
		_, _ = w.Write(data)
	})
}
