package gorilla

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// Merge appends to dst a block with the union of the samples of older and
// newer in time order; where both hold a sample at the same timestamp, the
// one of newer is kept. An empty slice stands for a block without samples;
// if both are empty, dst is returned unchanged.
//
// Blocks of different kinds merge into a KindMixed block.
func Merge(dst, older, newer []byte) ([]byte, error) {
	return MergeAll(dst, older, newer)
}

// MergeAll is Merge over any number of blocks: on equal timestamps the
// sample of the later argument is kept.
func MergeAll(dst []byte, blocks ...[]byte) ([]byte, error) {
	m := mergerPool.Get().(*merger)
	defer mergerPool.Put(m)
	return m.merge(dst, blocks)
}

type merger struct {
	its   []*Iterator
	cur   []chunkenc.ValueType
	order []int
	b     builder
}

var mergerPool = sync.Pool{New: func() any { return new(merger) }}

func (m *merger) merge(dst []byte, blocks [][]byte) ([]byte, error) {
	for len(m.its) < len(blocks) {
		m.its = append(m.its, &Iterator{})
	}
	m.cur = m.cur[:0]
	for i, blk := range blocks {
		vt := chunkenc.ValNone
		if len(blk) > 0 {
			if err := m.its[i].Reset(blk); err != nil {
				return dst, fmt.Errorf("merge block %d: %w", i, err)
			}
			vt = m.its[i].Next()
		}
		m.cur = append(m.cur, vt)
	}
	m.b.reset()
	defer m.b.reset()
	its := m.its[:len(blocks)]
	if m.floatRuns(its) {
		if len(m.b.ts) == 0 {
			return dst, nil
		}
		return Encode(dst, m.b.ts, m.b.vs)
	}
	for {
		win, t := -1, int64(math.MaxInt64)
		for i, vt := range m.cur {
			if vt == chunkenc.ValNone {
				continue
			}
			if at := its[i].AtT(); win < 0 || at <= t {
				win, t = i, at
			}
		}
		if win < 0 {
			break
		}
		if err := m.b.add(its[win], m.cur[win]); err != nil {
			return dst, fmt.Errorf("merge: %w", err)
		}
		for i, vt := range m.cur {
			if vt != chunkenc.ValNone && its[i].AtT() == t {
				if m.cur[i] = its[i].Next(); m.cur[i] == chunkenc.ValNone {
					if err := its[i].Err(); err != nil {
						return dst, fmt.Errorf("merge block %d: %w", i, err)
					}
				}
			}
		}
	}
	return m.b.appendBlock(dst)
}

// builder collects samples of any kinds in time order into a block.
type builder struct {
	count      int
	mint, maxt int64
	kind       byte // part kind of the open run, 0 for none
	ts         []int64
	vs         []float64
	h          histRun
	parts      []part
	hs         histogram.Histogram
	fhs        histogram.FloatHistogram
}

func (b *builder) reset() {
	b.count, b.kind = 0, 0
	b.ts, b.vs = b.ts[:0], b.vs[:0]
	b.h = histRun{}
	clear(b.parts)
	b.parts = b.parts[:0]
}

// add appends the current sample of it, of type vt.
func (b *builder) add(it *Iterator, vt chunkenc.ValueType) error {
	t := it.AtT()
	if b.count >= MaxBlockSamples {
		return ErrTooManySamples
	}
	if k := partKindOf(vt); k != b.kind {
		if err := b.seal(); err != nil {
			return err
		}
		b.kind = k
	}
	var err error
	switch vt {
	case chunkenc.ValFloat:
		_, v := it.At()
		b.ts = append(b.ts, t)
		b.vs = append(b.vs, v)
	case chunkenc.ValHistogram:
		_, h := it.AtHistogram(&b.hs)
		err = b.h.appendHistogram(t, h)
	case chunkenc.ValFloatHistogram:
		_, fh := it.AtFloatHistogram(&b.fhs)
		err = b.h.appendFloatHistogram(t, fh)
	}
	if err != nil {
		return err
	}
	if b.count == 0 {
		b.mint = t
	}
	b.maxt = t
	b.count++
	return nil
}

// seal closes the open run into parts.
func (b *builder) seal() error {
	switch b.kind {
	case partFloat:
		data, err := Encode(nil, b.ts, b.vs)
		if err != nil {
			return err
		}
		b.parts = append(b.parts, part{kind: partFloat, data: data})
		b.ts, b.vs = b.ts[:0], b.vs[:0]
	case partHistogram, partFloatHistogram:
		b.h.seal()
		b.parts = append(b.parts, b.h.sealed...)
		b.h = histRun{}
	}
	b.kind = 0
	return nil
}

