package lsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"unsafe"

	"github.com/shaledb/shale/storage/lsm/sst"
)

// ErrNoMergeOperator is returned by a read that meets merge operands, or a
// Merge write, when no MergeOperator was given.
var ErrNoMergeOperator = errors.New("lsm: merge operand found but no merge operator configured")

// view is an immutable picture of what a read consults, newest source first.
// The mutable memtable keeps growing after the view is taken; reads ignore
// entries newer than their snapshot sequence number.
type view struct {
	mem  *memtable   // nil for a reader that does not replay the WAL
	imms []*memtable // newest first
	man  *manifest
}

// tombs returns every range tombstone visible at snap.
func (v *view) tombs(snap uint64) []rangeTomb {
	var out []rangeTomb
	add := func(ts []rangeTomb) {
		for _, t := range ts {
			if t.seq <= snap {
				out = append(out, t)
			}
		}
	}
	add(v.man.Tombs)
	for _, m := range v.imms {
		add(m.rangeTombs())
	}
	if v.mem != nil {
		add(v.mem.rangeTombs())
	}
	return out
}

func covered(tombs []rangeTomb, key []byte, seq uint64) bool {
	for i := range tombs {
		if tombs[i].covers(key, seq) {
			return true
		}
	}
	return false
}

// resolver turns the versions of one key, newest first, into its value.
type resolver struct {
	merge MergeOperator
	tombs []rangeTomb

	ops     [][]byte
	lastSeq uint64
	done    bool // a Put, Delete or covering tombstone was met
	base    []byte
	hasBase bool
	seen    bool
}

func (r *resolver) reset() {
	r.ops = r.ops[:0]
	r.done, r.base, r.hasBase, r.seen = false, nil, false, false
	r.lastSeq = 0
}

// add feeds the next older version. Values are kept by reference; the
// caller keeps them alive until value is called.
func (r *resolver) add(key []byte, e *entry) {
	if r.done || (r.seen && e.seq == r.lastSeq) {
		return
	}
	r.seen, r.lastSeq = true, e.seq
	if covered(r.tombs, key, e.seq) {
		r.done = true
		return
	}
	switch e.kind {
	case kindPut:
		r.done = true
		r.base, r.hasBase = e.value, true
	case kindDelete:
		r.done = true
	case kindMerge:
		r.ops = append(r.ops, e.value)
	}
}

// value returns the key's value and whether it exists.
func (r *resolver) value(key []byte) ([]byte, bool, error) {
	if len(r.ops) == 0 {
		return r.base, r.hasBase, nil
	}
	if r.merge == nil {
		return nil, false, ErrNoMergeOperator
	}
	for i, j := 0, len(r.ops)-1; i < j; i, j = i+1, j-1 {
		r.ops[i], r.ops[j] = r.ops[j], r.ops[i]
	}
	var base []byte
	if r.hasBase {
		base = r.base
	}
	v, err := r.merge(key, base, r.ops)
	if err != nil {
		return nil, false, fmt.Errorf("merge operator on key %q: %w", key, err)
	}
	return v, true, nil
}

// get reads key at snapshot snap from v. The returned value is the caller's.
func get(ctx context.Context, s *store, v *view, snap uint64, key []byte, merge MergeOperator) ([]byte, bool, error) {
	r := resolver{merge: merge, tombs: v.tombs(snap)}
	var entsBuf [4]entry
	ents := entsBuf[:0]
	for i := -1; i < len(v.imms); i++ {
		m := v.mem
		if i >= 0 {
			m = v.imms[i]
		}
		if m == nil {
			continue
		}
		ents = m.get(key, snap, ents[:0])
		for i := range ents {
			r.add(key, &ents[i])
		}
		if r.done {
			return finish(&r, key)
		}
	}
	var candBuf [16]*tableMeta
	candidates := candBuf[:0]
	for i := range v.man.L0 {
		t := &v.man.L0[i]
		if bytes.Compare(key, t.SmallestKey) >= 0 && bytes.Compare(key, t.LargestKey) <= 0 {
			candidates = append(candidates, t)
		}
	}
	for i := range v.man.Runs {
		if j := findTable(v.man.Runs[i].Tables, key); j >= 0 {
			candidates = append(candidates, &v.man.Runs[i].Tables[j])
		}
	}
	s.openAll(ctx, candidates, v.man.L0)
	var sentsBuf [4]sst.Entry
	sents := sentsBuf[:0]
	consult := func(t *tableMeta) error {
		if bytes.Compare(key, t.SmallestKey) < 0 || bytes.Compare(key, t.LargestKey) > 0 {
			return nil
		}
		h, err := s.table(ctx, t)
		if err != nil {
			return err
		}
		if !h.MayContain(key) {
			return nil
		}
		sents, err = h.Get(ctx, key, sents[:0])
		if err != nil {
			return fmt.Errorf("get from table %s: %w", t.ID, err)
		}
		for i := range sents {
			e := entryFromSST(&sents[i])
			r.add(key, &e)
		}
		return nil
	}
	for _, t := range candidates {
		if err := consult(t); err != nil {
			return nil, false, err
		}
		if r.done {
			break
		}
	}
	return finish(&r, key)
}

