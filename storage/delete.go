package storage

import (
	"context"
	"fmt"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/shaledb/shale/gorilla"
	"github.com/shaledb/shale/index"
	"github.com/shaledb/shale/storage/lsm"
)

// Delete removes the samples in [mint, maxt] (ms, inclusive) of every series
// matching all of ms. It first flushes the head, so that no head log record
// can bring deleted samples back after a crash, then rewrites the affected
// sample blocks. Series stay in the index. While the store has been failing
// for longer than Options.WriteTimeout it fails at once with ErrUnavailable.
func (db *DB) Delete(ctx context.Context, mint, maxt int64, ms ...*labels.Matcher) error {
	if db.readOnly {
		return ErrReadOnly
	}
	if db.isClosed() {
		return ErrClosed
	}
	if err := db.checkWritable(); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	db.flushMu.Lock()
	defer db.flushMu.Unlock()
	if err := db.flushHeadLocked(ctx, closeNone); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	parts, err := db.partitions(ctx, mint, maxt)
	if err != nil {
		return err
	}
	deleted := 0
	for _, pv := range parts {
		bm, err := index.Select(ctx, db.indexReader(pv), ms...)
		if err != nil {
			return fmt.Errorf("delete: select in partition %d: %w", pv.start, err)
		}
		var b lsm.Batch
		for it := bm.Iterator(); it.HasNext(); {
			ref := it.Next()
			if pv.head != nil {
				if s := pv.head.seriesByRef(ref); s != nil {
					if err := s.deleteRange(mint, maxt); err != nil {
						return err
					}
				}
			}
			key := samplesKey(pv.start, ref)
			v, ok, err := db.lsm.Get(ctx, key)
			if err != nil {
				return fmt.Errorf("delete: read series %d of partition %d: %w", ref, pv.start, err)
			}
			if !ok {
				continue
			}
			if v, err = mergedSampleValue(v); err != nil {
				return fmt.Errorf("delete: series %d of partition %d: %w", ref, pv.start, err)
			}
			kept, err := filterBlock(v, mint, maxt)
			if err != nil {
				return fmt.Errorf("delete: series %d of partition %d: %w", ref, pv.start, err)
			}
			if len(kept) == 0 {
				b.Delete(key)
			} else {
				b.Put(key, kept)
			}
			deleted++
		}
		if b.Len() > 0 {
			if err := db.write(ctx, &b, true); err != nil {
				return fmt.Errorf("delete: write partition %d: %w", pv.start, err)
			}
		}
	}
	if err := db.sync(ctx); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	db.changed(mint, maxt)
	db.logger.Info("series data deleted", "mint", mint, "maxt", maxt, "matchers", fmt.Sprint(ms), "series_blocks", deleted)
	return nil
}

// deleteRange drops the series' in-memory samples in [mint, maxt].
func (s *memSeries) deleteRange(mint, maxt int64) error {
	s.lock()
	defer s.unlock()
	blks, err := s.snapshotLocked(nil)
	if err != nil || len(blks) == 0 {
		return err
	}
	merged, err := gorilla.MergeAll(nil, blks...)
	if err != nil {
		return err
	}
	kept, err := collectSamples(merged, mint, maxt)
	if err != nil {
		return err
	}
	s.app.Reset(s.maxT())
	s.x, s.flushing = nil, nil
	if len(kept) > 0 {
		blks, err := encodeSamples(nil, kept)
		if err != nil {
			return err
		}
		s.x = &seriesExtra{sealed: blks}
	}
	return nil
}

// filterBlock returns blk without its samples in [mint, maxt], or nil if
// none remain.
func filterBlock(blk []byte, mint, maxt int64) ([]byte, error) {
	kept, err := collectSamples(blk, mint, maxt)
	if err != nil || len(kept) == 0 {
		return nil, err
	}
	blks, err := encodeSamples(nil, kept)
	if err != nil {
		return nil, err
	}
	if len(blks) == 1 {
		return blks[0], nil
	}
	return gorilla.MergeAll(nil, blks...)
}

// collectSamples returns the samples of blk outside [mint, maxt].
func collectSamples(blk []byte, mint, maxt int64) ([]sample, error) {
	it, err := gorilla.NewIterator(blk)
	if err != nil {
		return nil, err
	}
	var out []sample
	for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
		t := it.AtT()
		if t >= mint && t <= maxt {
			continue
		}
		switch vt {
		case chunkenc.ValFloat:
			_, v := it.At()
			out = append(out, sample{t: t, v: v})
		case chunkenc.ValHistogram:
			_, h := it.AtHistogram(nil)
			out = append(out, sample{t: t, h: h})
		case chunkenc.ValFloatHistogram:
			_, fh := it.AtFloatHistogram(nil)
			out = append(out, sample{t: t, fh: fh})
		}
	}
	return out, it.Err()
}
