package translog

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"
)

// tree is the log's right edge: its size, the roots of its complete
// subtrees (all that appending hashes against), the partial tile of each
// tile level and the partial entry bundle. Run appends to its own copy
// and publishes it under Log.mu once the group is durable; a published
// copy's slices are only ever appended to beyond what it holds, and a
// tile that fills starts a new slice, so a reader's copy stays valid.
type tree struct {
	size int64
	// frontier[l] is the root of the complete level-l subtree that ends
	// at size, for each bit l set in size.
	frontier [64]tlog.Hash
	// partial[L] holds the level-8L hashes of the tile being filled at
	// tile level L: (size>>8L) mod 256 of them.
	partial [][]tlog.Hash
	// bundle is the partial entry bundle's entries (size mod 256 of
	// them), the bytes Add was given.
	bundle [][]byte
	// recent are the last full bundles' entries, newest last, kept so
	// that a follower close behind reads them from memory.
	recent [recentBundles][][]byte
	// recentN is the bundle number of recent's newest.
	recentN int64
}

// recentBundles is how many full bundles the tree keeps in memory.
const recentBundles = 32

// tileKey names a tile: L -1 for an entry bundle.
type tileKey struct {
	L int
	N int64
}

// fullTile is a hash tile that filled: its bytes, for its file (level
// 0: the segment's index).
type fullTile struct {
	tileKey
	data []byte
}

// tile is the tlog.Tile of k, full.
func (k tileKey) tile() tlog.Tile { return tlog.Tile{H: TileHeight, L: k.L, N: k.N, W: tileWidth} }

// append hashes data into the tree as entry t.size and returns the tiles
// it filled.
func (t *tree) append(data []byte, full []fullTile) ([]fullTile, error) {
	n := t.size
	hs, err := tlog.StoredHashes(n, data, frontierReader{t})
	if err != nil {
		return full, fmt.Errorf("hashing entry %d: %w", n, err)
	}
	t.bundle = append(t.bundle, data)
	if (n+1)%tileWidth == 0 {
		// Full: the segment holds it (where its index says), and memory
		// for a while.
		copy(t.recent[:], t.recent[1:])
		t.recent[recentBundles-1], t.recentN = t.bundle, n>>TileHeight
		t.bundle = make([][]byte, 0, tileWidth)
	}
	for l := 0; l < len(hs); l += TileHeight {
		L := l / TileHeight
		for len(t.partial) <= L {
			t.partial = append(t.partial, nil)
		}
		t.partial[L] = append(t.partial[L], hs[l])
		if len(t.partial[L]) == tileWidth {
			b := make([]byte, 0, tileWidth*tlog.HashSize)
			for _, h := range t.partial[L] {
				b = append(b, h[:]...)
			}
			k := (n+1)>>l - 1 // the level-l hash's index
			full = append(full, fullTile{tileKey{L, k >> TileHeight}, b})
			t.partial[L] = make([]tlog.Hash, 0, tileWidth)
		}
	}
	t.frontier[len(hs)-1] = hs[len(hs)-1]
	t.size = n + 1
	return full, nil
}

// root is the tree's root hash.
func (t *tree) root() tlog.Hash {
	if t.size == 0 {
		return tlog.Hash{}
	}
	h, err := tlog.TreeHash(t.size, frontierReader{t})
	if err != nil {
		panic(fmt.Sprintf("translog: the tree of %d has no root: %v", t.size, err)) // the frontier holds it by construction
	}
	return h
}

// fromPartials sets the frontier of a tree whose size and partial tiles
// are known (a segment's header): each complete subtree root is a
// subtree of its tile level's partial tile.
func (t *tree) fromPartials() error {
	for l := 0; l < 63 && t.size>>l > 0; l++ {
		if t.size>>l&1 == 0 {
			continue
		}
		L, r := l/TileHeight, l%TileHeight
		if L >= len(t.partial) {
			return fmt.Errorf("the tree of %d has no partial tile at level %d", t.size, L)
		}
		c := t.size >> (L * TileHeight) // level-8L hashes in all
		start := c &^ (tileWidth - 1)   // the partial tile's first
		if int64(len(t.partial[L])) != c-start {
			return fmt.Errorf("the tree of %d holds %d hashes in its level-%d partial tile, not %d", t.size, len(t.partial[L]), L, c-start)
		}
		from := ((t.size>>l)-1)<<r - start
		t.frontier[l] = subtreeRoot(t.partial[L][from : from+1<<r])
	}
	return nil
}

// subtreeRoot is the root of a complete subtree over hashes (a power of
// two of them).
func subtreeRoot(hs []tlog.Hash) tlog.Hash {
	if len(hs) == 1 {
		return hs[0]
	}
	return tlog.NodeHash(subtreeRoot(hs[:len(hs)/2]), subtreeRoot(hs[len(hs)/2:]))
}

// frontierReader reads the roots of a tree's complete subtrees: what
// tlog.StoredHashes and tlog.TreeHash read at its size.
type frontierReader struct{ t *tree }

func (r frontierReader) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		level, k := tlog.SplitStoredHashIndex(x)
		if level >= 63 || r.t.size>>level&1 == 0 || k != r.t.size>>level-1 {
			return nil, fmt.Errorf("stored hash %d (level %d, %d) is not a root of the tree of %d", x, level, k, r.t.size)
		}
		out[i] = r.t.frontier[level]
	}
	return out, nil
}

// recentBundle is full bundle n's entries when the tree still holds
// them.
func (t *tree) recentBundle(n int64) ([][]byte, bool) {
	back := t.recentN - n
	if n < 0 || back < 0 || back >= recentBundles || t.recent[recentBundles-1-back] == nil {
		return nil, false
	}
	return t.recent[recentBundles-1-back], true
}

// tileData is the first w hashes (or entries) of tile k as the tree
// holds them in memory, when it does.
func (t *tree) tileData(k tileKey, w int) ([]byte, bool) {
	if k.L == -1 {
		es, ok := t.recentBundle(k.N)
		if !ok {
			if k.N != t.size>>TileHeight || int64(w) > t.size%tileWidth {
				return nil, false
			}
			es = t.bundle
		}
		var b []byte
		for _, e := range es[:w] {
			b = appendEntry(b, e)
		}
		return b, true
	}
	c := t.size >> (k.L * TileHeight)
	if k.L >= len(t.partial) || k.N != c>>TileHeight || int64(w) > c%tileWidth {
		return nil, false
	}
	b := make([]byte, 0, w*tlog.HashSize)
	for _, h := range t.partial[k.L][:w] {
		b = append(b, h[:]...)
	}
	return b, true
}

// bundlePrefix is the first w entries of a bundle.
func bundlePrefix(b []byte, w int) ([]byte, bool) {
	off := 0
	for range w {
		if off+2 > len(b) {
			return nil, false
		}
		off += 2 + int(binary.BigEndian.Uint16(b[off:]))
	}
	if off > len(b) {
		return nil, false
	}
	return b[:off:off], true
}

// bundleEntry is entry i of a bundle.
func bundleEntry(b []byte, i int) ([]byte, error) {
	off := 0
	for j := 0; ; j++ {
		if off+2 > len(b) {
			return nil, fmt.Errorf("the bundle holds %d entries, not %d", j, i+1)
		}
		n := int(binary.BigEndian.Uint16(b[off:]))
		if off+2+n > len(b) {
			return nil, fmt.Errorf("the bundle's entry %d is cut short", j)
		}
		if j == i {
			return b[off+2 : off+2+n : off+2+n], nil
		}
		off += 2 + n
	}
}
