package index

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/prometheus/prometheus/model/labels"
)

// MemIndex is the index of one open (head) partition: the series
// dictionary, the forward index and the postings, in memory. It is safe for
// concurrent use by many appenders and queries.
//
// Label names and values are interned in one symbol table; a series is kept
// as the varint symbol ids of its labels in a paged byte arena, so a series
// costs a few dozen bytes plus its share of the postings.
//
// Refs are dense from 0 in creation order. Bitmaps and slices that MemIndex
// returns are copies or immutable snapshots: the caller may keep them while
// series are added.
type MemIndex struct {
	mu sync.RWMutex

	symbols map[string]uint32 // interned string -> id
	symtab  []string          // id -> string

	// The series dictionary: labels hash -> first ref with that hash, and the
	// rarely needed further refs when distinct label sets share a hash. It
	// is built on the first GetOrCreate: an index filled only by Add (the
	// head keeps its own dictionary) does without it.
	byHash     map[uint64]uint32
	collisions map[uint64][]uint32

	// Forward index: ref -> position in the arena of the series' encoding
	// (uvarint label count, then uvarint name id and value id per label).
	offsets []uint32
	pages   [][]byte

	postings map[string]*namePostings // keyed by interned label name

	hash func(labels.Labels) uint64 // labels.Labels.Hash; replaced by tests to force collisions
}

type namePostings struct {
	all    countedBitmap      // every series that carries the label
	values map[string]posting // interned value -> series

	// Sorted values, brought up to date by readers from pending (values
	// added since), under sortMu while holding MemIndex.mu for reading.
	// Writers append to pending under MemIndex.mu held for writing.
	sortMu  sync.Mutex
	sorted  []string
	pending []string
}

const (
	pageBits = 20
	pageSize = 1 << pageBits
	maxPages = 1 << (32 - pageBits)
)

// NewMemIndex returns an empty index.
func NewMemIndex() *MemIndex {
	return &MemIndex{
		symbols:  make(map[string]uint32),
		postings: make(map[string]*namePostings),
		hash:     labels.Labels.Hash,
	}
}

// NumSeries returns the number of series in the index; refs are 0 to
// NumSeries()-1.
func (ix *MemIndex) NumSeries() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.offsets)
}

// GetOrCreate returns the ref of the series lset, adding it if it is new
// (created=true). Labels with an empty value are dropped first, as
// Prometheus does: a label with an empty value is an absent label. lset must
// be sorted by name without duplicate names (labels.Labels always is).
func (ix *MemIndex) GetOrCreate(lset labels.Labels) (ref uint32, created bool) {
	if hasEmptyValue(lset) {
		lset = lset.WithoutEmpty()
	}
	h := ix.hash(lset)
	ix.mu.RLock()
	ref, ok := ix.lookupLocked(h, lset)
	ix.mu.RUnlock()
	if ok {
		return ref, false
	}

	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.byHash == nil {
		ix.buildDictionaryLocked()
	}
	if ref, ok := ix.lookupLocked(h, lset); ok {
		return ref, false
	}
	ref = ix.createLocked(lset)
	ix.addToDictionaryLocked(h, ref)
	return ref, true
}

// Add adds the series lset without looking for it, for a caller that keeps
// its own series dictionary and knows lset is new, and returns its ref.
// lset must be sorted by name, without duplicate names or empty values.
// Adding a series the index holds makes a second series of the same labels.
func (ix *MemIndex) Add(lset labels.Labels) uint32 {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ref := ix.createLocked(lset)
	if ix.byHash != nil {
		ix.addToDictionaryLocked(ix.hash(lset), ref)
	}
	return ref
}

// buildDictionaryLocked starts the dictionary with the series that Add put
// in without it.
func (ix *MemIndex) buildDictionaryLocked() {
	ix.byHash = make(map[uint64]uint32, len(ix.offsets))
	builder := labels.NewScratchBuilder(16)
	for ref := range uint32(len(ix.offsets)) {
		builder.Reset()
		ix.addLabelsLocked(ref, &builder)
		ix.addToDictionaryLocked(ix.hash(builder.Labels()), ref)
	}
}

