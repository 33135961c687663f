package storage

import (
	"context"
	"fmt"
	"sync"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/index"
)

// The read path's object-store work: reading the labels and sample blocks of
// the series a query selected.

// forEachSeriesLabels calls fn with the labels of each series in bm of a
// partition read from the LSM, in ref order.
func (db *DB) forEachSeriesLabels(ctx context.Context, part int64, bm *roaring.Bitmap, fn func(ref uint32, lset labels.Labels)) error {
	builder := labels.NewScratchBuilder(16)
	lo, hi := forwardKey(part, bm.Minimum()), forwardKey(part, bm.Maximum())
	hi = append(hi, 0)
	return db.kv.Scan(ctx, lo, hi, func(k, v []byte) error {
		ref, err := parseRef(k)
		if err != nil {
			return err
		}
		if !bm.Contains(ref) {
			return nil
		}
		lset, err := index.DecodeLabels(v, &builder)
		if err != nil {
			return fmt.Errorf("partition %d series %d: %w", part, ref, err)
		}
		fn(ref, lset)
		return nil
	})
}

// fetchBlocks reads the persisted sample block of each segment, in
// parallel, and puts it before the segment's in-memory blocks.
func (db *DB) fetchBlocks(ctx context.Context, segs []*qSegment) error {
	if len(segs) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan *qSegment)
	)
	workers := min(fetchConcurrency, len(segs))
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seg := range next {
				v, ok, err := db.kv.Get(ctx, samplesKey(seg.part, seg.ref))
				if err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("read samples of series %d in partition %d: %w", seg.ref, seg.part, err)
						cancel()
					}
					mu.Unlock()
					continue
				}
				if ok && len(v) > 0 {
					seg.blocks = append([][]byte{v}, seg.blocks...)
				}
			}
		}()
	}
	for _, seg := range segs {
		select {
		case next <- seg:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