func finish(r *resolver, key []byte) ([]byte, bool, error) {
	v, ok, err := r.value(key)
	if err != nil || !ok {
		return nil, false, err
	}
	if len(r.ops) == 0 {
		v = bytes.Clone(v)
		if v == nil {
			v = []byte{}
		}
	}
	return v, true, nil
}

// findTable returns the index of the table of a sorted run that may hold
// key, or -1.
func findTable(tables []tableMeta, key []byte) int {
	i := sort.Search(len(tables), func(i int) bool { return bytes.Compare(tables[i].LargestKey, key) >= 0 })
	if i < len(tables) && bytes.Compare(tables[i].SmallestKey, key) <= 0 {
		return i
	}
	return -1
}

func entryFromSST(e *sst.Entry) entry {
	return entry{key: e.Key, value: e.Value, seq: e.Seq, kind: kind(e.Kind), stable: true}
}

// internalIter is a positioned stream of entries in table order.
type internalIter interface {
	seekGE(key []byte) bool // nil: first entry
	next() bool
	valid() bool
	entry() entry // valid until the next positioning call
	err() error
	close() error
}

// snapIter hides memtable entries newer than a snapshot.
type snapIter struct {
	memIter
	snap uint64
}

func (it *snapIter) skip() bool {
	for it.cur != nil && it.cur.e.seq > it.snap {
		it.cur = it.cur.next[0].Load()
	}
	return it.cur != nil
}
func (it *snapIter) seekGE(key []byte) bool { it.memIter.seekGE(key); return it.skip() }
func (it *snapIter) next() bool             { it.memIter.next(); return it.skip() }

// tableIter adapts an sst.Iter.
type tableIter struct {
	it  *sst.Iter
	cur entry
	// scan: it is a scan iterator (sst.Table.NewScanIter), whose values are
	// valid only until its next positioning call, not stable.
	scan bool
}

func (t *tableIter) load(ok bool) bool {
	if ok {
		e := t.it.Entry()
		t.cur = entryFromSST(&e)
		t.cur.stable = !t.scan
	}
	return ok
}
func (t *tableIter) seekGE(key []byte) bool {
	if key == nil {
		return t.load(t.it.First())
	}
	return t.load(t.it.SeekGE(key))
}
func (t *tableIter) next() bool   { return t.load(t.it.Next()) }
func (t *tableIter) valid() bool  { return t.it.Valid() }
func (t *tableIter) entry() entry { return t.cur }
func (t *tableIter) err() error   { return t.it.Err() }
func (t *tableIter) close() error { return t.it.Close() }

// runIter walks the tables of a sorted run in key order, opening each only
// when reached.
type runIter struct {
	ctx          context.Context
	s            *store
	tables       []tableMeta
	lower, upper []byte
	i            int
	cur          *tableIter
	e            error
	// whole makes each table read the iterator's range as a whole; see
	// Iterator.SetReadAhead.
	whole bool
	// noFill leaves the block cache as it is; see Iterator.SetNoFill.
	noFill bool
	// iv, if set, is the interval outside which each table skips its
	// blocks of merge operands; see Iterator.SetInterval.
	iv *Interval
}

func (r *runIter) open(i int) bool {
	if r.cur != nil {
		r.closeCur()
	}
	r.i = i
	if i >= len(r.tables) {
		return false
	}
	if r.upper != nil && bytes.Compare(r.tables[i].SmallestKey, r.upper) >= 0 {
		r.i = len(r.tables)
		return false
	}
	h, err := r.s.table(r.ctx, &r.tables[i])
	if err != nil {
		r.e = err
		r.i = len(r.tables)
		return false
	}
	if r.whole {
		r.cur = &tableIter{it: h.NewRangeIter(r.ctx, r.lower, r.upper)}
	} else {
		r.cur = &tableIter{it: h.NewIter(r.ctx, r.lower, r.upper)}
	}
	if r.iv != nil {
		r.cur.it.SetInterval(*r.iv)
	}
	if r.noFill {
		r.cur.it.SetNoFill()
	}
	return true
}

