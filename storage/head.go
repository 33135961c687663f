package storage

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/corrupt"
	"github.com/shaledb/shale/index"
	"github.com/shaledb/shale/storage/lsm"
)

// head holds the open partitions in memory: their series, the samples
// received since the last flush, and their index.
type head struct {
	// mu orders commits against flush cuts: a commit holds it for reading
	// while it logs and applies samples, a cut holds it for writing. It
	// also guards parts.
	mu    sync.RWMutex
	parts map[int64]*headPart
	// writtenOut, under mu, is closed when the flush that is writing
	// partitions out for good has ended (nil when none is): a late sample
	// for such a partition waits for it rather than be refused.
	writtenOut chan struct{}

	// maxT is the newest sample time committed to the head.
	maxT atomic.Int64
	// unflushed counts samples committed since the last flush cut.
	unflushed atomic.Int64
	// flushAt is the number of unflushed samples at which a commit asks
	// for an early flush; see flushThreshold.
	flushAt atomic.Int64
}

// flushSamplesPerSeries is the fewest samples per series, on average, the
// head holds before the sample count asks for an early flush. The cost of a
// flush, and of compacting what it wrote, grows with the series it writes, not
// with their samples: at 1M active series a flush every 8M samples wrote one
// block of 8 samples per series, and encoding those blocks, then merging them
// again in compactions, took a third of the server's CPU; at 24 samples a
// series, 60 gave 8 % more samples a second over three minutes for the same
// peak RSS (docs/benchmarks.md). Memory grows by about a byte and a half per
// sample held. A series scraped every 5 s or slower gets at most 60 samples
// in a head flush interval of 5 minutes, so only faster series, backfills and
// senders catching up reach this.
const flushSamplesPerSeries = 60

// flushThreshold returns the unflushed samples at which a commit asks for an
// early flush when series series receive samples: base (Options.
// HeadFlushSamples) or flushSamplesPerSeries per series, whichever is more.
func flushThreshold(base int64, series int) int64 {
	return max(base, flushSamplesPerSeries*int64(series))
}

// headPart is one open partition.
type headPart struct {
	start, end int64

	// mu guards dict and series, and serialises series creation. It is
	// never held across a write to the LSM.
	mu     sync.RWMutex
	dict   seriesTable  // the series dictionary, by labels hash
	series []*memSeries // by ref; nil where retired
	// retired holds, by ref, what a retired series keeps (see retireIdle);
	// series[ref] is nil only where ref < len(retired). nil until a series
	// retires. nRetired counts the nil entries of series.
	retired  []retiredSeries
	nRetired int

	// recorded is the number of series, from ref 0, whose forward-index
	// entries are in the LSM; those of later refs are written by the next
	// recordSeries, in ref order, so that what the LSM holds of the forward
	// index is always refs 0 to recorded-1. recordMu serialises those writes.
	// Partitions of read replicas do not use them.
	recorded atomic.Uint32
	recordMu sync.Mutex
	// recordBatch is recordSeries' batch, kept under recordMu: grown anew
	// for every call, up to maxBatchBytes by doubling, it was a quarter of
	// the CPU of creating series at a partition boundary.
	recordBatch lsm.Batch
	// idx indexes the series by ref; it is the only place that holds
	// their labels.
	idx *index.MemIndex

	// closed is set, under head.mu held for writing, when the partition is
	// being written out for good; commits no longer add to it. It is read
	// under head.mu, or without it by an appender that takes the partition
	// of its previous sample again (appender.series): a partition not
	// closed is still the head's partition of its start, since the head
	// drops or replaces a partition only once it is closed.
	closed atomic.Bool
	// appended is set by each Append into the partition and cleared by
	// each flush: a flush closes a partition behind the out-of-order
	// window only once a whole flush interval went by without an Append,
	// so that a backfill writing into it is not made to open it again
	// (and to append again the samples of its commits in flight) after
	// every flush its own samples cause.
	appended atomic.Bool

	// minT and maxT bound the times of the partition's samples: those
	// committed since it opened here and those its registry entry recorded
	// before (math.MaxInt64 and math.MinInt64 when none). Deletes do not
	// narrow them.
	minT, maxT atomic.Int64

	// stored holds, by ref, the newest sample time of each series that the
	// LSM recorded when the partition was loaded from it (recovery, or a
	// reopening for late samples), as stored by encodeSeriesTimes: 0 for
	// none. It is set before the partition is published and not written
	// after.
	stored []uint32

	// seriesMu are the series' locks: series ref uses seriesMu[ref %
	// seriesLocks]. A lock of its own would take 8 of a series' bytes;
	// no code holds two series' locks at once.
	seriesMu [seriesLocks]sync.Mutex
}

