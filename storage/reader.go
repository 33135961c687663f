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
//
// A start recovers every series of the open partitions this way (20M at
// 10M active series), so the work is split in two stages that run at once:
// a goroutine reads the index and decodes and hashes each series' labels,
// handing them over a batch at a time, while this one adds them to p's
// index, which takes p's locks and must go in ref order.
func (db *DB) loadForwardLocked(ctx context.Context, p *headPart) error {
	lo := forwardKey(p.start, uint32(len(p.series)))
	hi := prefixEnd(partSub(p.start, subForward, 0))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan []forwardEntry, 4)
	var scanErr error // set before batches is closed
	go func() {
		defer close(batches)
		scanErr = db.decodeForward(ctx, lo, hi, p.start, batches)
	}()
	var err error
	for batch := range batches {
		for _, e := range batch {
			if err != nil {
				break // the scan is cancelled; its batches are drained
			}
			if int(e.ref) != len(p.series) {
				err = fmt.Errorf("partition %d: forward index has ref %d where %d was expected", p.start, e.ref, len(p.series))
			} else if _, err = p.createLocked(e.hash, e.lset); err == nil {
				p.recorded.Store(uint32(len(p.series)))
			}
			if err != nil {
				cancel()
			}
		}
	}
	if err != nil {
		return err
	}
	return scanErr
}

// forwardEntry is one series of a forward index, decoded.
type forwardEntry struct {
	ref  uint32
	hash uint64
	lset labels.Labels
}

// forwardBatch is how many series loadForwardLocked's stages hand over at once.
const forwardBatch = 512

// decodeForward reads the forward-index entries of partition part in
// [lo, hi) and sends them to out in batches, in key (ref) order, until ctx
// ends.
func (db *DB) decodeForward(ctx context.Context, lo, hi []byte, part int64, out chan<- []forwardEntry) error {
	builder := labels.NewScratchBuilder(16)
	batch := make([]forwardEntry, 0, forwardBatch)
	send := func() error {
		select {
		case out <- batch:
			batch = make([]forwardEntry, 0, forwardBatch)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err := db.scan(ctx, lo, hi, func(k, v []byte) error {
		ref, err := parseRef(k)
		if err != nil {
			return err
		}
		lset, err := index.DecodeLabels(v, &builder)
		if err != nil {
			return fmt.Errorf("partition %d series %d: %w", part, ref, err)
		}
		batch = append(batch, forwardEntry{ref: ref, hash: lset.Hash(), lset: lset})
		if len(batch) == forwardBatch {
			return send()
		}
		return nil
	})
	if err == nil && len(batch) > 0 {
		err = send()
	}
	return err
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
