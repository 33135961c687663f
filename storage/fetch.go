package storage

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/gorilla"
	"github.com/shaledb/shale/index"
	"github.com/shaledb/shale/storage/lsm"
)

// The read path's object-store work: reading the labels and sample blocks of
// the series a query selected, in few round trips when the cache is cold.
//
// A partition keeps the 'F' and 'S' keys of its series in ref order, so the
// keys of the series a query selects are clustered when their refs are.
// planRanges turns the selected refs of a partition into ranges read with one
// ordered scan each (whose iterator reads runs of adjacent data blocks with
// one ranged read) or, for a lone ref, with one point read; all ranges of all
// partitions are read in parallel, at most fetchConcurrency at once.
// With a block cache, prefetchSelect first loads, in one round of parallel
// ranged reads, every block the query will read in every partition, so that
// the per-partition reads that follow (postings, labels, samples) find them
// cached.

// Range planning. A gap of up to the free gap of unselected refs between two
// selected ones is read rather than paying another request: sample blocks
// hold a few series a data block, forward-index entries tens. Beyond that,
// gaps are merged smallest first while a partition has more than
// maxRangesPerPart ranges and the refs read stay within rangeSpanBudget
// times what the ranges cost unmerged (a lone ref counting as a block's
// worth of refs). A range is split into pieces of at most the chunk
// size, read in parallel, so a large partition is not read by one iterator's
// growing read-ahead in a sequence of round trips.
const (
	samplesFreeGap   = 4
	samplesChunk     = 2048 // ~1 MiB of 2 h sample blocks at 15 s
	forwardFreeGap   = 32
	forwardChunk     = 8192 // ~1 MiB of labels
	maxRangesPerPart = 2 * fetchConcurrency
	rangeSpanBudget  = 3
)

// refRange is the refs [lo, hi] of one partition, read together.
type refRange struct{ lo, hi uint32 }

// planRanges groups refs (sorted, distinct) into the ranges to read.
func planRanges(refs []uint32, freeGap uint32, chunk uint32) []refRange {
	if len(refs) == 0 {
		return nil
	}
	type gap struct {
		i    int // between refs[i] and refs[i+1]
		size uint32
	}
	join := make([]bool, len(refs)) // join[i]: refs[i] and refs[i+1] share a range
	var gaps []gap
	span, ranges := uint64(len(refs)), len(refs)
	// A range costs at least a data block however few refs it holds; the
	// free gap stands for a block's worth of refs.
	need, lo := uint64(0), refs[0]
	for i := 0; i+1 < len(refs); i++ {
		g := refs[i+1] - refs[i] - 1
		if g <= freeGap {
			join[i] = true
			span += uint64(g)
			ranges--
			continue
		}
		gaps = append(gaps, gap{i, g})
		need += max(uint64(refs[i]-lo)+1, uint64(freeGap)+1)
		lo = refs[i+1]
	}
	need += max(uint64(refs[len(refs)-1]-lo)+1, uint64(freeGap)+1)
	if ranges > maxRangesPerPart {
		slices.SortFunc(gaps, func(a, b gap) int { return int(int64(a.size) - int64(b.size)) })
		budget := rangeSpanBudget * need
		for _, g := range gaps {
			if ranges <= maxRangesPerPart || span+uint64(g.size) > budget {
				break
			}
			join[g.i] = true
			span += uint64(g.size)
			ranges--
		}
	}
	var out []refRange
	lo = refs[0]
	for i, ref := range refs {
		if join[i] && i+1 < len(refs) {
			continue
		}
		for uint64(ref)-uint64(lo)+1 > uint64(chunk) {
			out = append(out, refRange{lo, lo + chunk - 1})
			lo += chunk
		}
		out = append(out, refRange{lo, ref})
		if i+1 < len(refs) {
			lo = refs[i+1]
		}
	}
	return out
}

// rangeKeys returns the key range of refs [lo, hi] of a partition's keys
// with sub-prefix sub.
func rangeKeys(part int64, sub byte, r refRange) lsm.KeyRange {
	lo := binary.BigEndian.AppendUint32(partSub(part, sub, 4), r.lo)
	hi := binary.BigEndian.AppendUint32(partSub(part, sub, 5), r.hi)
	return lsm.KeyRange{Lower: lo, Upper: append(hi, 0)}
}