func (ix *MemIndex) addToDictionaryLocked(h uint64, ref uint32) {
	if _, taken := ix.byHash[h]; taken {
		if ix.collisions == nil {
			ix.collisions = make(map[uint64][]uint32)
		}
		ix.collisions[h] = append(ix.collisions[h], ref)
	} else {
		ix.byHash[h] = ref
	}
}

func hasEmptyValue(lset labels.Labels) bool {
	empty := false
	lset.Range(func(l labels.Label) {
		if l.Value == "" {
			empty = true
		}
	})
	return empty
}

func (ix *MemIndex) lookupLocked(h uint64, lset labels.Labels) (uint32, bool) {
	ref, ok := ix.byHash[h]
	if !ok {
		return 0, false
	}
	if ix.equalLocked(ref, lset) {
		return ref, true
	}
	for _, ref := range ix.collisions[h] {
		if ix.equalLocked(ref, lset) {
			return ref, true
		}
	}
	return 0, false
}

// Equal reports whether series ref has the labels lset, comparing them
// without building the series' labels; false if there is no such series.
func (ix *MemIndex) Equal(ref uint32, lset labels.Labels) bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return int(ref) < len(ix.offsets) && ix.equalLocked(ref, lset)
}

// EqualHeld is Equal for a caller that keeps every Add and GetOrCreate from
// running meanwhile by a lock of its own, which it holds: the index's lock
// is not taken. A lookup per sample (a series found by its labels) then
// takes one shared lock, not two; on two cores the read locks' atomic
// counters cost a fifth of an append (BenchmarkAppend in storage).
func (ix *MemIndex) EqualHeld(ref uint32, lset labels.Labels) bool {
	return int(ref) < len(ix.offsets) && ix.equalLocked(ref, lset)
}

// EqualEach is Equal for many series under one lock: for every i with
// refs[i] >= 0 it reports whether series refs[i] has the labels lsets[i] by
// setting refs[i] to -1 when it has not.
func (ix *MemIndex) EqualEach(refs []int64, lsets []labels.Labels) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	for i, ref := range refs {
		if ref >= 0 && (ref >= int64(len(ix.offsets)) || !ix.equalLocked(uint32(ref), lsets[i])) {
			refs[i] = -1
		}
	}
}

// equalLocked compares the stored series ref with lset without building it.
// It is the check of every sample found by its labels: the symbol ids are
// decoded here, ids below 2^14 (every name, and the values of all but the
// largest partitions) inline, rather than through labelIDs.next.
func (ix *MemIndex) equalLocked(ref uint32, lset labels.Labels) bool {
	ids := ix.labelIDsLocked(ref)
	b, n := ids.b, ids.n
	symtab := ix.symtab
	// One pass: lset.Len would walk lset once more just to count.
	equal := true
	lset.Range(func(l labels.Label) {
		if !equal {
			return
		}
		if n == 0 {
			equal = false
			return
		}
		n--
		var id [2]uint64
		for i := range id {
			switch {
			case len(b) > 0 && b[0] < 0x80:
				id[i], b = uint64(b[0]), b[1:]
			case len(b) > 1 && b[1] < 0x80:
				id[i], b = uint64(b[0]&0x7f)|uint64(b[1])<<7, b[2:]
			default:
				v, k := binary.Uvarint(b)
				id[i], b = v, b[k:]
			}
		}
		equal = symtab[id[0]] == l.Name && symtab[id[1]] == l.Value
	})
	return equal && n == 0
}

// labelIDs walks a stored series: the number of its labels, then each
// label's name and value symbol ids, uvarints all.
type labelIDs struct {
	b []byte
	n uint64 // labels left
}

// labelIDsLocked starts a walk over the labels of series ref.
func (ix *MemIndex) labelIDsLocked(ref uint32) labelIDs {
	off := ix.offsets[ref]
	b := ix.pages[off>>pageBits][off&(pageSize-1):]
	n, k := binary.Uvarint(b)
	return labelIDs{b: b[k:], n: n}
}

