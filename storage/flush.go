package storage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/shaledb/shale/index"
	"github.com/shaledb/shale/storage/lsm"
)

// fenceCheckInterval is how often Run looks for a newer writer (one LIST).
const fenceCheckInterval = 5 * time.Second

// maxBatchBytes bounds one LSM write of a flush (a variable so that tests
// can make flushes of many batches).
var maxBatchBytes = 4 << 20

// cutSeries is a series' cut waiting for its batch to be applied.
type cutSeries struct {
	part int64
	s    *memSeries
	c    *cutData
}

// Flush writes every sample the head holds to the LSM and waits until it is
// durable. Partitions stay open.
func (db *DB) Flush(ctx context.Context) error {
	if db.isClosed() {
		return ErrClosed
	}
	return db.flushHead(ctx, closeNone)
}

// closeMode says which partitions a head flush writes out and drops.
type closeMode int

const (
	closeNone closeMode = iota
	// closeOld closes the partitions no sample can land in anymore.
	closeOld
	// closeAll closes every partition (tests use it to read from the LSM).
	closeAll
)

// flushHead cuts every series of the head, writes the cut samples as sample
// blocks (merge operands) and closes partitions as mode says.
func (db *DB) flushHead(ctx context.Context, mode closeMode) error {
	db.flushMu.Lock()
	defer db.flushMu.Unlock()
	return db.flushHeadLocked(ctx, mode)
}

// flushHeadLocked is flushHead; the caller holds db.flushMu.
//
// The head's lock is held only to take the head log mark and to mark the
// partitions that close: every commit whose record is at or before the mark
// has then applied its samples. Series are cut afterwards, a few at a time,
// so a cut takes those samples and perhaps later ones (which the log keeps,
// and which replay after a crash merges away as duplicates). A cut's samples
// leave memory as soon as its batch is in the LSM's memtable, where reads
// find them: a query takes the head's samples before it reads the LSM, so it
// sees them in one place or both, never neither. The memtable reaches a table
// with kv.Flush below; if that fails the LSM stops taking writes and the head
// log, not truncated, brings the samples back at the next open.
func (db *DB) flushHeadLocked(ctx context.Context, mode closeMode) error {
	start := time.Now()

	h := db.head
	h.mu.Lock()
	var logMark uint64
	if db.opts.WAL {
		logMark = db.w.LogMark()
	}
	maxT := h.maxT.Load()
	h.unflushed.Store(0)
	// A flush asked for by the samples counted so far is this one.
	select {
	case <-db.flushNow:
	default:
	}
	var closing []*headPart
	parts := h.sortedPartsLocked()
	for _, p := range parts {
		// A partition behind the window that took samples since the
		// last flush (a backfill) is written out but stays open until it
		// goes a flush without any.
		appended := p.appended.Swap(false)
		if mode == closeAll || (mode == closeOld && p.end <= db.minValidTime(maxT) && !appended) {
			p.closed.Store(true)
			closing = append(closing, p)
		}
	}
	if len(closing) > 0 && mode == closeOld {
		// Late samples for the partitions closing wait for this (not at
		// a shutdown's flush, after which nothing may open them again).
		// Runs after the partitions left the head (or opened again).
		done := make(chan struct{})
		h.writtenOut = done
		defer func() {
			h.mu.Lock()
			h.writtenOut = nil
			h.mu.Unlock()
			close(done)
		}()
	}
	h.mu.Unlock()

	st, err := db.writeCuts(ctx, parts, maxT)
	if err == nil {
		for _, p := range closing {
			if err = db.writePartitionIndex(ctx, p, maxT); err != nil {
				break
			}
		}
	}
	if err == nil {
		// The flush's writes bypass the WAL (the head log holds their
		// samples until the truncation below): durable once in tables.
		err = db.w.Flush(ctx)
	}
	if err == nil && db.opts.WAL {
		// The cut samples are durable in sample blocks: the records they
		// came from are no longer needed.
		err = db.w.TruncateLog(ctx, logMark)
	}
	if err != nil {
		// Cuts not written stay in s.flushing and are written by the next
		// flush; the partitions stay in the head.
		db.metrics.flushFailures.Inc()
		h.mu.Lock()
		for _, p := range closing {
			p.closed.Store(false)
		}
		h.mu.Unlock()
		return fmt.Errorf("flush head: %w", err)
	}
	if len(closing) > 0 {
		h.mu.Lock()
		for _, p := range closing {
			delete(h.parts, p.start)
		}
		h.mu.Unlock()
	}
	// Partitions the head has moved past keep accepting late samples until
	// they close, but their series hold nothing once cut: let them go.
	for _, p := range parts {
		if !p.closed.Load() && p.end <= maxT-db.retireDelay() {
			db.metrics.seriesRetired.Add(float64(p.retireIdle()))
		}
	}
	// Series that received nothing since the last cut (those of a partition
	// past its end, say) cost the next flush nothing: count those cut here.
	h.flushAt.Store(flushThreshold(db.opts.HeadFlushSamples, st.series))
	db.metrics.flushes.Inc()
	db.metrics.flushedSeries.Add(float64(st.series))
	db.metrics.flushedBytes.Add(float64(st.bytes))
	db.metrics.flushDuration.Observe(time.Since(start).Seconds())
	db.logger.Debug("head flushed", "series", st.series, "bytes", st.bytes,
		"closed_partitions", len(closing), "duration", time.Since(start))
	return nil
}