func (b *builder) appendBlock(dst []byte) ([]byte, error) {
	if b.count == 0 {
		return dst, nil
	}
	if len(b.parts) == 0 && b.kind == partFloat {
		return Encode(dst, b.ts, b.vs)
	}
	if err := b.seal(); err != nil {
		return dst, err
	}
	kind := KindMixed
	switch {
	case allParts(b.parts, partHistogram):
		kind = KindHistogram
	case allParts(b.parts, partFloatHistogram):
		kind = KindFloatHistogram
	}
	return appendParts(dst, kind, b.count, b.mint, b.maxt, b.parts), nil
}

func allParts(ps []part, k byte) bool {
	for _, p := range ps {
		if p.kind != k {
			return false
		}
	}
	return true
}

// floatRuns handles the common case of float blocks that do not overlap in
// time, such as a series' blocks flushed one after another: it concatenates
// their samples in time order into m.b and reports true. Otherwise it leaves
// m.b empty and reports false.
func (m *merger) floatRuns(its []*Iterator) bool {
	m.order = m.order[:0]
	for i, it := range its {
		if m.cur[i] == chunkenc.ValNone {
			continue
		}
		if m.cur[i] != chunkenc.ValFloat || len(it.parts) > 0 || it.i != 0 {
			return false
		}
		m.order = append(m.order, i)
	}
	slices.SortFunc(m.order, func(a, b int) int { return cmp.Compare(its[a].ts[0], its[b].ts[0]) })
	for k := 1; k < len(m.order); k++ {
		prev, cur := its[m.order[k-1]], its[m.order[k]]
		if prev.ts[len(prev.ts)-1] >= cur.ts[0] {
			return false
		}
	}
	n := 0
	for _, i := range m.order {
		n += len(its[i].ts)
	}
	if n > MaxBlockSamples {
		return false // let the general path report it
	}
	for _, i := range m.order {
		m.b.ts = append(m.b.ts, its[i].ts...)
		m.b.vs = append(m.b.vs, its[i].vs...)
	}
	return true
}

// Source is one input of Iterator.ResetMerge: an encoded block; or when App
// is not nil the samples of an Appender that is no longer appended to (see
// Appender.Clone); or when Floats is not nil float samples already decoded
// (Iterator.AppendRange).
type Source struct {
	Block  []byte
	App    *Appender
	Floats *Floats
}

// Floats is a run of float samples, timestamps strictly increasing. An
// iterator reset to it walks its slices without copying them: they must
// stay unchanged while it does.
type Floats struct {
	T []int64
	V []float64
}

func (s *Source) empty() bool {
	switch {
	case s.App != nil:
		return s.App.Count() == 0
	case s.Floats != nil:
		return len(s.Floats.T) == 0
	}
	return len(s.Block) == 0
}

// floatOnly reports whether the source holds float samples only.
func (s *Source) floatOnly() bool {
	switch {
	case s.App != nil:
		return s.App.Kind() == KindFloat
	case s.Floats != nil:
		return true
	}
	return len(s.Block) > 0 && Kind(s.Block[0]) == KindFloat
}

// resetFloats makes the iterator walk f.
func (it *Iterator) resetFloats(f *Floats) {
	it.clear()
	it.ts, it.vs = f.T, f.V
}

// ResetMerge makes the iterator walk the union of the samples of srcs in
// time order, as Reset would walk the block MergeAll makes of them: where
// several sources hold a sample at one timestamp, the later source's is
// kept. Float samples are merged in the iterator's memory without encoding
// a block; sources holding histograms are merged through MergeAll. Blocks
// must stay unchanged until the iterator is reset again. On error the
// iterator is exhausted and Err returns the error too.
func (it *Iterator) ResetMerge(srcs []Source) error {
	return it.ResetMergeRange(srcs, math.MinInt64, math.MaxInt64)
}