// next returns the symbol ids of the next label; false after the last.
func (l *labelIDs) next() (name, value uint32, ok bool) {
	if l.n == 0 {
		return 0, 0, false
	}
	l.n--
	nameID, k := binary.Uvarint(l.b)
	l.b = l.b[k:]
	valueID, k := binary.Uvarint(l.b)
	l.b = l.b[k:]
	return uint32(nameID), uint32(valueID), true
}

func (ix *MemIndex) internLocked(s string) (uint32, string) {
	if id, ok := ix.symbols[s]; ok {
		return id, ix.symtab[id]
	}
	// Clone: s usually points into the caller's whole label set.
	s = strings.Clone(s)
	id := uint32(len(ix.symtab))
	ix.symtab = append(ix.symtab, s)
	ix.symbols[s] = id
	return id, s
}

func (ix *MemIndex) createLocked(lset labels.Labels) uint32 {
	ref := uint32(len(ix.offsets))
	if uint64(ref) == 1<<32-1 {
		panic("index: partition holds 2^32-1 series")
	}
	var buf [binary.MaxVarintLen32 * 64]byte
	enc := binary.AppendUvarint(buf[:0], uint64(lset.Len()))
	lset.Range(func(l labels.Label) {
		nameID, name := ix.internLocked(l.Name)
		valueID, value := ix.internLocked(l.Value)
		enc = binary.AppendUvarint(enc, uint64(nameID))
		enc = binary.AppendUvarint(enc, uint64(valueID))

		np := ix.postings[name]
		if np == nil {
			np = &namePostings{values: make(map[string]posting)}
			ix.postings[name] = np
		}
		switch p, ok := np.values[value]; {
		case !ok:
			np.values[value] = posting{one: ref}
			np.pending = append(np.pending, value)
		case p.bm == nil:
			bm := &countedBitmap{}
			bm.add(p.one)
			bm.add(ref)
			np.values[value] = posting{bm: bm}
		default:
			p.bm.add(ref)
		}
		np.all.add(ref)
	})
	ix.offsets = append(ix.offsets, ix.appendSeriesLocked(enc))
	return ref
}

// appendSeriesLocked stores enc in the arena and returns its position. A
// page is never reallocated, so positions stay valid; an encoding larger than
// a page gets a page of its own.
func (ix *MemIndex) appendSeriesLocked(enc []byte) uint32 {
	last := len(ix.pages) - 1
	if last < 0 || len(ix.pages[last])+len(enc) > cap(ix.pages[last]) {
		if len(ix.pages) == maxPages {
			panic("index: series arena full")
		}
		ix.pages = append(ix.pages, make([]byte, 0, max(pageSize, len(enc))))
		last++
	}
	off := uint32(last)<<pageBits | uint32(len(ix.pages[last]))
	ix.pages[last] = append(ix.pages[last], enc...)
	return off
}

// Labels returns the labels of series ref, or empty labels if there is no
// such series.
func (ix *MemIndex) Labels(ref uint32) labels.Labels {
	builder := labels.NewScratchBuilder(16)
	lset, err := ix.Series(context.Background(), ref, &builder)
	if err != nil {
		return labels.EmptyLabels()
	}
	return lset
}

// Series implements SeriesReader.
func (ix *MemIndex) Series(_ context.Context, ref uint32, builder *labels.ScratchBuilder) (labels.Labels, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if int(ref) >= len(ix.offsets) {
		return labels.EmptyLabels(), fmt.Errorf("series %d of %d: %w", ref, len(ix.offsets), ErrSeriesNotFound)
	}
	builder.Reset()
	ix.addLabelsLocked(ref, builder)
	return builder.Labels(), nil
}

func (ix *MemIndex) addLabelsLocked(ref uint32, builder *labels.ScratchBuilder) {
	ids := ix.labelIDsLocked(ref)
	for nameID, valueID, ok := ids.next(); ok; nameID, valueID, ok = ids.next() {
		builder.Add(ix.symtab[nameID], ix.symtab[valueID])
	}
}

