package translog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
	"golang.org/x/sys/unix"
)

func fdatasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

type signResult struct {
	c   Checkpoint
	err error
}

type pruneResult struct {
	minIdx int64
	err    error
}

// ApplyRetention asks Run to prune what Config.Retention no longer keeps
// now (Run does every Config.PruneEvery) and returns the log's minimum
// index.
func (l *Log) ApplyRetention(ctx context.Context) (int64, error) {
	reply := make(chan pruneResult, 1)
	select {
	case l.pruneReq <- reply:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	r := <-reply
	return r.minIdx, r.err
}

// Run appends what is added, group by group, signs checkpoints and
// prunes, until ctx ends; then it stops taking entries, appends what is
// queued (within Config.DrainTimeout), syncs, signs the last checkpoint
// and returns. A log runs once.
func (l *Log) Run(ctx context.Context) error {
	l.qmu.Lock()
	if l.running {
		l.qmu.Unlock()
		return errors.New("translog: the log runs already (or ran)")
	}
	l.running = true
	l.qmu.Unlock()
	if l.witnesses != nil {
		// The witnesses are given the last checkpoint once stop has
		// signed it (the deferred call runs after stop returns).
		stopWitnessing, witnessed := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(witnessed)
			l.witnesses.run(stopWitnessing)
		}()
		defer func() {
			close(stopWitnessing)
			<-witnessed
		}()
		if c, ok := l.Latest(); ok {
			l.witnesses.offer(c)
		}
	}
	sign := time.NewTicker(l.cfg.SignEvery)
	defer sign.Stop()
	prune := time.NewTicker(l.cfg.PruneEvery)
	defer prune.Stop()
	var linger <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return l.stop()
		case <-l.wake:
			if l.cfg.Durability == DurableCheckpoints && l.cfg.Linger > 0 && l.startLinger() {
				if linger == nil {
					linger = time.After(l.cfg.Linger)
				}
				continue
			}
			linger = nil
			l.stopLinger()
			if l.group() {
				l.poke()
			}
		case <-linger:
			linger = nil
			l.stopLinger()
			if l.group() {
				l.poke()
			}
		case <-sign.C:
			if _, err := l.checkpoint(); err != nil {
				l.logError("signing a checkpoint failed", err)
			}
		case reply := <-l.signReq:
			c, err := l.checkpoint()
			reply <- signResult{c, err}
		case reply := <-l.pruneReq:
			m, err := l.applyRetention()
			reply <- pruneResult{m, err}
		case <-prune.C:
			if l.cfg.Retention != (Retention{}) {
				if _, err := l.applyRetention(); err != nil {
					l.logError("pruning failed", err)
				}
			}
		}
	}
}

// startLinger reports whether fewer than a bundle's worth of entries
// wait, and if so marks Run lingering: AddAll wakes it again only once
// they do.
func (l *Log) startLinger() bool {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	l.lingering = len(l.queue) < tileWidth
	return l.lingering
}

func (l *Log) stopLinger() {
	l.qmu.Lock()
	l.lingering = false
	l.qmu.Unlock()
}

func (l *Log) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *Log) logError(msg string, err error) {
	if l.cfg.Logger != nil {
		l.cfg.Logger.Error("translog: "+msg, "log", l.origin, "err", err)
	}
}

// stop is Run's end.
func (l *Log) stop() error {
	l.qmu.Lock()
	l.taking = false
	l.qmu.Unlock()
	deadline := time.Now().Add(l.cfg.DrainTimeout)
	for l.group() && time.Now().Before(deadline) {
	}
	l.qmu.Lock()
	left := l.queue
	l.queue = nil
	l.qmu.Unlock()
	l.resolve(left, 0, ErrStopped)
	_, err := l.checkpoint()
	err = errors.Join(err, l.files.close())
	if l.seg != nil {
		err = errors.Join(err, l.seg.f.Close())
		l.seg = nil
	}
	if err != nil {
		return fmt.Errorf("translog: stopping: %w", err)
	}
	return nil
}

// Sign asks Run to sign a checkpoint of the log as it stands now (when
// it grew since the last) and returns the latest.
func (l *Log) Sign(ctx context.Context) (Checkpoint, error) {
	reply := make(chan signResult, 1)
	select {
	case l.signReq <- reply:
	case <-ctx.Done():
		return Checkpoint{}, ctx.Err()
	}
	r := <-reply
	return r.c, r.err
}