// ResetMergeRange is ResetMerge for a reader of the samples in [mint, maxt]
// only: an appender's float blocks and stream outside the range are not
// decoded (Appender.IteratorRange), nor a block's values outside the seek
// points around the range (Iterator.ResetRange). Samples outside the range may be left
// out, or walked; the caller bounds what it reads.
func (it *Iterator) ResetMergeRange(srcs []Source, mint, maxt int64) error {
	// Empty sources hold nothing; a lone source needs no merge.
	n, last := 0, -1
	for i := range srcs {
		if !srcs[i].empty() {
			n, last = n+1, i
		}
	}
	switch {
	case n == 0:
		it.clear()
		it.done = true
		return nil
	case n == 1 && srcs[last].App != nil:
		srcs[last].App.IteratorRange(it, mint, maxt)
		return it.err
	case n == 1 && srcs[last].Floats != nil:
		it.resetFloats(srcs[last].Floats)
		return nil
	case n == 1:
		return it.ResetRange(srcs[last].Block, mint, maxt)
	}
	for i := range srcs {
		if !srcs[i].empty() && !srcs[i].floatOnly() {
			return it.resetMergeBlocks(srcs)
		}
	}
	m := it.mergeScratch()
	m.its = m.its[:0]
	for i := range srcs {
		s := &srcs[i]
		if s.empty() {
			continue
		}
		if len(m.its) == cap(m.its) {
			m.its = append(m.its, &Iterator{})
		} else {
			m.its = m.its[:len(m.its)+1]
			if m.its[len(m.its)-1] == nil {
				m.its[len(m.its)-1] = &Iterator{}
			}
		}
		sub := m.its[len(m.its)-1]
		switch {
		case s.App != nil:
			s.App.IteratorRange(sub, mint, maxt)
		case s.Floats != nil:
			sub.resetFloats(s.Floats)
		default:
			_ = sub.ResetRange(s.Block, mint, maxt)
		}
		if err := sub.Err(); err != nil {
			it.clear()
			it.fail(fmt.Errorf("merge source %d: %w", i, err))
			return it.err
		}
	}
	it.clear()
	it.dec.ts, it.dec.vs = m.merge(it.dec.ts[:0], it.dec.vs[:0])
	it.ts, it.vs = it.dec.ts, it.dec.vs
	return nil
}

// mergeScratch returns the iterator's ResetMerge scratch, made on first use.
func (it *Iterator) mergeScratch() *floatMerge {
	if it.merge == nil {
		it.merge = &floatMerge{}
	}
	return it.merge
}

// resetMergeBlocks is ResetMerge through MergeAll, for sources that hold
// histograms.
func (it *Iterator) resetMergeBlocks(srcs []Source) error {
	m := it.mergeScratch()
	m.blocks = m.blocks[:0]
	for i := range srcs {
		s := &srcs[i]
		switch {
		case s.empty():
		case s.App != nil:
			m.blocks = append(m.blocks, s.App.AppendBlock(nil))
		case s.Floats != nil:
			blk, err := Encode(nil, s.Floats.T, s.Floats.V)
			if err != nil {
				clear(m.blocks)
				it.clear()
				it.fail(err)
				return err
			}
			m.blocks = append(m.blocks, blk)
		default:
			m.blocks = append(m.blocks, s.Block)
		}
	}
	// The iterator aliases the bytes of histogram blocks, so the merged
	// block gets fresh memory rather than reusing the last one's.
	blk, err := MergeAll(nil, m.blocks...)
	clear(m.blocks)
	if err != nil {
		it.clear()
		it.fail(err)
		return err
	}
	return it.Reset(blk)
}

// floatMerge is the scratch space of ResetMerge.
type floatMerge struct {
	its    []*Iterator // one per source holding samples, decoded
	pos    []int
	blocks [][]byte
}

// merge appends the union of the float samples of m.its to ts and vs in
// time order, the later iterator's sample winning on equal timestamps.
func (m *floatMerge) merge(ts []int64, vs []float64) ([]int64, []float64) {
	its := m.its
	// Sources that follow each other in time, the usual case of blocks
	// flushed one after another, are concatenated.
	disjoint := true
	for k := 1; k < len(its) && disjoint; k++ {
		prev, cur := its[k-1], its[k]
		disjoint = len(prev.ts) == 0 || len(cur.ts) == 0 || prev.ts[len(prev.ts)-1] < cur.ts[0]
	}
	if disjoint {
		for _, sub := range its {
			ts = append(ts, sub.ts...)
			vs = append(vs, sub.vs...)
		}
		return ts, vs
	}
	m.pos = append(m.pos[:0], make([]int, len(its))...)
	for {
		win, t := -1, int64(math.MaxInt64)
		for k, sub := range its {
			if p := m.pos[k]; p < len(sub.ts) && sub.ts[p] <= t {
				win, t = k, sub.ts[p]
			}
		}
		if win < 0 {
			return ts, vs
		}
		ts = append(ts, t)
		vs = append(vs, its[win].vs[m.pos[win]])
		for k, sub := range its {
			if p := m.pos[k]; p < len(sub.ts) && sub.ts[p] == t {
				m.pos[k]++
			}
		}
	}
}
