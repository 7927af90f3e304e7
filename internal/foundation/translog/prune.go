package translog

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"golang.org/x/mod/sumdb/tlog"
)

// Retention bounds a log: what is older than MaxAge goes, and at most
// MaxEntries stay. Zero: that bound is off.
type Retention struct {
	MaxAge     time.Duration
	MaxEntries int64
}

// maxTilesAPrune bounds the work of one Prune: the tiles whose lower
// hashes it deletes (256 entries each). A log far behind its retention
// catches up over several.
const maxTilesAPrune = 4096

// keepHashes copies into translog_hashes the hashes at level TileHeight
// and above held by the entries from..to (whole tiles): those of each
// tile's last entry.
func (l *Log) keepHashes(ctx context.Context, tx *sql.Tx, from, to int64) error {
	rows, err := tx.QueryContext(ctx, l.q(fmt.Sprintf("SELECT idx, hashes FROM translog_entries WHERE idx >= ? AND idx < ? AND idx %% %d = %d ORDER BY idx", 1<<TileHeight, 1<<TileHeight-1)), from, to)
	if err != nil {
		return err
	}
	type kept struct {
		idx  int64
		hash []byte
	}
	var keep []kept
	if err := eachPair(rows, func(n int64, hashes []byte) error {
		if len(hashes)%tlog.HashSize != 0 || len(hashes) < (TileHeight+1)*tlog.HashSize {
			return fmt.Errorf("entry %d holds %d bytes of hashes, not a tile's root: the store is damaged", n, len(hashes))
		}
		base := tlog.StoredHashIndex(0, n)
		for level := TileHeight; (level+1)*tlog.HashSize <= len(hashes); level++ {
			keep = append(keep, kept{base + int64(level), hashes[level*tlog.HashSize : (level+1)*tlog.HashSize]})
		}
		return nil
	}); err != nil {
		return err
	}
	for _, k := range keep {
		if _, err := tx.ExecContext(ctx, l.q("INSERT INTO translog_hashes (idx, hash) VALUES (?, ?) ON CONFLICT (idx) DO NOTHING"), k.idx, k.hash); err != nil {
			return err
		}
	}
	return nil
}

// Prune moves the log's minimum index up to what r keeps, whole tiles of
// 256 entries at a time (so a tile's entries go together, and up to 255
// entries past their age stay until their tile's last one is due), never
// past the latest signed checkpoint's size. The entries below it, the
// tree's hashes below level 8 under them (which the entries' rows hold)
// and the checkpoints of sizes below it are deleted; the hashes above
// move to translog_hashes and stay (32 bytes a 128 entries),
// so every checkpoint and every proof among what is left still verifies.
// It returns the new minimum index.
func (l *Log) Prune(ctx context.Context, r Retention) (int64, error) {
	var size, from int64
	if err := l.db.QueryRowContext(ctx, "SELECT size, min_index FROM translog_head WHERE id = 1").Scan(&size, &from); err != nil {
		return 0, fmt.Errorf("translog: %w", err)
	}
	to := from
	if r.MaxAge > 0 {
		var first *int64
		if err := l.db.QueryRowContext(ctx, l.q("SELECT MIN(idx) FROM translog_entries WHERE at >= ?"), l.now().Add(-r.MaxAge).UnixMilli()).Scan(&first); err != nil {
			return 0, fmt.Errorf("translog: %w", err)
		}
		if first == nil {
			to = max(to, size)
		} else {
			to = max(to, *first)
		}
	}
	if r.MaxEntries > 0 {
		to = max(to, size-r.MaxEntries)
	}
	if c, err := l.Latest(ctx); err == nil {
		to = min(to, c.Size)
	} else {
		to = from // nothing signed yet: nothing may go
	}
	to = to >> TileHeight << TileHeight
	to = min(to, from+maxTilesAPrune<<TileHeight)
	if to <= from {
		return from, nil
	}
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("translog: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var locked int64
	if err := tx.QueryRowContext(ctx, "SELECT min_index FROM translog_head WHERE id = 1"+l.forUpdate()).Scan(&locked); err != nil {
		return 0, fmt.Errorf("translog: %w", err)
	}
	if locked >= to { // another replica pruned meanwhile
		return locked, nil
	}
	// The hashes at level 8 and above that the pruned entries hold stay,
	// apart: the last entry of each tile holds its tile's root and the
	// roots it completed above.
	if err := l.keepHashes(ctx, tx, locked, to); err != nil {
		return 0, fmt.Errorf("translog: keeping the upper hashes: %w", err)
	}
	if _, err := tx.ExecContext(ctx, l.q("DELETE FROM translog_entries WHERE idx < ?"), to); err != nil {
		return 0, fmt.Errorf("translog: %w", err)
	}
	if _, err := tx.ExecContext(ctx, l.q("DELETE FROM translog_checkpoints WHERE size < ?"), to); err != nil {
		return 0, fmt.Errorf("translog: %w", err)
	}
	if _, err := tx.ExecContext(ctx, l.q("UPDATE translog_head SET min_index = ? WHERE id = 1"), to); err != nil {
		return 0, fmt.Errorf("translog: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("translog: %w", err)
	}
	return to, nil
}