// seriesLocks is the number of series locks of a partition (8 KiB).
const seriesLocks = 1024

// noteAppend records an Append into the partition (see appended).
func (p *headPart) noteAppend() {
	if !p.appended.Load() { // a load a sample; a store a flush interval
		p.appended.Store(true)
	}
}

// noteTime widens p's time bounds to t.
func (p *headPart) noteTime(t int64) {
	for {
		cur := p.minT.Load()
		if t >= cur || p.minT.CompareAndSwap(cur, t) {
			break
		}
	}
	for {
		cur := p.maxT.Load()
		if t <= cur || p.maxT.CompareAndSwap(cur, t) {
			return
		}
	}
}

// bounds returns p's time bounds; ok is false when it has no samples.
func (p *headPart) bounds() (mint, maxt int64, ok bool) {
	mint, maxt = p.minT.Load(), p.maxT.Load()
	return mint, maxt, mint <= maxt
}

// meta returns p's registry entry, with headMaxT the head's newest time.
func (p *headPart) meta(closed bool, headMaxT int64) partitionMeta {
	return partitionMeta{closed: closed, maxT: headMaxT, dataMin: p.minT.Load(), dataMax: p.maxT.Load()}
}

// restoreBounds widens p's time bounds to those of m, its registry entry.
func (p *headPart) restoreBounds(m partitionMeta) {
	if m.hasData() {
		p.noteTime(m.dataMin)
		p.noteTime(m.dataMax)
	}
}

// newest returns the newest sample time of series s of p, in memory or
// recorded in the LSM when p was loaded, math.MinInt64 if it has none. It
// is never older than a sample the series holds, in the head or in its
// sample block; the caller holds the series' lock.
func (p *headPart) newestLocked(s *memSeries) int64 {
	return p.storedNewest(s.ref, s.maxT())
}

// storedNewest returns t, or the newest time the LSM recorded for series
// ref when p was loaded if that is newer.
func (p *headPart) storedNewest(ref uint32, t int64) int64 {
	if int(ref) < len(p.stored) {
		if d := p.stored[ref]; d != 0 {
			t = max(t, p.start+int64(d)-1)
		}
	}
	return t
}

func newHeadPart(start, end int64) *headPart {
	p := &headPart{start: start, end: end, idx: index.NewMemIndex()}
	p.minT.Store(math.MaxInt64)
	p.maxT.Store(math.MinInt64)
	return p
}

// lookupLocked returns the ref of the series lset, whose labels hash is h,
// or -1. The caller holds p.mu.
func (p *headPart) lookupLocked(h uint64, lset labels.Labels) int64 {
	return p.dict.get(h, lset, p.idx)
}

// has reports whether the partition holds the series lset, whose labels
// hash is h, retired or not (it does not bring it back).
func (p *headPart) has(h uint64, lset labels.Labels) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.lookupLocked(h, lset) >= 0
}

// get returns the series lset, whose labels hash is h, or nil; a retired
// series comes back to life.
func (p *headPart) get(h uint64, lset labels.Labels) *memSeries {
	p.mu.RLock()
	ref := p.lookupLocked(h, lset)
	var s *memSeries
	if ref >= 0 {
		s = p.series[ref]
	}
	p.mu.RUnlock()
	if ref >= 0 && s == nil {
		s = p.revive(uint32(ref))
	}
	return s
}