// group takes one group from the queue, writes it and publishes it; it
// reports whether more waits.
func (l *Log) group() bool {
	l.qmu.Lock()
	room := l.seg.first + l.cfg.SegmentEntries - l.written // the segment ends at a bundle's end
	n, bytes := 0, 0
	for n < len(l.queue) && int64(n) < room && n < l.cfg.MaxGroup {
		if bytes += 2 + len(l.queue[n].data); bytes > maxGroupBytes && n > 0 {
			break
		}
		n++
	}
	batch := append(l.batch[:0], l.queue[:n]...)
	rest := copy(l.queue, l.queue[n:])
	clear(l.queue[rest:])
	l.queue = l.queue[:rest]
	l.m.queued.Set(float64(rest))
	broken := l.broken
	l.qmu.Unlock()
	l.batch = batch
	if n == 0 {
		return false
	}
	if broken {
		l.resolve(batch, 0, ErrBroken)
		return rest > 0
	}
	err := l.write(batch)
	clear(l.batch)
	return err == nil && rest > 0
}

// write appends batch to the tree and the segment, publishes it, and
// resolves its futures.
func (l *Log) write(batch []pending) error {
	first, now := l.w.size, l.cfg.Now()
	for i := first; i < first+int64(len(batch)); i++ {
		if i%tileWidth == 0 {
			l.locs = append(l.locs, bundleLoc{l.seg.end, int(i - first), now.UnixMilli()})
		}
	}
	l.frameBuf = frame(l.frameBuf, first, now)
	full := l.fullBuf[:0]
	var err error
	for _, p := range batch {
		l.frameBuf = appendEntry(l.frameBuf, p.data)
		if full, err = l.w.append(p.data, full); err != nil {
			break
		}
	}
	l.frameBuf = sealFrame(l.frameBuf, len(batch))
	start := time.Now()
	if err == nil {
		crashPoint("before-write")
		err = l.seg.write(l.frameBuf)
		crashPoint("after-write")
	}
	if err == nil && l.cfg.Durability == DurableGroups {
		err = fdatasync(l.seg.f)
		crashPoint("after-sync")
	}
	l.m.sync.Observe(time.Since(start).Seconds())
	if err != nil {
		// What a failed write or sync left on disk is unknown (a failed
		// fsync may have dropped the pages): take no more; Open finds
		// what is there.
		l.qmu.Lock()
		l.broken, l.taking = true, false
		l.qmu.Unlock()
		l.m.failed.Add(float64(len(batch)))
		l.logError("writing a group failed; the log takes no more entries until it is opened again", err)
		l.resolve(batch, 0, fmt.Errorf("%w: %w", ErrBroken, err))
		return err
	}
	l.written = l.w.size
	if l.cfg.Durability == DurableGroups {
		l.synced = l.written
	}
	l.publish(full)
	l.fullBuf = full[:0]
	l.m.appended.Add(float64(len(batch)))
	l.m.group.Observe(float64(len(batch)))
	l.resolve(batch, first, nil)
	if l.written == l.seg.first+l.cfg.SegmentEntries {
		if err := l.roll(); err != nil {
			l.qmu.Lock()
			l.broken, l.taking = true, false
			l.qmu.Unlock()
			l.logError("starting the next segment failed; the log takes no more entries until it is opened again", err)
			return err
		}
	}
	return nil
}

// publish makes Run's tree the one readers see, and hands the tiles it
// filled to the tile writer.
func (l *Log) publish(full []fullTile) {
	l.mu.Lock()
	l.t = l.w
	l.t.partial = append([][]tlog.Hash(nil), l.w.partial...)
	l.active = activeSeg{first: l.seg.first, path: l.seg.path, locs: l.locs}
	for _, t := range full {
		l.full[t.tileKey] = t.data
	}
	grown := l.grown
	l.grown = make(chan struct{})
	l.mu.Unlock()
	close(grown)
	l.m.size.Set(float64(l.w.size))
	for _, t := range full {
		if t.L > 0 { // level 0 goes in the segment's index
			l.files.put(t)
		}
	}
}

// resolve tells batch's futures: entry i is index first+i, or err.
func (l *Log) resolve(batch []pending, first int64, err error) {
	for i, p := range batch {
		g := p.g
		if err != nil {
			g.err[p.at] = err
		} else {
			g.first[p.at] = first + int64(i)
		}
		g.remaining--
		if g.remaining == 0 {
			close(g.done)
		}
	}
}