// rangeRead is one range of one partition to read: the values of the
// selected refs in it, refs[lo:hi] of the partition's selected refs, each
// handed to deliver with its index in refs. deliver runs on a worker
// goroutine; value is valid only during the call.
type rangeRead struct {
	part   int64
	sub    byte
	r      refRange
	refs   []uint32 // the partition's selected refs, ascending
	lo, hi int      // the ones in r
	// deliver takes the value of refs[i]; with keeps it may keep it.
	deliver func(i int, value []byte) error
	keeps   bool
	// values, merge and interval, if set, are the scan's value filter,
	// merge operator and interval (scanOpts).
	values   func(k, v []byte) bool
	merge    func(key, existing []byte, operands [][]byte) ([]byte, error)
	interval *lsm.Interval
	// noFill reads past the block cache (markNoFill).
	noFill bool
}

// rangeReads returns the reads of the ranges planned for refs (sorted,
// distinct) of a partition. newDeliver gives each read its deliver.
func rangeReads(part int64, sub byte, refs []uint32, freeGap, chunk uint32, keeps bool, newDeliver func() func(i int, value []byte) error) []rangeRead {
	var out []rangeRead
	for _, r := range planRanges(refs, freeGap, chunk) {
		lo, _ := slices.BinarySearch(refs, r.lo)
		hi, _ := slices.BinarySearch(refs, r.hi+1)
		if lo == hi {
			continue // a piece of a long range between selected refs
		}
		out = append(out, rangeRead{part: part, sub: sub, r: r, refs: refs, lo: lo, hi: hi, deliver: newDeliver(), keeps: keeps})
	}
	return out
}