// getMany sets found[i] to the series lsets[i], whose labels hash is
// hashes[i], or nil. It works in passes (dictionary, then series, then
// labels) so that the cache misses of different series overlap instead of
// following one another; scratch is reused and returned. Retired series
// found come back to life.
func (p *headPart) getMany(hashes []uint64, lsets []labels.Labels, found []*memSeries, scratch []int64) []int64 {
	scratch = slices.Grow(scratch[:0], len(lsets))[:len(lsets)]
	p.mu.RLock()
	for i, h := range hashes {
		if scratch[i] = p.dict.first(h); scratch[i] < 0 {
			scratch[i] = noCandidate
		}
	}
	// EqualEach sets a candidate whose labels differ to -1.
	p.idx.EqualEach(scratch, lsets)
	retired := false
	for i, ref := range scratch {
		switch ref {
		case noCandidate:
			ref = -1
		case -1:
			ref = p.dict.get(hashes[i], lsets[i], p.idx) // another series of the same hash
		}
		scratch[i] = ref
		found[i] = nil
		if ref >= 0 {
			found[i] = p.series[ref]
			retired = retired || found[i] == nil
		}
	}
	p.mu.RUnlock()
	if retired {
		for i, ref := range scratch {
			if ref >= 0 && found[i] == nil {
				found[i] = p.revive(uint32(ref))
			}
		}
	}
	return scratch
}

// noCandidate marks, in getMany, a series whose hash no slot holds.
const noCandidate = -2