// retireDelay is how far the head's newest sample must be past a
// partition's end before the partition's series retire: the out-of-order
// window, at least 5 minutes, so that the last scrapes before a boundary,
// still arriving, do not bring back the series they find retired.
func (db *DB) retireDelay() int64 {
	return max(db.opts.OutOfOrderWindow, 5*time.Minute).Milliseconds()
}

// cutStats says what writeCuts wrote.
type cutStats struct {
	series int   // series cut
	bytes  int64 // bytes of sample blocks
}

// writeCuts cuts the series of parts and writes the cut samples as merge
// operands of their series' sample keys, in batches of about maxBatchBytes;
// the cuts of a batch are let go once it is applied. Each batch also holds
// the registry entry (the head's newest time, the partition's data bounds)
// of every partition and the series times of every chunk of refs it writes
// blocks of, built once its series are cut: so whatever of a flush reaches
// the LSM, the bounds and times recorded cover its blocks.
func (db *DB) writeCuts(ctx context.Context, parts []*headPart, maxT int64) (cutStats, error) {
	type chunkOf struct {
		p     *headPart
		chunk uint32
	}
	var (
		b       lsm.Batch
		size    int
		st      cutStats
		pending []cutSeries
		touched []chunkOf // chunks of the batch, in order
		tbuf    []byte
	)
	apply := func() error {
		var lastPart *headPart
		for _, c := range touched {
			if c.p != lastPart {
				b.Put(registryKey(c.p.start), c.p.meta(false, maxT).encode())
				lastPart = c.p
			}
			tbuf = c.p.appendSeriesTimes(tbuf[:0], c.chunk)
			b.Put(timesKey(c.p.start, c.chunk), tbuf)
		}
		if b.Len() > 0 {
			if err := db.write(ctx, &b, false); err != nil {
				return err
			}
		}
		for i, cs := range pending {
			cs.s.lock()
			if cs.s.flushing == cs.c {
				cs.s.flushing = nil
			}
			cs.s.unlock()
			pending[i] = cutSeries{}
		}
		b.Reset() // the batch copied the blocks: keeps its buffer for the next

		size, pending, touched = 0, pending[:0], touched[:0]
		return nil
	}
	// The series are walked a chunk at a time, copied under the
	// partition's lock: retiring and reviving rewrite its slice. Each
	// chunk's series are cut and encoded by cutWorkers goroutines, then
	// batched here in order.
	chunk := make([]*memSeries, 4096)
	cuts := make([]seriesCut, len(chunk))
	for _, p := range parts {
		for lo := 0; ; lo += len(chunk) {
			// The LSM takes writes whatever ctx says unless it is stalled,
			// and cutting a chunk is CPU work: without this a flush whose
			// context ended (the background flush at a shutdown) went on
			// over every series, 10M of them for over a minute, holding
			// flushMu while the shutdown's own flush waited for it past
			// its deadline.
			if err := ctx.Err(); err != nil {
				return st, err
			}
			some := p.seriesFrom(lo, chunk)
			if len(some) == 0 {
				break
			}
			out := cuts[:len(some)]
			cutAll(some, out)
			for i := range out {
				sc := &out[i]
				if sc.c == nil {
					continue // retired, or nothing new since the last cut
				}
				s := sc.s
				st.series++
				pending = append(pending, cutSeries{part: p.start, s: s, c: sc.c})
				blk, err := sc.blk, sc.err
				*sc = seriesCut{}
				if err != nil {
					return st, fmt.Errorf("encode series %d of partition %d: %w", s.ref, p.start, err)
				}
				if len(blk) == 0 {
					continue
				}
				if ch := (chunkOf{p, s.ref / timesChunk}); len(touched) == 0 || touched[len(touched)-1] != ch {
					touched = append(touched, ch)
				}
				b.Merge(samplesKey(p.start, s.ref), blk)
				size += len(blk) + 14
				st.bytes += int64(len(blk))
				if size >= maxBatchBytes {
					if err := apply(); err != nil {
						return st, err
					}
				}
			}
		}
	}
	return st, apply()
}