// readRanges runs the reads, at most fetchConcurrency at once, and returns
// the first error.
func (db *DB) readRanges(ctx context.Context, reads []rangeRead) error {
	if len(reads) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan *rangeRead)
	)
	for range min(fetchConcurrency, len(reads)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rd := range next {
				if err := db.readRange(ctx, rd); err != nil {
					mu.Lock()
					if first == nil {
						first = err
						cancel()
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range reads {
		select {
		case next <- &reads[i]:
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

func (db *DB) readRange(ctx context.Context, rd *rangeRead) error {
	if rd.hi-rd.lo == 1 {
		ref := rd.refs[rd.lo]
		v, ok, err := db.lsm.Get(ctx, rangeKeys(rd.part, rd.sub, refRange{ref, ref}).Lower)
		if err != nil {
			return fmt.Errorf("read key %q of series %d in partition %d: %w", rd.sub, ref, rd.part, err)
		}
		if ok {
			return rd.deliver(rd.lo, v)
		}
		return nil
	}
	// Keys come in ascending order, as the refs do: a cursor over the refs
	// tells the wanted keys, whose values alone the scan reads. A key that
	// does not parse is wanted, for fn to report.
	var (
		next, at = rd.lo, -1
		badKey   error
	)
	want := func(k []byte) bool {
		ref, err := parseRef(k)
		if err != nil {
			badKey = err
			return true
		}
		for next < rd.hi && rd.refs[next] < ref {
			next++
		}
		if next < rd.hi && rd.refs[next] == ref {
			at = next
			return true
		}
		return false
	}
	kr := rangeKeys(rd.part, rd.sub, rd.r)
	o := scanOpts{readAhead: true, keep: rd.keeps, values: rd.values, merge: rd.merge, interval: rd.interval, noFill: rd.noFill}
	err := db.scanWith(ctx, kr.Lower, kr.Upper, want, o, func(_, v []byte) error {
		if badKey != nil {
			return badKey
		}
		return rd.deliver(at, v)
	})
	if err != nil {
		return fmt.Errorf("read keys %q of series %d-%d in partition %d: %w", rd.sub, rd.r.lo, rd.r.hi, rd.part, err)
	}
	return nil
}

// labelReads returns the reads of the labels of refs (sorted, distinct) of
// a partition read from the LSM: each found is put in lsets[i] and noted in
// found[i].
func labelReads(part int64, refs []uint32, lsets []labels.Labels, found []bool) []rangeRead {
	return rangeReads(part, subForward, refs, forwardFreeGap, forwardChunk, false, func() func(int, []byte) error {
		builder := labels.NewScratchBuilder(16)
		return func(i int, v []byte) error {
			lset, err := index.DecodeLabels(v, &builder)
			if err != nil {
				return fmt.Errorf("partition %d series %d: %w", part, refs[i], err)
			}
			lsets[i], found[i] = lset, true
			return nil
		}
	})
}

// sampleReads returns the reads of the persisted sample blocks of each
// segment that may hold samples in [mint, maxt], which put them before the
// segment's in-memory blocks. A key holds one block per head flush until
// compaction merges them, and a short range at the end of a partition (an
// alerting rule's [5m]) needs the last one or two: the scan reads no table
// block whose sample blocks all miss the range (lsm.Iterator.SetInterval,
// with sampleInterval), leaves the others' blocks that miss it out without
// copying them (lsm.Iterator.SetValueFilter), and does not frame a lone
// block (scanMergeValues).
func sampleReads(segs []*qSegment, mint, maxt int64) []rangeRead {
	if len(segs) == 0 {
		return nil
	}
	byPart := map[int64][]*qSegment{}
	for _, s := range segs {
		byPart[s.part] = append(byPart[s.part], s)
	}
	var reads []rangeRead
	for part, ps := range byPart {
		// A partition has one segment per selected ref.
		slices.SortFunc(ps, func(a, b *qSegment) int { return cmp.Compare(a.ref, b.ref) })
		refs := make([]uint32, len(ps))
		for i, s := range ps {
			refs[i] = s.ref
		}
		from := len(reads)
		cuts := len(ps) >= minCutSeries
		reads = append(reads, rangeReads(part, subSamples, refs, samplesFreeGap, samplesChunk, true, func() func(int, []byte) error {
			// The segments' source lists are cut from slabs, which grow
			// from a few series' worth to hundreds: one allocation for
			// many series instead of one each, and little to spare for a
			// read of a few.
			var (
				slab     []gorilla.Source
				slabSize int
				cut      = rangeCutter{mint: mint, maxt: maxt}
			)
			return func(i int, v []byte) error {
				if len(v) == 0 {
					return nil
				}
				s := ps[i]
				// Each ref is in exactly one range, so one worker writes
				// each segment. The LSM's blocks are older than the
				// head's and come first, oldest first.
				n := sampleBlockCount(v) + len(s.srcs)
				if cap(slab)-len(slab) < n {
					slabSize = min(max(2*slabSize, 8), 256)
					slab = make([]gorilla.Source, 0, max(n, slabSize))
				}
				all := slab[len(slab) : len(slab) : len(slab)+n]
				slab = slab[:len(slab)+n]
				// v is the segment's to keep: the point read (Get)
				// returns the caller's value, the scan takes it.
				err := sampleBlocks(v, func(blk []byte) error {
					src, ok := gorilla.Source{Block: blk}, true
					if cuts {
						src, ok = cut.source(blk)
					}
					if ok {
						all = append(all, src)
					}
					return nil
				})
				if err != nil {
					return fmt.Errorf("sample value of series %d in partition %d: %w", s.ref, part, err)
				}
				s.srcs = append(all, s.srcs...)
				return nil
			}
		})...)
		iv := &lsm.Interval{Lo: mint, Hi: maxt}
		for i := from; i < len(reads); i++ {
			reads[i].values = func(_, blk []byte) bool { return mayHoldRange(blk, mint, maxt) }
			reads[i].merge = scanMergeValues
			reads[i].interval = iv
		}
	}
	return reads
}

// A query keeps each selected series' blocks from its Select to the end of
// its evaluation. An alerting rule's [5m] over compacted 2 h blocks needs
// about one sample in 24 of each, and the blocks read past the cache, or
// that the cache turns away, are the query's alone: 3.9 KB a series held
// (a 1M-series query held about 4 GB) for some 20 samples. So a float block
// whose samples in the query's range take, decoded, less than half its
// size is decoded to those samples as it is delivered (gorilla's
// AppendRange, a Source's Floats), and the block is left to the cache or
// the collector. The iterator bounds what it walks by the same range, so it
// walks the same samples; it decodes them at the read instead of at the
// evaluation, on the read's worker. Blocks of histograms are kept whole, and
// so are the blocks of a partition of which the query selects fewer than
// minCutSeries series: what they hold is small, and a block the cache holds
// costs nothing more, where the decoded samples are new memory (an
// alerting rule's instant query of 100 cached series took 11 % more CPU).
const (
	// decodedSampleBytes is what a decoded float sample takes.
	decodedSampleBytes = 16
	// minCutBytes: smaller blocks are kept as they are.
	minCutBytes = 256
	// maxCutSlab is the most samples the decoded samples of a read are cut
	// from at a time: the slabs grow from a block's worth to it as a read
	// cuts more blocks.
	maxCutSlab = 4096
)

// minCutSeries is how many series of a partition a query must select for
// their blocks to be cut. A variable for tests.
var minCutSeries = 1024

// cutIterators are the iterators that cut blocks, with their decoding
// scratch (a block's worth of samples): a query has a cutter a read, and
// most cut a few blocks.
var cutIterators = sync.Pool{New: func() any { return new(gorilla.Iterator) }}

// rangeCutter decodes the sample blocks of one read that are worth it to
// their samples in the query's range. It is not safe for concurrent use:
// each read has its own.
type rangeCutter struct {
	mint, maxt int64
	ts         []int64
	vs         []float64
	runs       []gorilla.Floats
}

// source returns the source of blk: the block itself, or its samples in the
// range when they take less than half the block's size decoded, or no source
// (ok false) when it has none in it. A block that does not decode is kept
// as it is: the query's iterator reports it.
func (c *rangeCutter) source(blk []byte) (src gorilla.Source, ok bool) {
	src = gorilla.Source{Block: blk}
	if len(blk) < minCutBytes {
		return src, true
	}
	m, err := gorilla.ReadMeta(blk)
	if err != nil || m.Kind != gorilla.KindFloat || m.Count < 2 || m.MaxTime <= m.MinTime {
		return src, true
	}
	// The samples in the range, as their share of the block's time span
	// (in floats: a damaged header's times may span the whole int64).
	lo, hi := max(m.MinTime, c.mint), min(m.MaxTime, c.maxt)
	n := int(float64(m.Count)*max(float64(hi)-float64(lo), 0)/(float64(m.MaxTime)-float64(m.MinTime))) + 1
	if n*decodedSampleBytes >= len(blk)/2 {
		return src, true
	}
	// Room for about twice the estimate; more samples than that (times
	// unevenly spread) grow the slab by appending.
	if want := min(2*n+16, m.Count); cap(c.ts)-len(c.ts) < want {
		size := max(min(2*cap(c.ts), maxCutSlab), want)
		c.ts, c.vs = make([]int64, 0, size), make([]float64, 0, size)
	}
	from := len(c.ts)
	it := cutIterators.Get().(*gorilla.Iterator)
	ts, vs, err := it.AppendRange(c.ts, c.vs, blk, c.mint, c.maxt)
	cutIterators.Put(it)
	if err != nil {
		return src, true
	}
	c.ts, c.vs = ts, vs
	if len(ts) == from {
		return gorilla.Source{}, false
	}
	if len(c.runs) == cap(c.runs) {
		c.runs = make([]gorilla.Floats, 0, min(max(2*cap(c.runs), 8), 256))
	}
	c.runs = append(c.runs, gorilla.Floats{T: ts[from:len(ts):len(ts)], V: vs[from:len(vs):len(vs)]})
	return gorilla.Source{Floats: &c.runs[len(c.runs)-1]}, true
}

// noFillShare is how many times the block cache's capacity the stored
// blocks of a query's sample reads must come to for them to read past the
// cache (lsm.Iterator.SetNoFill). A query of 1M series' 2 h blocks of
// noisy floats reads 3.7 GB; with a RAM tier of a GiB, offering each block
// to the cache evicted as many blocks (other queries' among them) for a
// small share of hits the next time, and copying and offering them cost a
// third of the query's CPU. Below it, blocks go through the cache as
// before: a query somewhat larger than the cache still finds the share of
// it that the cache keeps from one run to the next.
const noFillShare = 2

// markNoFill marks the reads to read past the block cache when their stored
// blocks come to more than noFillShare times its capacity. Sizing reads the
// tables' indexes only: first once a partition, from its first read to its
// last (what most queries need: their partitions come to less than that),
// then read by read. A query whose reads are few, or a view without a cache
// that says its capacity, is left alone.
func (db *DB) markNoFill(ctx context.Context, reads []rangeRead) {
	capacity := db.lsm.CacheCapacity()
	if capacity <= 0 || len(reads) < minNoFillReads {
		return
	}
	limit := noFillShare * capacity
	// sum sizes the ranges of reads grouped by whole (the reads of a
	// partition are adjacent, in key order) and reports whether they come to
	// more than limit.
	sum := func(whole bool) (over, ok bool) {
		var total int64
		for i := 0; i < len(reads); {
			j := i + 1
			for whole && j < len(reads) && reads[j].part == reads[i].part {
				j++
			}
			lo := rangeKeys(reads[i].part, reads[i].sub, reads[i].r)
			hi := rangeKeys(reads[j-1].part, reads[j-1].sub, reads[j-1].r)
			n, err := db.lsm.RangeBytes(ctx, lo.Lower, hi.Upper)
			if err != nil {
				return false, false
			}
			if total += n; total > limit {
				return true, true
			}
			i = j
		}
		return false, true
	}
	if over, ok := sum(true); !over || !ok {
		return
	}
	if over, _ := sum(false); over {
		for j := range reads {
			reads[j].noFill = true
		}
		db.metrics.pastCache.Inc()
	}
}

// minNoFillReads is the fewest sample reads markNoFill sizes: a read spans
// at most samplesChunk series, so fewer reads than this cannot come near a
// cache of even a few hundred MiB, and sizing them would cost every small
// query a little. A variable for tests.
var minNoFillReads = 8

// prefetchSelect evaluates ms on every partition of parts in parallel,
// loading first, in one round of parallel ranged reads, the postings of
// its equality matchers in the partitions read from the LSM, so that a cold
// Select costs one round trip for postings whatever the number of
// partitions; the labels and sample blocks of the selected series are read
// afterwards, in one round too (see readRanges and lsm.Iterator.
// SetReadAhead). It does nothing without a block cache. Errors are left
// for the reads that follow to report.
//
// It returns the series each partition's Select gave, by the index of the
// partition in parts, for the caller to use instead of selecting again; an
// entry is nil where it did not select (or the Select failed).
func (db *DB) prefetchSelect(ctx context.Context, parts []partView, ms []*labels.Matcher) []*roaring.Bitmap {
	p := db.lsm
	if !p.Cached() || len(parts) == 0 {
		return nil
	}
	lsmParts := 0
	for _, pv := range parts {
		if pv.head == nil {
			lsmParts++
		}
	}
	if lsmParts == 0 {
		return nil
	}
	sels := make([]*roaring.Bitmap, len(parts))
	whole := db.wholePartitions(ctx, parts, ms) // coldread.go
	var (
		wg  sync.WaitGroup
		sem = make(chan struct{}, fetchConcurrency)
	)
	for i, pv := range parts {
		if pv.head != nil {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			// The postings of the matchers in one round: of equality
			// matchers each with the block after it, which a point read
			// of a key ending a block would read next, of the others all
			// their label's where small; or the whole partition, where it
			// is small and the query selects by metric name (coldread.go).
			var rs []lsm.KeyRange
			wholePart := whole != nil && whole[i]
			if wholePart {
				rs = append(rs, partRange(pv.start))
			}
			for _, m := range ms {
				switch {
				case wholePart:
				case m.Type == labels.MatchEqual && m.Value != "":
					k := postingsKey(pv.start, m.Name, m.Value)
					rs = append(rs, lsm.KeyRange{Lower: k, Upper: append(k, 0)})
				default:
					// Any other matcher reads the postings of many of
					// its label's values: all of them in this round, if
					// they are few bytes (coldread.go).
					if r, ok := db.smallLabelPostings(ctx, pv.start, m.Name); ok {
						rs = append(rs, r)
					}
				}
			}
			// Each range may span many tables (a partition's keys are in
			// every L0 table flushed while it was written): the blocks of
			// all of them are read at once, not one table after another.
			_ = p.PrefetchRanges(ctx, rs, fetchConcurrency)
			bm, err := index.Select(ctx, db.indexReader(pv), ms...)
			if err != nil {
				return
			}
			sels[i] = bm
		}()
	}
	wg.Wait()
	return sels
}