func (s *segment) write(b []byte) error {
	for s.end+int64(len(b)) > s.allocated {
		for left := int64(preallocate); left > 0; left -= int64(len(zeros)) {
			if _, err := s.f.WriteAt(zeros, s.allocated); err != nil {
				return fmt.Errorf("writing ahead: %w", err)
			}
			s.allocated += int64(len(zeros))
		}
	}
	n, err := s.f.WriteAt(b, s.end)
	s.end += int64(n)
	if err == nil && n != len(b) {
		err = fmt.Errorf("wrote %d of %d bytes", n, len(b))
	}
	return err
}

// roll seals the full segment — its index written, with its level-0
// tiles, once the tiles above are durable too — and starts the next.
func (l *Log) roll() error {
	if err := l.files.barrier(); err != nil {
		return err
	}
	old := l.seg
	tiles := make([][]byte, len(l.locs))
	l.mu.RLock()
	for i := range tiles {
		tiles[i] = l.full[tileKey{0, old.first>>TileHeight + int64(i)}]
	}
	l.mu.RUnlock()
	for i, t := range tiles {
		if len(t) != tileWidth*tlog.HashSize {
			return fmt.Errorf("sealing the segment from %d: its level-0 tile %d is not in memory", old.first, i)
		}
	}
	sealed := sealedSeg{first: old.first, end: l.written, locs: l.locs}
	idx := encodeIndex(old.first, l.locs, tiles)
	sealed.tilesOff = int64(len(idx) - len(tiles)*tileWidth*tlog.HashSize)
	if err := writeFile(filepath.Join(l.dir, "segments", indexName(old.first)), idx, "tile-write"); err != nil {
		return err
	}
	if err := fdatasync(old.f); err != nil { // under DurableCheckpoints, not yet
		return err
	}
	seg, err := l.createSegment(&l.w) // syncs the directory: the index's name too
	if err != nil {
		return err
	}
	crashPoint("rolled")
	_ = old.f.Close()
	l.seg, l.locs = seg, nil
	l.mu.Lock()
	l.sealed = append(l.sealed, sealed)
	for i := range tiles {
		delete(l.full, tileKey{0, old.first>>TileHeight + int64(i)})
	}
	l.active = activeSeg{first: seg.first, path: seg.path}
	l.mu.Unlock()
	return nil
}

// createSegment writes a segment starting at t's right edge.
func (l *Log) createSegment(t *tree) (*segment, error) {
	path := filepath.Join(l.dir, "segments", segmentName(t.size))
	h := header(l.origin, t)
	if err := writeFile(path, h, ""); err != nil {
		return nil, err
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	return &segment{f: f, path: path, first: t.size, end: int64(len(h)), allocated: int64(len(h))}, nil
}

// checkpoint signs one of the published tree when it grew since the
// latest, and returns the latest.
func (l *Log) checkpoint() (Checkpoint, error) {
	l.mu.RLock()
	t, latest := l.t, l.latest
	l.mu.RUnlock()
	if latest.Note != nil && t.size == latest.Size {
		return latest, nil
	}
	if l.synced < t.size {
		if err := fdatasync(l.seg.f); err != nil {
			return latest, fmt.Errorf("syncing the segment: %w", err)
		}
		l.synced = t.size
	}
	root := t.root()
	signed, err := note.Sign(&note.Note{Text: CheckpointText(l.origin, t.size, root)}, l.signer)
	if err != nil {
		return latest, fmt.Errorf("signing the checkpoint: %w", err)
	}
	if err := writeFile(filepath.Join(l.dir, "checkpoint"), signed, ""); err != nil {
		return latest, fmt.Errorf("writing the checkpoint: %w", err)
	}
	if err := syncDir(l.dir); err != nil {
		return latest, fmt.Errorf("writing the checkpoint: %w", err)
	}
	c := Checkpoint{Size: t.size, Root: root, Note: signed, Signed: l.cfg.Now()}
	l.mu.Lock()
	l.latest = c
	ch := l.signed
	l.signed = make(chan struct{})
	l.mu.Unlock()
	close(ch)
	l.m.checkpointSize.Set(float64(c.Size))
	l.m.checkpointTime.SetToCurrentTime()
	if l.witnesses != nil {
		l.witnesses.offer(c)
	}
	return c, nil
}