// create adds the series lset, whose labels hash is h, unless another
// appender added it first. A new series gets the next ref; its forward-index
// entry is written later, by recordSeries, before any sample of it is
// logged or written out. lset must be valid labels without empty values; it
// may alias the caller's buffers. With limit > 0, a series the partition
// does not hold is refused (ErrSeriesLimit) once it holds limit series not
// retired; one it holds, retired or not, is always returned, as get does.
func (p *headPart) create(h uint64, lset labels.Labels, limit int) (*memSeries, error) {
	if limit > 0 {
		// A partition at its limit refuses under the read lock: a flood
		// of new series must not queue every appender behind the write
		// lock.
		p.mu.RLock()
		full := p.lookupLocked(h, lset) < 0 && p.fullLocked(limit)
		p.mu.RUnlock()
		if full {
			return nil, &seriesLimitError{part: p.start, limit: limit}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if ref := p.lookupLocked(h, lset); ref >= 0 {
		return p.reviveLocked(uint32(ref)), nil
	}
	if p.fullLocked(limit) {
		return nil, &seriesLimitError{part: p.start, limit: limit}
	}
	return p.createLocked(h, lset)
}

// fullLocked reports whether the partition holds limit series not retired
// (never, for limit 0). The caller holds p.mu.
func (p *headPart) fullLocked(limit int) bool {
	return limit > 0 && len(p.series)-p.nRetired >= limit
}

// createLocked adds the series lset, which the partition does not hold,
// with labels hash h. lset may alias the caller's buffers. The caller holds
// p.mu.
func (p *headPart) createLocked(h uint64, lset labels.Labels) (*memSeries, error) {
	ref := uint32(len(p.series))
	if len(p.series) >= math.MaxUint32-1 {
		return nil, fmt.Errorf("partition %d: series limit reached", p.start)
	}
	// The partition's dictionary is the index's too: the index is told the
	// series is new rather than asked.
	if got := p.idx.Add(lset); got != ref {
		return nil, fmt.Errorf("partition %d: index gave ref %d for new series %d %s", p.start, got, ref, lset)
	}
	s := newMemSeries(ref, p)
	p.series = append(p.series, s)
	p.dict.add(h, ref)
	return s, nil
}

// seriesTable maps labels hashes to series refs: open addressing with linear
// probing in one array of (hash, ref) slots. A lookup costs one cache miss
// for the slot, where a Go map costs a walk through its directory and table
// first, and runs inline, so that the lookups of a batch overlap. A slot is
// 8 bytes and holds no pointer, so the garbage collector does not scan the
// table (16 MB at 1M series). Series whose hashes fold to the same 32 bits
// lie in the probe sequence one after another; the labels tell them apart.
// Series are never removed.
type seriesTable struct {
	slots []seriesSlot // len is a power of two; ref1 == 0 marks a free slot
	n     int
}

type seriesSlot struct {
	h    uint32 // the labels hash folded to 32 bits
	ref1 uint32 // the series' ref + 1
}

// fold32 folds a labels hash to the 32 bits a slot keeps.
func fold32(h uint64) uint32 { return uint32(h ^ h>>32) }

// first returns the ref of the first series whose hash folds like h, or
// -1: the one wanted unless another folds the same.
func (t *seriesTable) first(h uint64) int64 {
	if len(t.slots) == 0 {
		return -1
	}
	f := fold32(h)
	mask := uint32(len(t.slots) - 1)
	i := f & mask
	for t.slots[i].ref1 != 0 && t.slots[i].h != f {
		i = (i + 1) & mask
	}
	return int64(t.slots[i].ref1) - 1
}

// get returns the ref of the series lset, whose labels hash is h, or -1;
// idx holds the series' labels. The caller holds the lock of the partition
// that owns t and idx.
func (t *seriesTable) get(h uint64, lset labels.Labels, idx *index.MemIndex) int64 {
	if len(t.slots) == 0 {
		return -1
	}
	f := fold32(h)
	mask := uint32(len(t.slots) - 1)
	for i := f & mask; t.slots[i].ref1 != 0; i = (i + 1) & mask {
		// The caller holds the partition's lock, under which alone the
		// index gains series (createLocked).
		if e := t.slots[i]; e.h == f && idx.EqualHeld(e.ref1-1, lset) {
			return int64(e.ref1) - 1
		}
	}
	return -1
}

// add adds the series ref, whose labels hash is h and which the table does
// not hold. ref must be below math.MaxUint32.
func (t *seriesTable) add(h uint64, ref uint32) {
	if (t.n+1)*4 > len(t.slots)*3 { // at most 3/4 full
		old := t.slots
		t.slots = make([]seriesSlot, max(64, 2*len(old)))
		for _, e := range old {
			if e.ref1 != 0 {
				t.insert(e)
			}
		}
	}
	t.insert(seriesSlot{fold32(h), ref + 1})
	t.n++
}

func (t *seriesTable) insert(e seriesSlot) {
	mask := uint32(len(t.slots) - 1)
	i := e.h & mask
	for t.slots[i].ref1 != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = e
}

// seriesByRef returns series ref, or nil if the partition has no such
// series or it is retired (see retireIdle).
func (p *headPart) seriesByRef(ref uint32) *memSeries {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if int(ref) >= len(p.series) {
		return nil
	}
	return p.series[ref]
}

// labelsOf returns the labels of series ref, built in b. ref must be a
// series of the partition, retired or not.
func (p *headPart) labelsOf(ref uint32, b *labels.ScratchBuilder) labels.Labels {
	lset, err := p.idx.Series(context.Background(), ref, b)
	if err != nil {
		// The partition's index takes every series before it is published.
		panic(fmt.Sprintf("head series %d of partition %d: %v", ref, p.start, err))
	}
	return lset
}

// numSeries returns the number of series of the partition, retired ones
// included.
func (p *headPart) numSeries() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.series)
}

// allSeries returns a copy of the partition's series by ref, nil where
// retired (retiring and reviving rewrite the partition's own).
func (p *headPart) allSeries() []*memSeries {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return slices.Clone(p.series)
}

// seriesFrom copies into buf the partition's series from ref lo on, as many
// as fit, and returns them: the way to walk a large partition without a
// copy of it all or holding its lock.
func (p *headPart) seriesFrom(lo int, buf []*memSeries) []*memSeries {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if lo >= len(p.series) {
		return buf[:0]
	}
	return buf[:copy(buf, p.series[lo:])]
}