// LabelNames implements Reader.
func (ix *MemIndex) LabelNames(context.Context) ([]string, error) {
	ix.mu.RLock()
	names := make([]string, 0, len(ix.postings))
	for name := range ix.postings {
		names = append(names, name)
	}
	ix.mu.RUnlock()
	slices.Sort(names)
	return names, nil
}

// LabelValues implements Reader. The returned slice is shared: do not
// modify it.
func (ix *MemIndex) LabelValues(_ context.Context, name string) ([]string, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	np := ix.postings[name]
	if np == nil {
		return nil, nil
	}
	return np.sortedValuesLocked(), nil
}

// sortedValuesLocked merges the pending values into the sorted ones. The
// result is never modified afterwards: a merge builds a new slice.
func (np *namePostings) sortedValuesLocked() []string {
	np.sortMu.Lock()
	defer np.sortMu.Unlock()
	if len(np.pending) == 0 {
		return np.sorted
	}
	add := slices.Clone(np.pending)
	slices.Sort(add)
	merged := make([]string, 0, len(np.sorted)+len(add))
	i, j := 0, 0
	for i < len(np.sorted) && j < len(add) {
		if np.sorted[i] < add[j] {
			merged = append(merged, np.sorted[i])
			i++
		} else {
			merged = append(merged, add[j])
			j++
		}
	}
	merged = append(merged, np.sorted[i:]...)
	merged = append(merged, add[j:]...)
	np.sorted = merged
	// Writers append to pending only under the write lock, which cannot be
	// held now.
	np.pending = nil
	return merged
}

// Postings implements Reader. The bitmap is a copy.
func (ix *MemIndex) Postings(_ context.Context, name, value string) (*roaring.Bitmap, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if np := ix.postings[name]; np != nil {
		if p, ok := np.values[value]; ok {
			return p.clone(), nil
		}
	}
	return roaring.New(), nil
}

// ValuesIntersecting implements ValuesIntersecter: the postings are read
// in place, a few values per hold of the lock, not copied.
func (ix *MemIndex) ValuesIntersecting(ctx context.Context, name string, values []string, p *roaring.Bitmap) ([]string, error) {
	var out []string
	for start := 0; start < len(values); start += checkContextEvery {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ix.mu.RLock()
		np := ix.postings[name]
		if np == nil {
			ix.mu.RUnlock()
			return nil, nil
		}
		for _, v := range values[start:min(start+checkContextEvery, len(values))] {
			if ps, ok := np.values[v]; ok && ps.intersects(p) {
				out = append(out, v)
			}
		}
		ix.mu.RUnlock()
	}
	return out, nil
}

// NamesIntersecting implements NamesIntersecter: each label's postings
// are read in place, not copied.
func (ix *MemIndex) NamesIntersecting(ctx context.Context, names []string, p *roaring.Bitmap) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []string
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	for _, name := range names {
		if np := ix.postings[name]; np != nil && Intersects(&np.all.Bitmap, p) {
			out = append(out, name)
		}
	}
	return out, nil
}

