package storage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/index"
)

// ErrReadOnly is returned by writes to a DB opened for reading only.
var ErrReadOnly = errors.New("storage: read-only replica: writes go to the writer")

// followed holds, in a read-only DB, the index of each partition the writer
// still has open: built from the forward index, which the writer extends as
// series appear, and brought up to date on every query.
type followed struct {
	mu    sync.Mutex
	parts map[int64]*headPart
	// The writer's head log records logFrom..logNext-1 are applied to the
	// followed series, so a reader also sees samples not yet in sample
	// blocks. When the writer deletes records (their samples are then in
	// sample blocks), the applied samples are dropped and the rest replayed.
	logFrom, logNext uint64
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
	return db.kv.Scan(ctx, lo, hi, func(k, v []byte) error {
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
		_, err = p.createLocked(lset.Hash(), lset, nil)
		return err
	})
}

// errStopScan ends a scan early.
var errStopScan = errors.New("stop scan")

// followHeadLog applies the writer's head log records that appeared since
// the last call to the followed partitions.
func (db *DB) followHeadLog(ctx context.Context) error {
	f := &db.follow
	f.mu.Lock()
	defer f.mu.Unlock()
	var first uint64
	found := false
	err := db.kv.Scan(ctx, []byte{keyHeadLog}, []byte{keyHeadLog + 1}, func(k, _ []byte) error {
		if len(k) == 9 {
			first, found = uint64FromKey(k[1:]), true
		}
		return errStopScan
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return err
	}
	if !found || first > f.logFrom {
		// Records applied before were deleted: their samples are in sample
		// blocks now. Start over from the oldest record left.
		for _, p := range f.parts {
			for _, s := range p.allSeries() {
				s.mu.Lock()
				s.app, s.sealed, s.ooo, s.maxT = nil, nil, nil, math.MinInt64
				s.mu.Unlock()
			}
		}
		f.logFrom, f.logNext = first, first
		if !found {
			return nil
		}
	}
	err = db.kv.Scan(ctx, headLogKey(f.logNext), []byte{keyHeadLog + 1}, func(k, v []byte) error {
		if len(k) != 9 {
			return fmt.Errorf("head log key %x: want 9 bytes", k)
		}
		seq := uint64FromKey(k[1:])
		err := decodeLogRecord(v, func(e *logEntry) error {
			p, err := db.followOpenPartitionLocked(ctx, e.part)
			if err != nil {
				return err
			}
			s := p.seriesByRef(e.ref)
			if s == nil {
				return nil // its forward-index entry is not visible yet; the next call sees it
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.appendLocked(sample{t: e.t, v: e.v, h: e.h, fh: e.fh})
		})
		if err != nil {
			return fmt.Errorf("head log record %d: %w", seq, err)
		}
		f.logNext = seq + 1
		return nil
	})
	return err
}