// openPart returns the partition that starts at start if it is open and
// not closing, or nil.
func (h *head) openPart(start int64) *headPart {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.openPartLocked(start)
}

// openPartLocked is openPart for a caller that holds h.mu.
func (h *head) openPartLocked(start int64) *headPart {
	if p := h.parts[start]; p != nil && !p.closed.Load() {
		return p
	}
	return nil
}

// partitionMeta is the registry entry of a partition.
//
//	version(1)=2 flags(1) maxT(varint) [dataMin(varint) dataMax-dataMin(uvarint)]
//
// flags bit 0: closed (all its data, index included, is in the LSM); bit 1:
// the data bounds follow.
type partitionMeta struct {
	closed bool
	// maxT is the newest sample time of the whole head when the entry was
	// written; recovery restores the head's notion of "now" from it.
	maxT int64
	// dataMin and dataMax bound the times of the partition's samples
	// (inclusive); dataMin > dataMax when it has none. Every sample block
	// written is within the bounds of an entry written before it or with
	// it; deletes do not narrow them.
	dataMin, dataMax int64
}

// partitionMetaVersion is the layout of a registry entry.
const partitionMetaVersion = 2

// noData are the data bounds of a partition without samples.
const noDataMin, noDataMax = math.MaxInt64, math.MinInt64

// hasData reports whether the entry bounds any sample.
func (m partitionMeta) hasData() bool { return m.dataMin <= m.dataMax }

func (m partitionMeta) encode() []byte {
	b := []byte{partitionMetaVersion, 0}
	if m.closed {
		b[1] |= 1
	}
	if m.hasData() {
		b[1] |= 2
	}
	b = binary.AppendVarint(b, m.maxT)
	if m.hasData() {
		b = binary.AppendVarint(b, m.dataMin)
		b = binary.AppendUvarint(b, uint64(m.dataMax-m.dataMin))
	}
	return b
}

func decodePartitionMeta(b []byte) (partitionMeta, error) {
	if len(b) < 3 || b[0] != partitionMetaVersion || b[1]&^3 != 0 {
		return partitionMeta{}, fmt.Errorf("partition registry entry of %d bytes, unknown version or flags: %w", len(b), corrupt.Err)
	}
	m := partitionMeta{closed: b[1]&1 == 1, dataMin: noDataMin, dataMax: noDataMax}
	hasData := b[1]&2 != 0
	v, n := binary.Varint(b[2:])
	if n <= 0 {
		return partitionMeta{}, fmt.Errorf("partition registry entry: bad max time: %w", corrupt.Err)
	}
	m.maxT, b = v, b[2+n:]
	if hasData {
		lo, n := binary.Varint(b)
		if n <= 0 {
			return partitionMeta{}, fmt.Errorf("partition registry entry: bad data min time: %w", corrupt.Err)
		}
		d, n2 := binary.Uvarint(b[n:])
		if n2 <= 0 || d > math.MaxInt64 || lo > math.MaxInt64-int64(d) {
			return partitionMeta{}, fmt.Errorf("partition registry entry: bad data max time: %w", corrupt.Err)
		}
		m.dataMin, m.dataMax, b = lo, lo+int64(d), b[n+n2:]
	}
	if len(b) != 0 {
		return partitionMeta{}, fmt.Errorf("partition registry entry: %d bytes after its end: %w", len(b), corrupt.Err)
	}
	return m, nil
}

// sortedParts returns the head partitions in time order. The caller holds
// h.mu.
func (h *head) sortedPartsLocked() []*headPart {
	ps := make([]*headPart, 0, len(h.parts))
	for _, p := range h.parts {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].start < ps[j].start })
	return ps
}

func (h *head) partsOverlapping(mint, maxt int64) []*headPart {
	h.mu.RLock()
	defer h.mu.RUnlock()
	var out []*headPart
	for _, p := range h.sortedPartsLocked() {
		if p.start <= maxt && p.end > mint {
			out = append(out, p)
		}
	}
	return out
}