// PostingsForValues implements MultiPostingsReader.
func (ix *MemIndex) PostingsForValues(ctx context.Context, name string, values []string) (*roaring.Bitmap, error) {
	if len(values) == 0 {
		return roaring.New(), nil // not postingsLocked's nil: the whole label
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	bms, err := ix.postingsLocked(ctx, name, values)
	if err != nil {
		return nil, err
	}
	return roaring.FastOr(bms...), nil
}

// LabelPostings implements LabelPostingsReader. The bitmap is a copy.
func (ix *MemIndex) LabelPostings(_ context.Context, name string) (*roaring.Bitmap, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if np := ix.postings[name]; np != nil {
		return np.all.Clone(), nil
	}
	return roaring.New(), nil
}

// AllPostings implements Reader.
func (ix *MemIndex) AllPostings(context.Context) (*roaring.Bitmap, error) {
	bm := roaring.New()
	if n := ix.NumSeries(); n > 0 {
		bm.AddRange(0, uint64(n))
	}
	return bm, nil
}

// ForEachPostings calls fn for every label pair, in order of name then
// value, with the refs >= fromRef that carry it; pairs with no such ref are
// skipped. fromRef lets a flush write only the series added since the last
// one. fn owns the bitmap. No lock is held while fn runs, so appenders carry
// on; series added meanwhile may or may not be included. An error from fn
// stops the iteration and is returned.
func (ix *MemIndex) ForEachPostings(fromRef uint32, fn func(name, value string, bm *roaring.Bitmap) error) error {
	names, _ := ix.LabelNames(context.Background())
	for _, name := range names {
		values, _ := ix.LabelValues(context.Background(), name)
		for _, value := range values {
			ix.mu.RLock()
			p := ix.postings[name].values[value]
			if p.max() < fromRef {
				ix.mu.RUnlock()
				continue
			}
			bm := p.clone()
			ix.mu.RUnlock()
			if fromRef > 0 {
				bm.RemoveRange(0, uint64(fromRef))
			}
			if err := fn(name, value, bm); err != nil {
				return err
			}
		}
	}
	return nil
}

// ForEachSeries calls fn with every series whose ref is in [fromRef,
// NumSeries()) at the time of the call, in ref order. The labels stay valid
// after fn returns. No lock is held while fn runs. An error from fn stops the
// iteration and is returned.
func (ix *MemIndex) ForEachSeries(fromRef uint32, fn func(ref uint32, lset labels.Labels) error) error {
	n := uint32(ix.NumSeries())
	builder := labels.NewScratchBuilder(16)
	for ref := fromRef; ref < n; ref++ {
		ix.mu.RLock()
		builder.Reset()
		ix.addLabelsLocked(ref, &builder)
		ix.mu.RUnlock()
		if err := fn(ref, builder.Labels()); err != nil {
			return err
		}
	}
	return nil
}

var (
	_ SeriesReader        = (*MemIndex)(nil)
	_ MultiPostingsReader = (*MemIndex)(nil)
	_ LabelPostingsReader = (*MemIndex)(nil)
	_ PostingsCombiner    = (*MemIndex)(nil)
)

// postingsLocked returns the internal bitmaps of the set (see
// PostingsCombiner); nil values means the label's postings.
func (ix *MemIndex) postingsLocked(ctx context.Context, name string, values []string) ([]*roaring.Bitmap, error) {
	np := ix.postings[name]
	if np == nil {
		return nil, nil
	}
	if values == nil {
		return []*roaring.Bitmap{&np.all.Bitmap}, nil
	}
	bms := make([]*roaring.Bitmap, 0, len(values))
	for i, v := range values {
		if i%checkContextEvery == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if p, ok := np.values[v]; ok {
			bms = append(bms, p.shared())
		}
	}
	return bms, nil
}

// PostingsCardinality implements PostingsCombiner.
func (ix *MemIndex) PostingsCardinality(ctx context.Context, name string, values []string) (uint64, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	bms, err := ix.postingsLocked(ctx, name, values)
	var n uint64
	for _, bm := range bms {
		n += bm.GetCardinality()
	}
	return n, err
}

// AndPostings implements PostingsCombiner.
func (ix *MemIndex) AndPostings(ctx context.Context, bm *roaring.Bitmap, name string, values []string) error {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	bms, err := ix.postingsLocked(ctx, name, values)
	if err != nil {
		return err
	}
	if len(bms) == 0 {
		bm.Clear()
		return nil
	}
	if len(bms) > 1 {
		var total uint64
		for _, x := range bms {
			total += x.GetCardinality()
		}
		// Checking a series' value in the forward index costs a cache miss
		// or two, like merging some dozens of postings entries (measured
		// with BenchmarkSelect): when the candidates are that few against
		// the postings to merge, check them instead.
		if bm.GetCardinality()*forwardCheckCost < total {
			ix.andByForwardLocked(bm, name, values)
			return nil
		}
	}
	bm.AndAny(bms...)
	return nil
}

const forwardCheckCost = 64

// andByForwardLocked keeps the refs of bm whose value of label name is one
// of values, reading the forward index.
func (ix *MemIndex) andByForwardLocked(bm *roaring.Bitmap, name string, values []string) {
	nameID, ok := ix.symbols[name]
	if !ok {
		bm.Clear()
		return
	}
	want := make(map[uint32]struct{}, len(values))
	for _, v := range values {
		if id, ok := ix.symbols[v]; ok {
			want[id] = struct{}{}
		}
	}
	var keep []uint32
	it := bm.Iterator()
	for it.HasNext() {
		ref := it.Next()
		if _, ok := want[ix.valueIDLocked(ref, nameID)]; ok {
			keep = append(keep, ref)
		}
	}
	// Rebuilt rather than removed from: each Remove shifts an array.
	bm.Clear()
	bm.AddMany(keep)
}

// valueIDLocked returns the symbol id of the value of label nameID in
// series ref, or an id no value has if the series lacks the label.
func (ix *MemIndex) valueIDLocked(ref, nameID uint32) uint32 {
	ids := ix.labelIDsLocked(ref)
	for id, valueID, ok := ids.next(); ok; id, valueID, ok = ids.next() {
		if id == nameID {
			return valueID
		}
	}
	return math.MaxUint32
}

// AndNotPostings implements PostingsCombiner.
func (ix *MemIndex) AndNotPostings(ctx context.Context, bm *roaring.Bitmap, name string, values []string) error {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	bms, err := ix.postingsLocked(ctx, name, values)
	if err != nil {
		return err
	}
	// Roaring subtracts from a run container through a temporary bitmap
	// container (8 KiB); a few refs subtract faster as arrays.
	if len(bms) > 0 && bm.GetCardinality() <= 4096 && bm.HasRunCompression() {
		refs := bm.ToArray()
		bm.Clear()
		bm.AddMany(refs)
	}
	for _, x := range bms {
		if bm.IsEmpty() {
			break
		}
		bm.AndNot(x)
	}
	return nil
}

// posting holds the series of one label pair: the ref inline while there is
// only one (values unique to a series are common: ids, uids), a bitmap from
// the second on. An inline ref saves some 150 bytes.
type posting struct {
	bm  *countedBitmap // nil: the pair has the single series one
	one uint32
}

// shared returns the bitmap to read under the lock, not to keep or modify.
func (p posting) shared() *roaring.Bitmap {
	if p.bm == nil {
		return roaring.BitmapOf(p.one)
	}
	return &p.bm.Bitmap
}

func (p posting) clone() *roaring.Bitmap {
	if p.bm == nil {
		return roaring.BitmapOf(p.one)
	}
	return p.bm.Clone()
}

// intersects reports whether the pair has a series in other.
func (p posting) intersects(other *roaring.Bitmap) bool {
	if p.bm == nil {
		return other.Contains(p.one)
	}
	return Intersects(&p.bm.Bitmap, other)
}

func (p posting) card() uint64 {
	if p.bm == nil {
		return 1
	}
	return p.bm.n
}

// cardIn returns how many of the pair's series are in only, all of them
// when only is nil.
func (p posting) cardIn(only *roaring.Bitmap) uint64 {
	switch {
	case only == nil:
		return p.card()
	case p.bm == nil:
		if only.Contains(p.one) {
			return 1
		}
		return 0
	}
	return p.bm.AndCardinality(only)
}

func (p posting) max() uint32 {
	if p.bm == nil {
		return p.one
	}
	return p.bm.Maximum()
}

// countedBitmap is a postings bitmap that keeps its cardinality: roaring
// counts a run container's members run by run, which made that count the
// largest cost of series creation at a million series.
type countedBitmap struct {
	roaring.Bitmap
	n uint64
}

// add adds ref and, each time the size reaches a power of two from 64 on,
// turns runs of consecutive refs into run containers: the series of one
// target are created together, so postings are mostly runs, which take less
// memory and combine faster. The cost is amortised O(1).
func (c *countedBitmap) add(ref uint32) {
	if !c.CheckedAdd(ref) {
		return
	}
	c.n++
	if c.n >= 64 && c.n&(c.n-1) == 0 {
		c.RunOptimize()
	}
}