func (r *runIter) closeCur() {
	// Err before Close: a closed sst.Iter reports that it is closed.
	if err := r.cur.err(); err != nil && r.e == nil {
		r.e = err
	}
	if err := r.cur.close(); err != nil && r.e == nil {
		r.e = err
	}
	r.cur = nil
}

func (r *runIter) seekGE(key []byte) bool {
	if r.e != nil {
		return false
	}
	i := 0
	if key != nil {
		i = sort.Search(len(r.tables), func(i int) bool { return bytes.Compare(r.tables[i].LargestKey, key) >= 0 })
	}
	if !r.open(i) {
		return false
	}
	if r.cur.seekGE(key) {
		return true
	}
	return r.advance()
}

// advance moves to the first entry of the next non-empty table.
func (r *runIter) advance() bool {
	for {
		if err := r.cur.err(); err != nil {
			r.e = err
			r.closeCur()
			return false
		}
		if !r.open(r.i + 1) {
			return false
		}
		if r.cur.seekGE(r.lower) {
			return true
		}
	}
}

func (r *runIter) next() bool {
	if r.cur == nil {
		return false
	}
	if r.cur.next() {
		return true
	}
	return r.advance()
}

func (r *runIter) valid() bool  { return r.cur != nil && r.cur.valid() }
func (r *runIter) entry() entry { return r.cur.entry() }
func (r *runIter) err() error   { return r.e }
func (r *runIter) close() error {
	if r.cur != nil {
		r.closeCur()
	}
	return r.e
}

// mergeIter merges child iterators into one stream in table order (key
// ascending, seq descending) with a binary heap.
type mergeIter struct {
	children []internalIter
	heap     []internalIter
	e        error
	// parallel positions the children whose blocks are not all cached
	// concurrently at the first seek; see Iterator.SetReadAhead.
	parallel bool
}

func (m *mergeIter) less(a, b internalIter) bool {
	ea, eb := a.entry(), b.entry()
	return entryLess(ea.key, ea.seq, eb.key, eb.seq)
}