// numSeries returns the number of series of the head's partitions, a series
// in two partitions counted twice.
func (h *head) numSeries() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	n := 0
	for _, p := range h.parts {
		p.mu.RLock()
		n += len(p.series)
		p.mu.RUnlock()
	}
	return n
}

var _ = context.Background

// retiredSeries is what a series of an ended partition keeps once
// everything it received is in the LSM: enough to take a late sample as the
// live series would (its newest in-order time, and its value there to tell
// a resent duplicate from a conflicting one). 16 bytes where a live series
// costs 128 and a pointer.
type retiredSeries struct {
	lastV float64
	// t is the newest in-order time minus the partition's start plus one,
	// 0 for none.
	t         uint32
	lastFloat bool
}

// maxT returns the newest in-order time r kept, math.MinInt64 for none.
func (r *retiredSeries) maxT(start int64) int64 {
	if r.t == 0 {
		return math.MinInt64
	}
	return start + int64(r.t) - 1
}

// retireIdle retires the series of the partition whose every sample is in
// the LSM and that nothing else holds in memory: each becomes a
// retiredSeries and its memSeries is let go. The writer calls it for a
// partition that has ended (the head's newest samples are past it), which
// otherwise holds a memSeries per series for as long as it accepts late
// samples, beside the new partition's: at a partition boundary every
// active series twice. A late sample brings a retired series back (revive);
// appenders that hold a retired memSeries find it marked and ask again
// (Commit). Only series whose forward-index entries are recorded retire, so
// recordSeries never meets one. It returns the number retired.
func (p *headPart) retireIdle() int {
	const batch = 16 << 10 // series per hold of p.mu
	p.mu.RLock()
	done := p.nRetired == len(p.series)
	p.mu.RUnlock()
	if done {
		return 0 // every flush until the partition closes asks again
	}
	recorded := int(p.recorded.Load())
	n := 0
	for lo := 0; ; lo += batch {
		p.mu.Lock()
		hi := min(lo+batch, len(p.series), recorded)
		if lo >= hi {
			p.mu.Unlock()
			return n
		}
		if len(p.retired) < hi {
			p.retired = slices.Grow(p.retired, len(p.series)-len(p.retired))[:len(p.series)]
		}
		for ref := lo; ref < hi; ref++ {
			s := p.series[ref]
			if s == nil {
				continue
			}
			s.lock()
			if s.x == nil && s.flushing == nil && s.app.Count() == 0 {
				r := retiredSeries{lastV: s.lastV, lastFloat: s.lastFloat}
				if t := s.maxT(); t != math.MinInt64 {
					r.t = uint32(t-p.start) + 1
				}
				p.retired[ref] = r
				s.retired = true
				p.series[ref] = nil
				p.nRetired++
				n++
			}
			s.unlock()
		}
		p.mu.Unlock()
	}
}

// revive returns series ref, bringing it back if it is retired.
func (p *headPart) revive(ref uint32) *memSeries {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reviveLocked(ref)
}

// reviveLocked is revive with p.mu held for writing.
func (p *headPart) reviveLocked(ref uint32) *memSeries {
	if s := p.series[ref]; s != nil {
		return s
	}
	r := &p.retired[ref]
	s := newMemSeries(ref, p)
	s.app.Reset(r.maxT(p.start))
	s.lastV, s.lastFloat = r.lastV, r.lastFloat
	p.series[ref] = s
	p.nRetired--
	return s
}

// queryView returns, for a query, series ref (nil if retired or absent),
// and the newest time of a retired one; ok is false if the partition has no
// series ref.
func (p *headPart) queryView(ref uint32) (s *memSeries, retiredNewest int64, ok bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if int(ref) >= len(p.series) {
		return nil, 0, false
	}
	if s = p.series[ref]; s != nil {
		return s, 0, true
	}
	return nil, p.retiredNewestLocked(ref), true
}

// retiredNewestLocked is newestLocked for retired series ref; the caller
// holds p.mu.
func (p *headPart) retiredNewestLocked(ref uint32) int64 {
	return p.storedNewest(ref, p.retired[ref].maxT(p.start))
}