// seriesCut is one series' cut and its samples encoded as one block.
type seriesCut struct {
	s   *memSeries
	c   *cutData // nil: nothing to write
	blk []byte
	err error
}

// cutWorkers is how many goroutines cut and encode a flush's series. The
// encoding is most of a flush's CPU, and a flush is what a shutdown waits
// for: on 2 cores two goroutines write 1M series out in two thirds of the
// time one took, for the same CPU (BenchmarkFlush).
func cutWorkers() int { return min(runtime.GOMAXPROCS(0), maxCutWorkers) }

// maxCutWorkers bounds cutWorkers (a variable so that a benchmark can
// compare with one).
var maxCutWorkers = 4

// cutAll cuts each series of some that holds something not yet written into
// out[i], spreading the chunk over cutWorkers goroutines.
func cutAll(some []*memSeries, out []seriesCut) {
	const minShare = 256 // fewer series are not worth a goroutine
	n := min(cutWorkers(), max(len(some)/minShare, 1))
	if n == 1 {
		cutRange(some, out)
		return
	}
	var wg sync.WaitGroup
	per := (len(some) + n - 1) / n
	for lo := 0; lo < len(some); lo += per {
		hi := min(lo+per, len(some))
		wg.Go(func() { cutRange(some[lo:hi], out[lo:hi]) })
	}
	wg.Wait()
}

// cutRange cuts and encodes the series of some into out.
func cutRange(some []*memSeries, out []seriesCut) {
	for i, s := range some {
		// Other goroutines run every 64 series, as in the LSM's
		// compactions: a cut encodes blocks for a while.
		if i%64 == 63 {
			runtime.Gosched()
		}
		if s == nil {
			continue // retired: holds nothing
		}
		s.lock()
		if !s.dirtyLocked() && s.flushing == nil {
			s.unlock()
			continue
		}
		c := s.cutLocked()
		s.unlock()
		blk, err := c.block()
		out[i] = seriesCut{s: s, c: c, blk: blk, err: err}
	}
}