func (m *mergeIter) down(i int) {
	h := m.heap
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		j := l
		if r := l + 1; r < len(h) && m.less(h[r], h[l]) {
			j = r
		}
		if !m.less(h[j], h[i]) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

func (m *mergeIter) init() {
	for i := len(m.heap)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
}

func (m *mergeIter) collectErr(c internalIter) {
	if err := c.err(); err != nil && m.e == nil {
		m.e = err
	}
}

func (m *mergeIter) seekGE(key []byte) bool {
	m.heap = m.heap[:0]
	if m.parallel {
		m.parallel = false
		return m.seekGEParallel(key)
	}
	for _, c := range m.children {
		if c.seekGE(key) {
			m.heap = append(m.heap, c)
		} else {
			m.collectErr(c)
		}
	}
	m.init()
	return m.valid()
}

func (m *mergeIter) next() bool {
	if len(m.heap) == 0 {
		return false
	}
	top := m.heap[0]
	if !top.next() {
		m.collectErr(top)
		last := len(m.heap) - 1
		m.heap[0] = m.heap[last]
		m.heap = m.heap[:last]
	}
	m.down(0)
	return m.valid()
}

func (m *mergeIter) valid() bool  { return m.e == nil && len(m.heap) > 0 }
func (m *mergeIter) entry() entry { return m.heap[0].entry() }
func (m *mergeIter) err() error   { return m.e }
func (m *mergeIter) close() error {
	var errs []error
	for _, c := range m.children {
		if err := c.close(); err != nil {
			errs = append(errs, err)
		}
	}
	if m.e != nil {
		errs = append(errs, m.e)
	}
	return errors.Join(errs...)
}

// newInternalIter merges every source of v over [lower, upper).
func newInternalIter(ctx context.Context, s *store, v *view, snap uint64, lower, upper []byte, withMem bool) *mergeIter {
	m := &mergeIter{}
	if withMem {
		if v.mem != nil {
			m.children = append(m.children, &snapIter{memIter: memIter{m: v.mem}, snap: snap})
		}
		for _, im := range v.imms {
			m.children = append(m.children, &snapIter{memIter: memIter{m: im}, snap: snap})
		}
	}
	var first []*tableMeta // the table each source starts in
	for i := range v.man.L0 {
		t := &v.man.L0[i]
		if !overlaps(t, lower, upper) {
			continue
		}
		first = append(first, t)
		m.children = append(m.children, &runIter{ctx: ctx, s: s, tables: v.man.L0[i : i+1], lower: lower, upper: upper})
	}
	for i := range v.man.Runs {
		ts := v.man.Runs[i].Tables
		j := 0
		if lower != nil {
			j = sort.Search(len(ts), func(j int) bool { return bytes.Compare(ts[j].LargestKey, lower) >= 0 })
		}
		if j < len(ts) && overlaps(&ts[j], lower, upper) {
			first = append(first, &ts[j])
		}
		m.children = append(m.children, &runIter{ctx: ctx, s: s, tables: ts, lower: lower, upper: upper})
	}
	s.openAll(ctx, first, v.man.L0)
	return m
}

func overlaps(t *tableMeta, lower, upper []byte) bool {
	if lower != nil && bytes.Compare(t.LargestKey, lower) < 0 {
		return false
	}
	if upper != nil && bytes.Compare(t.SmallestKey, upper) >= 0 {
		return false
	}
	return true
}

// Iterator walks the live keys of a consistent snapshot in ascending key
// order within [lower, upper). It is not safe for concurrent use. Key and
// Value are valid until the next positioning call; copy them to keep them.
// An Iterator must be closed.
type Iterator struct {
	ctx          context.Context
	src          *mergeIter
	lower, upper []byte
	r            resolver
	merge        MergeOperator // the DB's, which SetMerge(nil) restores
	key          []byte
	val          []byte
	bufs         [][]byte // owned copies of the versions being resolved
	slab         []byte   // where TakeValue copies values, see there
	slabSize     int
	want         func(key []byte) bool
	keep         func(key, value []byte) bool
	valid        bool
	e            error
	closed       bool
}

func newIterator(ctx context.Context, src *mergeIter, lower, upper []byte, r resolver) *Iterator {
	return &Iterator{ctx: ctx, src: src, lower: bytes.Clone(lower), upper: bytes.Clone(upper), r: r, merge: r.merge}
}

// SetFilter makes the iterator skip every key for which want returns false
// without reading or merging its versions: a scan that needs a few keys of
// a range pays for the others only their keys. want sees each distinct key
// once, in ascending order, and must not keep it. Set it before the first
// positioning call; nil keeps every key.
func (it *Iterator) SetFilter(want func(key []byte) bool) { it.want = want }

// SetValueFilter makes the iterator resolve every version of a key whose
// value keep rejects (a Put's value or a merge operand) as if it were empty,
// without reading it into the iterator's buffers: a scan that needs part of
// each value, such as the blocks of a sample key that hold samples in a
// query's time range, skips copying and merging the rest. The merge
// operator must take an empty operand as holding nothing. keep must not
// keep key or value. Set it before the first positioning call; nil keeps
// every version.
func (it *Iterator) SetValueFilter(keep func(key, value []byte) bool) { it.keep = keep }

// SetMerge makes the iterator resolve merge operands with op instead of the
// DB's read merge operator (Components.ReadMerge, else Merge). op may
// return one of its inputs, which the iterator owns (see TakeValue). Set it
// before the first positioning call; nil restores the DB's.
func (it *Iterator) SetMerge(op MergeOperator) {
	if op == nil {
		op = it.merge
	}
	it.r.merge = op
}

// SetInterval makes the iterator's tables skip, without reading them, the
// data blocks whose entries are all merge operands whose interval
// (Components.OperandInterval) lies outside iv: to the iterator their
// operands are not there, as if a value filter (SetValueFilter) had
// rejected each. The blocks kept are read whole, with what they hold outside
// iv, and the memtables are read as they are, so a caller that wants only
// the operands within iv filters values too. Set it before the first
// positioning call.
func (it *Iterator) SetInterval(iv Interval) {
	for _, c := range it.src.children {
		if r, ok := c.(*runIter); ok {
			r.iv = &iv
		}
	}
}

// First moves to the first live key at or after the lower bound.
func (it *Iterator) First() bool { return it.SeekGE(nil) }

// SeekGE moves to the first live key >= key (and >= the lower bound).
func (it *Iterator) SeekGE(key []byte) bool {
	if it.e != nil || it.closed {
		return false
	}
	if key == nil || (it.lower != nil && bytes.Compare(key, it.lower) < 0) {
		key = it.lower
	}
	it.src.seekGE(key)
	return it.settle()
}

// Next moves to the next live key.
func (it *Iterator) Next() bool {
	if !it.valid {
		return false
	}
	return it.settle()
}

// settle resolves keys from the current source position until one is live.
func (it *Iterator) settle() bool {
	it.valid = false
	for it.src.valid() {
		if err := it.ctx.Err(); err != nil {
			it.e = err
			return false
		}
		e := it.src.entry()
		if it.upper != nil && bytes.Compare(e.key, it.upper) >= 0 {
			break
		}
		it.key = append(it.key[:0], e.key...)
		if it.want != nil && !it.want(it.key) {
			for it.src.next() && bytes.Equal(it.src.entry().key, it.key) {
			}
			continue
		}
		it.r.reset()
		nb := 0
		for {
			if !it.r.done {
				switch {
				case it.keep != nil && (e.kind == kindPut || e.kind == kindMerge) && !it.keep(it.key, e.value):
					e.value = nil
				case e.stable:
					// A table's block outlives the positioning; no copy, and
					// no room to append into it.
					e.value = e.value[:len(e.value):len(e.value)]
				default:
					if nb == len(it.bufs) {
						it.bufs = append(it.bufs, nil)
					}
					it.bufs[nb] = append(it.bufs[nb][:0], e.value...)
					e.value = it.bufs[nb]
					nb++
				}
				it.r.add(it.key, &e)
			}
			if !it.src.next() {
				break
			}
			e = it.src.entry()
			if !bytes.Equal(e.key, it.key) {
				break
			}
		}
		v, ok, err := it.r.value(it.key)
		if err != nil {
			it.e = err
			return false
		}
		if ok {
			it.val = v
			it.valid = true
			return true
		}
	}
	if err := it.src.err(); err != nil {
		it.e = err
	}
	return false
}

// Valid reports whether the iterator is at a key.
func (it *Iterator) Valid() bool { return it.valid }

// Key returns the current key.
func (it *Iterator) Key() []byte { return it.key }

// Value returns the current value.
func (it *Iterator) Value() []byte { return it.val }

// TakeValue returns the current value for the caller to keep: later
// positioning calls do not write over it, as they write over Value's. It
// spares a caller that keeps values its own copy of each: a merge
// operator's fresh result and a table's value (which lies in an immutable
// data block) are handed over as they are, and a value in the iterator's
// buffers (a memtable's) is copied into a slab that the iterator fills with
// the values taken one after another and then lets go of (1 KiB at first,
// doubling up to 256 KiB). A scan that keeps the value of every key (a
// query's sample blocks) thus allocates a slab every few hundred values
// instead of a buffer for each. Values taken may share their allocation:
// keeping one keeps its slab, or its table's data block, alive. The caller
// must not modify a value taken.
func (it *Iterator) TakeValue() []byte {
	v := it.val
	if cap(v) == 0 {
		return v
	}
	at := uintptr(unsafe.Pointer(unsafe.SliceData(v)))
	owned := false
	for _, b := range it.bufs {
		if cap(b) == 0 {
			continue
		}
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		if at >= lo && at < lo+uintptr(cap(b)) {
			owned = true
			break
		}
	}
	if !owned {
		return v[:len(v):len(v)]
	}
	if cap(it.slab)-len(it.slab) < len(v) {
		// Slabs grow from a few values' worth, so that a scan that keeps
		// a handful does not hold a large one.
		it.slabSize = min(max(2*it.slabSize, minTakeSlab), maxTakeSlab)
		it.slab = make([]byte, 0, max(it.slabSize, len(v)))
	}
	start := len(it.slab)
	it.slab = append(it.slab, v...)
	return it.slab[start:len(it.slab):len(it.slab)]
}

// The sizes of the slabs TakeValue copies values into.
const (
	minTakeSlab = 1 << 10
	maxTakeSlab = 256 << 10
)

// Err returns the error that stopped the iteration, if any.
func (it *Iterator) Err() error { return it.e }

// Close releases the iterator.
func (it *Iterator) Close() error {
	if it.closed {
		return nil
	}
	it.closed = true
	it.valid = false
	err := it.src.close()
	if it.e != nil {
		return it.e
	}
	return err
}

// PrefixUpperBound returns the smallest key greater than every key with the
// given prefix, or nil when there is none (the prefix is all 0xff).
func PrefixUpperBound(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}
