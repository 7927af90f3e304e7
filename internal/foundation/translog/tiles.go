package translog

import (
	"compress/gzip"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"golang.org/x/mod/sumdb/tlog"
)

// Handler serves the log read-only as C2SP tlog-tiles, under whatever
// prefix the caller strips: GET <prefix>/checkpoint (the latest signed
// checkpoint), <prefix>/tile/<L>/<N>[.p/<W>] (hash tiles) and
// <prefix>/tile/entries/<N>[.p/<W>] (entry bundles, gzip when asked).
// A tile beyond the log's size, or below its minimum index (pruned), is
// 404.
func (l *Log) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "read-only: GET or HEAD", http.StatusMethodNotAllowed)
			return
		}
		path := strings.TrimPrefix(r.URL.Path, "/")
		if path == "checkpoint" {
			c, err := l.Latest(r.Context())
			if err != nil {
				status := http.StatusServiceUnavailable
				if errors.Is(err, sql.ErrNoRows) {
					status = http.StatusNotFound
				}
				http.Error(w, "no checkpoint", status)
				return
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache, max-age=0")
			_, _ = w.Write(c.Note)
			return
		}
		t, err := parseTile(path)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		data, err := l.tile(r.Context(), t)
		switch {
		case errors.Is(err, errNoTile):
			http.NotFound(w, r)
			return
		case err != nil:
			http.Error(w, "the log's store did not answer", http.StatusServiceUnavailable)
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

// errNoTile: the tile is not one the log has (beyond its size, pruned).
var errNoTile = errors.New("no such tile")

// parseTile reads a tlog-tiles path (tile/<L>/<N>[.p/<W>] or
// tile/entries/<N>[.p/<W>]) with x/mod's parser of the same coordinates
// in the Go checksum database's spelling (tile/8/<L>/…, tile/8/data/…),
// which also refuses any path that is not the canonical one. L is -1
// for an entry bundle.
func parseTile(path string) (tlog.Tile, error) {
	rest, ok := strings.CutPrefix(path, "tile/")
	if !ok {
		return tlog.Tile{}, errNoTile
	}
	if after, isEntries := strings.CutPrefix(rest, "entries/"); isEntries {
		rest = "data/" + after
	} else if strings.HasPrefix(rest, "data/") {
		return tlog.Tile{}, errNoTile
	}
	t, err := tlog.ParseTilePath(fmt.Sprintf("tile/%d/%s", TileHeight, rest))
	if err != nil || t.L > 63 {
		return tlog.Tile{}, errNoTile
	}
	return t, nil
}

// TilePath is t's tlog-tiles path (tile/<L>/<N>[.p/<W>], or
// tile/entries/… for L -1): x/mod's path less its height.
func TilePath(t tlog.Tile) string {
	p := strings.Replace(t.Path(), fmt.Sprintf("tile/%d/", t.H), "tile/", 1)
	if t.L == -1 {
		p = strings.Replace(p, "tile/data/", "tile/entries/", 1)
	}
	return p
}

// tile reads tile t's bytes: its hashes, or for an entry bundle its
// entries each after its length as a big-endian uint16.
func (l *Log) tile(ctx context.Context, t tlog.Tile) ([]byte, error) {
	var size, minIndex int64
	if err := l.db.QueryRowContext(ctx, "SELECT size, min_index FROM translog_head WHERE id = 1").Scan(&size, &minIndex); err != nil {
		return nil, err
	}
	level := max(t.L, 0)
	if level*TileHeight >= 63 {
		return nil, errNoTile
	}
	// The tile holds hashes t.N*256 … t.N*256+t.W-1 of level
	// level*TileHeight, each over 256^level entries.
	first, end := t.N<<TileHeight, t.N<<TileHeight+int64(t.W)
	if end > size>>(level*TileHeight) {
		return nil, errNoTile
	}
	if t.L == -1 {
		if first < minIndex {
			return nil, errNoTile
		}
		rows, err := l.db.QueryContext(ctx, l.q("SELECT idx, data FROM translog_entries WHERE idx >= ? AND idx < ? ORDER BY idx"), first, end)
		if err != nil {
			return nil, err
		}
		defer func() { _ = rows.Close() }()
		var b []byte
		next := first
		for rows.Next() {
			var idx int64
			var data []byte
			if err := rows.Scan(&idx, &data); err != nil {
				return nil, err
			}
			if idx != next {
				return nil, errNoTile
			}
			if len(data) > MaxEntryBytes {
				return nil, fmt.Errorf("translog: entry %d is %d bytes, over %d: the store is damaged", idx, len(data), MaxEntryBytes)
			}
			next++
			b = binary.BigEndian.AppendUint16(b, uint16(len(data))) //nolint:gosec // bounded by MaxEntryBytes just above.
			b = append(b, data...)
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if next != end {
			return nil, errNoTile
		}
		return b, nil
	}
	if level == 0 && first < minIndex {
		return nil, errNoTile
	}
	data, err := tlog.ReadTileData(t, l.reader(ctx))
	if errors.Is(err, errMissing) {
		return nil, fmt.Errorf("%w: %w", errNoTile, err)
	}
	return data, err
}