// writePartitionIndex writes the postings and label names of a partition the
// head is about to drop, then marks it closed in the registry.
func (db *DB) writePartitionIndex(ctx context.Context, p *headPart, maxT int64) error {
	var b lsm.Batch
	size := 0
	names := map[string]struct{}{}
	err := p.idx.ForEachPostings(0, func(name, value string, bm *roaring.Bitmap) error {
		names[name] = struct{}{}
		enc := index.EncodePostings(nil, bm)
		b.Put(postingsKey(p.start, name, value), enc)
		size += len(enc) + len(name) + len(value) + 11
		if size >= maxBatchBytes {
			if err := ctx.Err(); err != nil {
				return err // as in writeCuts: the LSM would take the batch
			}
			if err := db.write(ctx, &b, false); err != nil {
				return err
			}
			b, size = lsm.Batch{}, 0
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write postings of partition %d: %w", p.start, err)
	}
	for name := range names {
		b.Put(nameKey(p.start, name), nil)
	}
	all, err := p.idx.AllPostings(ctx)
	if err != nil {
		return err
	}
	// Series created by appenders that have not committed (or that an
	// appender holding the partition from before it closed creates while
	// this runs) have no forward-index entry yet: the postings name every
	// series created before they were read, so recording now covers them.
	if err := db.recordSeries(ctx, p, math.MaxUint32); err != nil {
		return fmt.Errorf("record the series of partition %d: %w", p.start, err)
	}
	b.Put(allSeriesKey(p.start), index.EncodePostings(nil, all))
	b.Put(registryKey(p.start), p.meta(true, maxT).encode())
	if err := db.write(ctx, &b, false); err != nil {
		return fmt.Errorf("close partition %d: %w", p.start, err)
	}
	db.metrics.partitionsClosed.Inc()
	return nil
}

// applyRetention drops closed partitions that ended more than the retention
// period before the newest sample.
func (db *DB) applyRetention(ctx context.Context) error {
	if db.opts.Retention <= 0 {
		return nil
	}
	maxT := db.head.maxT.Load()
	if maxT == math.MinInt64 {
		return nil
	}
	cutoff := maxT - db.opts.Retention.Milliseconds()
	parts, err := db.partitions(ctx, math.MinInt64, cutoff)
	if err != nil {
		return err
	}
	var b lsm.Batch
	keepFrom := int64(math.MinInt64)
	for _, p := range parts {
		if p.head != nil || p.start+db.partMs > cutoff {
			continue
		}
		keepFrom = max(keepFrom, p.start+db.partMs)
		pre := partPrefix(p.start)
		b.DeleteRange(pre, prefixEnd(pre))
		b.Delete(registryKey(p.start))
		db.logger.Info("retention drops partition", "start", time.UnixMilli(p.start).UTC(), "cutoff", time.UnixMilli(cutoff).UTC())
		db.metrics.partitionsDropped.Inc()
	}
	if b.Len() == 0 {
		return nil
	}
	if err := db.write(ctx, &b, true); err != nil {
		return err
	}
	db.changed(allTimeMin, keepFrom-1)
	db.dropMetadataBefore(keepFrom)
	return nil
}

// stopping reports whether Run's ctx ended or the DB is closing.
func (db *DB) stopping(ctx context.Context) bool {
	return ctx.Err() != nil || db.isClosed()
}

// Run flushes the head every HeadFlushInterval, and sooner once it holds
// HeadFlushSamples samples (closing partitions that can take no more
// samples), and applies retention, until ctx ends or the DB closes. It
// returns ErrFenced if a newer writer fenced this one.
func (db *DB) Run(ctx context.Context) error {
	t := time.NewTicker(db.opts.HeadFlushInterval)
	defer t.Stop()
	fence := time.NewTicker(fenceCheckInterval)
	defer fence.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-db.closed:
			return nil
		case <-db.Fenced():
			return ErrFenced
		case <-fence.C:
			// An idle writer learns here that a newer one replaced it.
			// Bounded: the writer's requests retry while the store fails,
			// and the outage is reported by the LSM's health.
			cctx, cancel := context.WithTimeout(ctx, fenceCheckInterval)
			err := db.w.CheckFenced(cctx)
			cancel()
			if errors.Is(err, ErrFenced) {
				return err
			} else if err != nil && ctx.Err() == nil {
				db.logger.Debug("fence check failed", "err", err)
			}
			continue
		case <-db.flushNow:
			t.Reset(db.opts.HeadFlushInterval)
		case <-t.C:
		}
		if err := db.flushHead(ctx, closeOld); err != nil {
			if errors.Is(err, ErrFenced) {
				return err
			}
			if db.stopping(ctx) {
				return nil // cut short by the shutdown: Close writes the head out
			}
			db.logger.Error("head flush failed; retrying at the next interval", "err", err)
			continue
		}
		if err := db.applyRetention(ctx); err != nil && !db.stopping(ctx) {
			db.logger.Error("retention failed", "err", err)
		}
	}
}
