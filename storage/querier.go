package storage

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	promstorage "github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/shaledb/shale/gorilla"
	"github.com/shaledb/shale/index"
)

// fetchConcurrency bounds the parallel LSM reads of one query.
const fetchConcurrency = 32

// partView is a partition a query reads: from the head if it is open here,
// otherwise from the LSM.
type partView struct {
	start int64
	head  *headPart
	// meta is the registry entry of a partition read from the LSM.
	meta partitionMeta
}

// mayHold reports whether the partition may hold samples in [mint, maxt]:
// its data bounds, persisted in its registry entry or kept by the writer's
// head, say so. A read-only DB's followed partitions are always read: the
// writer's head log may hold samples outside the bounds recorded so far.
func (db *DB) mayHold(pv partView, mint, maxt int64) bool {
	lo, hi, ok := pv.meta.dataMin, pv.meta.dataMax, pv.meta.hasData()
	if pv.head != nil {
		if db.readOnly {
			return true
		}
		lo, hi, ok = pv.head.bounds()
	}
	return ok && lo <= maxt && hi >= mint
}

// partitions returns the partitions overlapping [mint, maxt] in time order.
// The head's are taken first, so a partition the head drops meanwhile is
// read from the LSM, where it is complete by then.
func (db *DB) partitions(ctx context.Context, mint, maxt int64) ([]partView, error) {
	if db.readOnly {
		if err := db.followHeadLog(ctx); err != nil {
			return nil, fmt.Errorf("follow the writer's head log: %w", err)
		}
	}
	var out []partView
	seen := map[int64]bool{}
	for _, p := range db.head.partsOverlapping(mint, maxt) {
		out = append(out, partView{start: p.start, head: p})
		seen[p.start] = true
	}
	lo := registryKey(db.partitionOf(max(mint, math.MinInt64+db.partMs)))
	if mint == math.MinInt64 {
		lo = []byte{keyRegistry}
	}
	hi := []byte{keyRegistry + 1}
	if maxt < math.MaxInt64-db.partMs {
		hi = registryKey(db.partitionOf(maxt) + db.partMs)
	}
	var readerParts []int64
	// Read ahead: the registry has entries in every table a flush wrote.
	err := db.scanWith(ctx, lo, hi, nil, scanOpts{readAhead: true}, func(k, v []byte) error {
		part := getPart(k[1:])
		if seen[part] || part+db.partMs <= mint || part > maxt {
			return nil
		}
		m, err := decodePartitionMeta(v)
		if err != nil {
			return err
		}
		if !m.closed {
			if !db.readOnly {
				return nil // being created by the head right now; it holds nothing yet
			}
			readerParts = append(readerParts, part)
			return nil
		}
		out = append(out, partView{start: part, meta: m})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	for _, part := range readerParts {
		p, err := db.followOpenPartition(ctx, part)
		if err != nil {
			return nil, err
		}
		out = append(out, partView{start: part, head: p})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out, nil
}

// reader returns the index of a partition.
func (db *DB) indexReader(pv partView) index.Reader {
	if pv.head != nil {
		return pv.head.idx
	}
	return &lsmIndex{db: db, part: pv.start}
}

// Querier returns a querier of samples in [mint, maxt].
func (db *DB) Querier(mint, maxt int64) (promstorage.Querier, error) {
	if db.isClosed() {
		return nil, ErrClosed
	}
	return &querier{db: db, mint: mint, maxt: maxt}, nil
}

// ChunkQuerier returns a querier of the same data as chunks.
func (db *DB) ChunkQuerier(mint, maxt int64) (promstorage.ChunkQuerier, error) {
	q, err := db.Querier(mint, maxt)
	if err != nil {
		return nil, err
	}
	return &chunkQuerier{q: q}, nil
}

type querier struct {
	db         *DB
	mint, maxt int64
}

func (q *querier) Close() error { return nil }

// qSegment is one series' data in one partition.
type qSegment struct {
	part int64
	ref  uint32
	head *memSeries
	srcs []gorilla.Source // oldest writes first
}

// qSeries is one series of a Select's result: a promstorage.Series.
type qSeries struct {
	lset       labels.Labels
	segs       []*qSegment // in partition order
	mint, maxt int64
}

// slab hands out elements of T from chunks allocated a batch at a time: a
// Select creates a few objects for each of up to millions of series, all
// freed together.
type slab[T any] struct{ chunk []T }

func (s *slab[T]) next() *T {
	if len(s.chunk) == cap(s.chunk) {
		s.chunk = make([]T, 0, 512)
	}
	s.chunk = s.chunk[:len(s.chunk)+1]
	return &s.chunk[len(s.chunk)-1]
}

// slice returns n elements of T; appending to them reallocates.
func (s *slab[T]) slice(n int) []T {
	if n > 64 {
		return make([]T, n)
	}
	if cap(s.chunk)-len(s.chunk) < n {
		s.chunk = make([]T, 0, 512)
	}
	l := len(s.chunk)
	s.chunk = s.chunk[:l+n]
	return s.chunk[l : l+n : l+n]
}

// Select returns the series matching ms with their samples in [mint, maxt],
// sorted by labels when sortSeries is set or for the series API.
func (q *querier) Select(ctx context.Context, sortSeries bool, hints *promstorage.SelectHints, ms ...*labels.Matcher) promstorage.SeriesSet {
	mint, maxt := q.mint, q.maxt
	if hints != nil {
		mint, maxt = max(mint, hints.Start), min(maxt, hints.End)
	}
	withSamples := hints == nil || hints.Func != "series"
	// The engine asks for series in no order; sorting 50k selected series by
	// labels was a third of the selection at 1M series. The series API
	// (hints.Func "series") keeps label order, as Prometheus' blocks give it.
	set, err := q.db.selectSeries(ctx, mint, maxt, withSamples, sortSeries || !withSamples, ms)
	if err != nil {
		return promstorage.ErrSeriesSet(err)
	}
	return &seriesSet{series: set}
}

func (db *DB) selectSeries(ctx context.Context, mint, maxt int64, withSamples, sorted bool, ms []*labels.Matcher) ([]*qSeries, error) {
	parts, err := db.partitions(ctx, mint, maxt)
	if err != nil {
		return nil, err
	}
	// Partitions without data in the range are not read.
	parts = slices.DeleteFunc(parts, func(pv partView) bool { return !db.mayHold(pv, mint, maxt) })
	sels, card, err := db.selectRefs(ctx, parts, ms)
	if err != nil {
		return nil, err
	}
	g := gather{
		db: db, mint: mint, maxt: maxt, withSamples: withSamples,
		// A head series that ended before the range is not read either (a
		// writer's: a read-only DB's followed series do not know their
		// newest time), nor listed by the series API: Prometheus lists only
		// series with a chunk in the range, so one that stopped drops out
		// of Grafana's label browser once it is older than the range, not
		// when its partition closes. In a written-out partition the series
		// API goes by the partition's stored newest times (endedSeries).
		skipEnded: !db.readOnly,
		per:       make([]partSeries, len(parts)),
	}
	if withSamples {
		g.fetch = make([]*qSegment, 0, card.total)
	}
	for i, pv := range parts {
		bm := sels[i]
		if bm.IsEmpty() {
			continue
		}
		if pv.head != nil {
			if err := g.headPart(&g.per[i], pv, bm); err != nil {
				return nil, err
			}
			continue
		}
		g.storedPart(&g.per[i], pv, bm)
	}
	// The labels and sample blocks of every partition in one round.
	if withSamples {
		samples := sampleReads(g.fetch, mint, maxt)
		db.markNoFill(ctx, samples)
		g.reads = append(g.reads, samples...)
	}
	if err := db.readRanges(ctx, g.reads); err != nil {
		return nil, err
	}
	for _, ps := range g.per {
		if ps.ended != nil {
			ps.ended.each(mint, func(j int) { ps.segs[j] = nil })
		}
	}
	all := mergeSeries(g.per, card, mint, maxt)
	if sorted {
		sortByLabels(all)
	}
	return all, nil
}

// cardinality is how many series the partitions' selections hold: the
// partitions that select any, all selections together and the largest.
// The lists of a Select are sized from it: grown by appending, they cost
// twice what they end up holding, which at a million series a query is
// much of its garbage.
type cardinality struct{ nonEmpty, total, most int }

// selectRefs returns each partition's series that match ms, taking what
// prefetchSelect read ahead.
func (db *DB) selectRefs(ctx context.Context, parts []partView, ms []*labels.Matcher) ([]*roaring.Bitmap, cardinality, error) {
	var card cardinality
	sels := db.prefetchSelect(ctx, parts, ms)
	sels = slices.Grow(sels, len(parts))[:len(parts)]
	for i, pv := range parts {
		if sels[i] == nil {
			bm, err := index.Select(ctx, db.indexReader(pv), ms...)
			if err != nil {
				return nil, card, fmt.Errorf("select in partition %d: %w", pv.start, err)
			}
			sels[i] = bm
		}
		if n := int(sels[i].GetCardinality()); n > 0 {
			card.nonEmpty++
			card.total += n
			card.most = max(card.most, n)
		}
	}
	return sels, card, nil
}

// partSeries is a partition's selected series: their labels and segments,
// the labels of a written-out partition read from the LSM found (found[i])
// by the reads of the Select.
type partSeries struct {
	lsets []labels.Labels
	segs  []*qSegment
	found []bool
	ended *endedSeries // the series API's, of a written-out or followed partition
}

// gather collects the selected series of each partition of a Select, and
// the reads of the LSM that complete them.
type gather struct {
	db          *DB
	mint, maxt  int64
	withSamples bool
	skipEnded   bool

	per   []partSeries
	reads []rangeRead
	fetch []*qSegment // the segments whose sample blocks are read
	lb    labels.ScratchBuilder
	segs  slab[qSegment]
	srcs  slab[gorilla.Source]
	buf   []gorilla.Source
}

// headPart gathers the series bm selects in a head partition: their
// labels and in-memory blocks now, what the LSM holds of them by the reads.
func (g *gather) headPart(ps *partSeries, pv partView, bm *roaring.Bitmap) error {
	n := int(bm.GetCardinality())
	ps.lsets, ps.segs = make([]labels.Labels, 0, n), make([]*qSegment, 0, n)
	// A reader's followed series know only the newest time of the head
	// log's samples it applied: for the series API the partition's stored
	// newest times tell about the rest, read as for a written-out
	// partition.
	follow := !g.skipEnded && !g.withSamples && g.mint > pv.start
	var followedRefs []uint32
	var followedNewest []int64
	it := bm.Iterator()
	for it.HasNext() {
		ref := it.Next()
		s, retiredNewest, ok := pv.head.queryView(ref)
		if !ok {
			continue
		}
		seg := g.segs.next()
		seg.part, seg.ref, seg.head = pv.start, ref, s
		inMemory := int64(math.MinInt64) // a followed series' newest time
		if s == nil {
			// Retired: everything it holds is in the LSM.
			if g.skipEnded && retiredNewest < g.mint {
				continue
			}
		} else if g.skipEnded || g.withSamples || follow {
			// The head's blocks are taken before the LSM is read, so a
			// flush in between shows samples twice (merged away) but
			// never loses them.
			s.lock()
			if g.skipEnded && pv.head.newestLocked(s) < g.mint {
				s.unlock()
				continue
			}
			if g.withSamples {
				var err error
				if g.buf, err = s.querySourcesLocked(g.buf[:0]); err != nil {
					s.unlock()
					return err
				}
				seg.srcs = g.srcs.slice(len(g.buf))
				copy(seg.srcs, g.buf)
			}
			if follow {
				inMemory = s.maxT()
			}
			s.unlock()
		}
		if g.withSamples {
			g.fetch = append(g.fetch, seg)
		}
		if follow {
			followedRefs = append(followedRefs, ref)
			followedNewest = append(followedNewest, inMemory)
		}
		ps.lsets = append(ps.lsets, pv.head.labelsOf(ref, &g.lb))
		ps.segs = append(ps.segs, seg)
	}
	if len(followedRefs) > 0 {
		ps.ended = newEndedSeries(pv.start, followedRefs)
		ps.ended.mem = followedNewest
		g.reads = append(g.reads, ps.ended.reads(uint64(g.db.partMs)+1)...)
	}
	return nil
}

// storedPart gathers the series bm selects in a written-out partition:
// their labels, newest times and sample blocks all come from the reads.
func (g *gather) storedPart(ps *partSeries, pv partView, bm *roaring.Bitmap) {
	refs := bm.ToArray()
	ps.lsets, ps.found, ps.segs = make([]labels.Labels, len(refs)), make([]bool, len(refs)), make([]*qSegment, len(refs))
	for j, ref := range refs {
		seg := g.segs.next()
		seg.part, seg.ref = pv.start, ref
		ps.segs[j] = seg
	}
	if g.withSamples {
		g.fetch = append(g.fetch, ps.segs...)
	}
	g.reads = append(g.reads, labelReads(pv.start, refs, ps.lsets, ps.found)...)
	if !g.withSamples && g.mint > pv.start {
		// The series API leaves out the series that ended before the
		// range here too, by the newest times the partition stored.
		ps.ended = newEndedSeries(pv.start, refs)
		g.reads = append(g.reads, ps.ended.reads(uint64(g.db.partMs)+1)...)
	}
}

// mergeSeries makes the series of a Select from the partitions' segments:
// a series found in several partitions is one series of the result. With
// one partition selecting, every series is found once: no lookup.
func mergeSeries(per []partSeries, card cardinality, mint, maxt int64) []*qSeries {
	var byKey map[uint64][]*qSeries
	if card.nonEmpty > 1 {
		byKey = make(map[uint64][]*qSeries, card.most)
	}
	var (
		all     = make([]*qSeries, 0, card.most)
		series  slab[qSeries]
		segPtrs slab[*qSegment]
	)
	add := func(lset labels.Labels, seg *qSegment) {
		var h uint64
		if byKey != nil {
			h = lset.Hash()
			for _, s := range byKey[h] {
				if labels.Equal(s.lset, lset) {
					s.segs = append(s.segs, seg)
					return
				}
			}
		}
		s := series.next()
		s.lset, s.segs, s.mint, s.maxt = lset, segPtrs.slice(1), mint, maxt
		s.segs[0] = seg
		if byKey != nil {
			byKey[h] = append(byKey[h], s)
		}
		all = append(all, s)
	}
	for _, ps := range per {
		for j, seg := range ps.segs {
			if seg == nil || ps.found != nil && !ps.found[j] {
				continue // ended before the range (series API), or no forward-index entry
			}
			add(ps.lsets[j], seg)
		}
	}
	return all
}

// keyedSortMin is the fewest series sortByLabels sorts through a slice of
// their labels: below it the copy costs what it saves.
const keyedSortMin = 4096

// sortByLabels sorts series by labels. Many are sorted as a slice of
// their labels beside them rather than through the pointers: a comparison
// then misses the cache once (the label data), not twice, and at 200k
// series the sort takes a third less time (BenchmarkSortByLabels).
func sortByLabels(all []*qSeries) {
	if len(all) < keyedSortMin {
		slices.SortFunc(all, func(a, b *qSeries) int { return labels.Compare(a.lset, b.lset) })
		return
	}
	type keyed struct {
		lset labels.Labels
		s    *qSeries
	}
	ks := make([]keyed, len(all))
	for i, s := range all {
		ks[i] = keyed{s.lset, s}
	}
	slices.SortFunc(ks, func(a, b keyed) int { return labels.Compare(a.lset, b.lset) })
	for i := range ks {
		all[i] = ks[i].s
	}
}

// LabelValues returns the values of name in series matching ms, sorted.
func (q *querier) LabelValues(ctx context.Context, name string, hints *promstorage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return q.mergePartitions(ctx, hints, func(r index.Reader) ([]string, error) {
		return index.LabelValuesFor(ctx, r, name, ms...)
	})
}

// LabelNames returns the label names of series matching ms, sorted.
func (q *querier) LabelNames(ctx context.Context, hints *promstorage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return q.mergePartitions(ctx, hints, func(r index.Reader) ([]string, error) {
		return index.LabelNamesForMatchers(ctx, r, ms...)
	})
}

// mergePartitions merges the sorted lists read returns for the index of each
// partition with data in the querier's range, cut to hints' limit. A
// partition whose samples all lie outside the range is not read, as
// Prometheus reads only the blocks whose time bounds overlap it.
func (q *querier) mergePartitions(ctx context.Context, hints *promstorage.LabelHints, read func(index.Reader) ([]string, error)) ([]string, annotations.Annotations, error) {
	parts, err := q.db.partitions(ctx, q.mint, q.maxt)
	if err != nil {
		return nil, nil, err
	}
	var out []string
	for _, pv := range parts {
		if !q.db.mayHold(pv, q.mint, q.maxt) {
			continue
		}
		list, err := read(q.db.indexReader(pv))
		if err != nil {
			return nil, nil, err
		}
		out = mergeSorted(out, list)
	}
	if hints != nil && hints.Limit > 0 && len(out) > hints.Limit {
		out = out[:hints.Limit]
	}
	return out, nil, nil
}

// mergeSorted merges two sorted lists of distinct strings.
func mergeSorted(a, b []string) []string {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	out := make([]string, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] < b[j]:
			out = append(out, a[i])
			i++
		case a[i] > b[j]:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i, j = i+1, j+1
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

type seriesSet struct {
	series []*qSeries
	i      int
	cur    *qSeries
}

func (s *seriesSet) Next() bool {
	if s.i >= len(s.series) {
		return false
	}
	s.cur = s.series[s.i]
	s.i++
	return true
}

// Len returns how many series Next has yet to give.
func (s *seriesSet) Len() int { return len(s.series) - s.i }

func (s *seriesSet) At() promstorage.Series            { return s.cur }
func (s *seriesSet) Err() error                        { return nil }
func (s *seriesSet) Warnings() annotations.Annotations { return nil }

func (s *qSeries) Labels() labels.Labels { return s.lset }

func (s *qSeries) Iterator(reuse chunkenc.Iterator) chunkenc.Iterator {
	it, ok := reuse.(*seriesIterator)
	if !ok {
		it = &seriesIterator{}
	}
	it.reset(s)
	return it
}

// seriesIterator iterates a series' samples in [mint, maxt] across its
// partitions, each partition's sources merged as they are decoded.
type seriesIterator struct {
	segs       []*qSegment
	mint, maxt int64
	seg        int
	it         gorilla.Iterator
	cur        chunkenc.ValueType
	t          int64 // the current sample's time, it.it.AtT()
	err        error
	started    bool
	// srcs is the scratch of openNext.
	srcs []gorilla.Source
}

func (it *seriesIterator) reset(s *qSeries) {
	it.segs, it.mint, it.maxt = s.segs, s.mint, s.maxt
	it.seg, it.cur, it.err, it.started = -1, chunkenc.ValNone, nil, false
}

// openNext positions the block iterator on the next segment with data.
func (it *seriesIterator) openNext() bool {
	for {
		it.seg++
		if it.seg >= len(it.segs) {
			return false
		}
		it.srcs = overlapping(it.srcs[:0], it.segs[it.seg].srcs, it.mint, it.maxt)
		if len(it.srcs) == 0 {
			continue
		}
		if err := it.it.ResetMergeRange(it.srcs, it.mint, it.maxt); err != nil {
			it.err = fmt.Errorf("read block of partition %d series %d: %w", it.segs[it.seg].part, it.segs[it.seg].ref, err)
			return false
		}
		return true
	}
}

// mayHoldRange reports whether blk, a sample block, may hold samples in
// [mint, maxt]. A block whose header does not parse may, so that its
// reader reports it.
func mayHoldRange(blk []byte, mint, maxt int64) bool {
	if len(blk) == 0 {
		return false
	}
	m, err := gorilla.ReadMeta(blk)
	return err != nil || (m.Count > 0 && m.MaxTime >= mint && m.MinTime <= maxt)
}

// overlapping appends to dst the sources of srcs, in order, that may hold
// samples in [mint, maxt]: the others need not be decoded. A partition's
// sample key holds one block per head flush until compaction merges them,
// and an instant query or the newest points of a dashboard need the last
// one or two. A block whose header does not parse is kept, so that the
// iterator reports it.
func overlapping(dst, srcs []gorilla.Source, mint, maxt int64) []gorilla.Source {
	for _, src := range srcs {
		switch {
		case src.App != nil:
			if src.App.Count() == 0 || src.App.MaxTime() < mint || src.App.MinTime() > maxt {
				continue
			}
		case src.Floats != nil:
			if ts := src.Floats.T; len(ts) == 0 || ts[len(ts)-1] < mint || ts[0] > maxt {
				continue
			}
		case !mayHoldRange(src.Block, mint, maxt):
			continue
		}
		dst = append(dst, src)
	}
	return dst
}

func (it *seriesIterator) Next() chunkenc.ValueType {
	if it.err != nil {
		return chunkenc.ValNone
	}
	if !it.started {
		return it.Seek(it.mint)
	}
	if it.cur == chunkenc.ValNone {
		return chunkenc.ValNone
	}
	// The common case, the next float of the run being walked and in range,
	// is answered here; the rest is settle's.
	vt := it.it.Next()
	if vt == chunkenc.ValFloat {
		if t, _ := it.it.At(); t <= it.maxt { // At inlines, AtT does not
			it.cur, it.t = vt, t
			return vt
		}
	}
	return it.settle(vt, false, 0)
}

// settle finishes a move of the block iterator that gave vt: past the end
// of a segment it goes on to the next one (seek: to its first sample at or
// after t), and past maxt it stops.
func (it *seriesIterator) settle(vt chunkenc.ValueType, seek bool, t int64) chunkenc.ValueType {
	for vt == chunkenc.ValNone {
		if err := it.it.Err(); err != nil {
			it.err = err
			return it.stop()
		}
		if !it.openNext() {
			return it.stop()
		}
		if seek {
			vt = it.it.Seek(t)
		} else {
			vt = it.it.Next()
		}
	}
	at := it.it.AtT()
	if at > it.maxt {
		return it.stop()
	}
	it.cur, it.t = vt, at
	return vt
}

func (it *seriesIterator) stop() chunkenc.ValueType {
	it.cur = chunkenc.ValNone
	it.seg = len(it.segs)
	return chunkenc.ValNone
}

func (it *seriesIterator) Seek(t int64) chunkenc.ValueType {
	if it.err != nil {
		return chunkenc.ValNone
	}
	t = max(t, it.mint)
	if !it.started {
		it.started = true
		if !it.openNext() {
			return it.stop()
		}
	} else if it.cur == chunkenc.ValNone {
		return chunkenc.ValNone
	} else if it.t >= t {
		return it.cur
	}
	return it.settle(it.it.Seek(t), true, t)
}

// querySourcesLocked appends the sources of the samples s holds in memory,
// oldest writes first, for a query. The open appender is cloned rather than
// encoded into a block: the query decodes it later without the series'
// lock. The caller holds it.
func (s *memSeries) querySourcesLocked(dst []gorilla.Source) ([]gorilla.Source, error) {
	var err error
	if s.flushing != nil {
		if dst, err = s.flushing.appendSources(dst); err != nil {
			return nil, err
		}
	}
	for _, b := range s.sealedLocked() {
		dst = append(dst, gorilla.Source{Block: b})
	}
	if s.app.Count() > 0 {
		dst = append(dst, gorilla.Source{App: s.app.Clone()})
	}
	return appendOOOSources(dst, s.oooLocked())
}

// appendSources appends the cut's sources, oldest writes first.
func (c *cutData) appendSources(dst []gorilla.Source) ([]gorilla.Source, error) {
	if c.prev != nil {
		var err error
		if dst, err = c.prev.appendSources(dst); err != nil {
			return nil, err
		}
	}
	for _, b := range c.sealed {
		dst = append(dst, gorilla.Source{Block: b})
	}
	return appendOOOSources(dst, c.ooo)
}

func appendOOOSources(dst []gorilla.Source, ooo []sample) ([]gorilla.Source, error) {
	if len(ooo) == 0 {
		return dst, nil
	}
	blks, err := encodeSamples(nil, ooo)
	if err != nil {
		return nil, err
	}
	for _, b := range blks {
		dst = append(dst, gorilla.Source{Block: b})
	}
	return dst, nil
}

func (it *seriesIterator) At() (int64, float64) { return it.it.At() }
func (it *seriesIterator) AtHistogram(h *histogram.Histogram) (int64, *histogram.Histogram) {
	return it.it.AtHistogram(h)
}
func (it *seriesIterator) AtFloatHistogram(fh *histogram.FloatHistogram) (int64, *histogram.FloatHistogram) {
	return it.it.AtFloatHistogram(fh)
}
func (it *seriesIterator) AtT() int64  { return it.t }
func (it *seriesIterator) AtST() int64 { return 0 }
func (it *seriesIterator) Err() error  { return it.err }
