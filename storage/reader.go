package storage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/index"
	"github.com/shaledb/shale/storage/lsm"
)

// ErrReadOnly is returned by writes to a DB opened for reading only.
var ErrReadOnly = errors.New("storage: read-only replica: writes go to the writer")

// followed holds, in a read-only DB, the index of each partition the writer
// still has open: built from the forward index, which the writer extends as
// series appear, and brought up to date on every query.
type followed struct {
	mu    sync.Mutex
	parts map[int64]*headPart
	// The writer's head log records after the truncation mark logAfter and
	// before logNext are applied to the followed series, so a reader also
	// sees samples not yet in sample blocks. When the writer truncates the
	// log (the samples are then in sample blocks), the applied samples are
	// dropped and the records left are replayed.
	logAfter uint64
	logNext  lsm.LogPos
	// manifest is the writer's manifest version the last call saw: when it
	// changes, OnChange hears of the whole time range.
	manifest uint64
}

// followOpenPartition returns the index of a partition the writer has open,
// with every series the LSM holds so far.
func (db *DB) followOpenPartition(ctx context.Context, part int64) (*headPart, error) {
	db.follow.mu.Lock()
	defer db.follow.mu.Unlock()
	return db.followOpenPartitionLocked(ctx, part)
}

func (db *DB) followOpenPartitionLocked(ctx context.Context, part int64) (*headPart, error) {
	if db.follow.parts == nil {
		db.follow.parts = map[int64]*headPart{}
	}
	p := db.follow.parts[part]
	if p == nil {
		p = newHeadPart(part, part+db.partMs)
		db.follow.parts[part] = p
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p, db.loadForwardLocked(ctx, p)
}

// loadForwardLocked adds to p the series of the LSM's forward index that it
// does not have yet. The caller holds p.mu.
func (db *DB) loadForwardLocked(ctx context.Context, p *headPart) error {
	builder := labels.NewScratchBuilder(16)
	lo := forwardKey(p.start, uint32(len(p.series)))
	hi := prefixEnd(partSub(p.start, subForward, 0))
	return db.scan(ctx, lo, hi, func(k, v []byte) error {
		ref, err := parseRef(k)
		if err != nil {
			return err
		}
		if int(ref) != len(p.series) {
			return fmt.Errorf("partition %d: forward index has ref %d where %d was expected", p.start, ref, len(p.series))
		}
		lset, err := index.DecodeLabels(v, &builder)
		if err != nil {
			return fmt.Errorf("partition %d series %d: %w", p.start, ref, err)
		}
		if _, err := p.createLocked(lset.Hash(), lset); err != nil {
			return err
		}
		p.recorded.Store(uint32(len(p.series)))
		return nil
	})
}

// followHeadLog applies the writer's head log records that appeared since
// the last call to the followed partitions.
func (db *DB) followHeadLog(ctx context.Context) error {
	f := &db.follow
	f.mu.Lock()
	defer f.mu.Unlock()
	if v := db.r.ManifestVersion(); v != f.manifest {
		f.manifest = v
		db.changed(allTimeMin, allTimeMax)
	}
	apply := func(pos lsm.LogPos, rec []byte) error {
		oldest, newest := int64(math.MaxInt64), int64(math.MinInt64)
		defer func() { db.changed(oldest, newest) }()
		err := decodeLogRecord(rec, func(e *logEntry) error {
			oldest, newest = min(oldest, e.t), max(newest, e.t)
			p, err := db.followOpenPartitionLocked(ctx, e.part)
			if err != nil {
				return err
			}
			s := p.seriesByRef(e.ref)
			if s == nil {
				return nil // its forward-index entry is not visible yet; the next call sees it
			}
			s.lock()
			defer s.unlock()
			return s.appendLocked(sample{t: e.t, v: e.v, h: e.h, fh: e.fh})
		})
		if err != nil {
			return fmt.Errorf("head log record %d/%d: %w", pos.WAL, pos.Index, err)
		}
		f.logNext = lsm.LogPos{WAL: pos.WAL, Index: pos.Index + 1}
		return nil
	}
	after, err := db.r.ReadLog(f.logNext, apply)
	if err != nil || after == f.logAfter {
		return err
	}
	// The writer truncated records applied before: their samples are in
	// sample blocks now. Start over from the first record left.
	for _, p := range f.parts {
		for _, s := range p.allSeries() {
			if s == nil {
				continue // retired: holds nothing
			}
			s.lock()
			s.app.Reset(math.MinInt64)
			s.x = nil
			s.unlock()
		}
	}
	f.logAfter, f.logNext = after, lsm.LogPos{}
	_, err = db.r.ReadLog(f.logNext, apply)
	return err
}
