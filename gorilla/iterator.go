package gorilla

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// Iterator walks the samples of a block in time order. It implements
// chunkenc.Iterator, so it can be handed to the PromQL engine as is; AtST
// always returns 0.
//
// Reset decodes float samples up front and reports corruption at once;
// histogram samples are decoded as the iterator advances, and corruption found
// then ends the iteration with Err set. An Iterator does not alias the block
// it was reset to: the caller may reuse the block's memory after Reset
// returns, except for histogram and mixed blocks, whose bytes must stay
// unchanged until the iterator is reset again.
//
// The zero value is an exhausted iterator. An Iterator is not safe for
// concurrent use.
type Iterator struct {
	// The float run being walked: the whole block for a float block, one
	// part of a multi-part block. i is the current index in it, -1 before the
	// first sample.
	ts []int64
	vs []float64
	i  int

	cur  chunkenc.ValueType // type of the current sample, ValNone before the first
	done bool
	err  error

	dec floatDecoder

	// Multi-part (histogram and mixed) blocks.
	parts  []part
	pi     int // index of the next part to open
	hit    chunkenc.Iterator
	inHist bool
	lastT  int64
	hchunk chunkenc.HistogramChunk
	fchunk chunkenc.FloatHistogramChunk
	hbuf   []byte // owned copy of histogram bytes, see Appender.Iterator
	// The header's time range, checked against the samples of a
	// multi-part block as they are decoded.
	pmint, pmaxt int64
	pcheck       bool

	merge *floatMerge // ResetMerge's scratch, nil until used
}

var _ chunkenc.Iterator = (*Iterator)(nil)

var errNotFloat = errors.New("gorilla: not a float block")

// NewIterator returns an iterator over block.
func NewIterator(block []byte) (*Iterator, error) {
	it := &Iterator{}
	if err := it.Reset(block); err != nil {
		return nil, err
	}
	return it, nil
}

// Reset makes the iterator walk block from its first sample, reusing the
// iterator's memory. On error the iterator is exhausted and Err returns the
// error too.
func (it *Iterator) Reset(block []byte) error {
	return it.ResetRange(block, math.MinInt64, math.MaxInt64)
}

// ResetRange is Reset for a reader of the samples in [mint, maxt] only: a
// float block with a seek table is decoded from the seek point before mint
// to maxt, and only that part is checked. Samples outside the range may be
// left out, or walked; the caller bounds what it reads.
func (it *Iterator) ResetRange(block []byte, mint, maxt int64) error {
	it.clear()
	var h header
	n, err := h.parse(block)
	if err == nil {
		switch h.kind {
		case KindFloat:
			var lo, hi int
			lo, hi, err = it.dec.decodeRange(&h, block[n:], mint, maxt)
			if err == nil {
				it.ts, it.vs = it.dec.ts[lo:hi], it.dec.vs[lo:hi]
			}
		default:
			it.parts, err = parseParts(it.parts[:0], &h, block[n:])
			it.pmint, it.pmaxt, it.pcheck = h.mint, h.maxt, true
		}
	}
	if err != nil {
		it.fail(fmt.Errorf("decode %s block: %w", h.kind, err))
		return it.err
	}
	return nil
}

func (it *Iterator) clear() {
	it.ts, it.vs = it.ts[:0], it.vs[:0]
	it.i = -1
	it.cur = chunkenc.ValNone
	it.done = false
	it.err = nil
	clear(it.parts) // drop references to the last block
	it.parts = it.parts[:0]
	it.pi = 0
	it.inHist = false
	it.lastT = math.MinInt64
	it.pcheck = false
}

func (it *Iterator) fail(err error) {
	it.err = err
	it.done = true
	it.ts, it.vs = it.ts[:0], it.vs[:0]
	it.i = -1
	it.cur = chunkenc.ValNone
	it.parts = it.parts[:0]
	it.inHist = false
}

// Next advances to the next sample and returns its type, or ValNone at the
// end or on error.
func (it *Iterator) Next() chunkenc.ValueType {
	if it.i+1 < len(it.ts) {
		it.i++
		return chunkenc.ValFloat
	}
	return it.nextSlow()
}

func (it *Iterator) nextSlow() chunkenc.ValueType {
	if it.done {
		return chunkenc.ValNone
	}
	for {
		if it.inHist {
			if vt := it.histNext(); vt != chunkenc.ValNone {
				it.cur = vt
				return vt
			}
			if it.err != nil {
				return chunkenc.ValNone
			}
		}
		if it.pi >= len(it.parts) {
			// Stay on the last sample, so that Seek can still find it.
			it.done = true
			if len(it.ts) > 0 {
				it.lastT = it.ts[len(it.ts)-1]
			}
			if it.pcheck && it.lastT != it.pmaxt {
				it.fail(corruptf("last timestamp %d, header says %d", it.lastT, it.pmaxt))
			}
			return chunkenc.ValNone
		}
		it.inHist = false
		if err := it.openPart(); err != nil {
			it.fail(err)
			return chunkenc.ValNone
		}
		if len(it.ts) > 0 {
			it.i = 0
			it.cur = chunkenc.ValFloat
			return chunkenc.ValFloat
		}
	}
}

// openPart makes the next part current.
func (it *Iterator) openPart() error {
	if len(it.ts) > 0 {
		it.lastT = it.ts[len(it.ts)-1]
	}
	p := it.parts[it.pi]
	it.pi++
	it.ts, it.vs, it.i = it.ts[:0], it.vs[:0], -1
	switch p.kind {
	case partFloat:
		var h header
		n, err := h.parse(p.data)
		if err == nil && h.kind != KindFloat {
			err = corruptf("float part holds a %s block", h.kind)
		}
		if err == nil {
			err = it.dec.decode(&h, p.data[n:])
		}
		if err != nil {
			return fmt.Errorf("part %d: %w", it.pi-1, err)
		}
		if h.mint <= it.lastT {
			return corruptf("part %d starts at %d, not after %d", it.pi-1, h.mint, it.lastT)
		}
		if it.pi == 1 && it.pcheck && h.mint != it.pmint {
			return corruptf("first timestamp %d, header says %d", h.mint, it.pmint)
		}
		it.ts, it.vs = it.dec.ts, it.dec.vs
	case partHistogram:
		if err := checkHistLayout(&it.dec.buf, p.data); err != nil {
			return fmt.Errorf("part %d: %w", it.pi-1, err)
		}
		it.hchunk.Reset(p.data)
		it.hit = it.hchunk.Iterator(it.hit)
		it.inHist = true
	case partFloatHistogram:
		if err := checkHistLayout(&it.dec.buf, p.data); err != nil {
			return fmt.Errorf("part %d: %w", it.pi-1, err)
		}
		it.fchunk.Reset(p.data)
		it.hit = it.fchunk.Iterator(it.hit)
		it.inHist = true
	}
	return nil
}

// histNext advances the chunkenc iterator of a histogram part, turning a
// panic on bytes that passed the checksum but are still malformed into an
// error.
func (it *Iterator) histNext() (vt chunkenc.ValueType) {
	defer func() {
		if r := recover(); r != nil {
			it.fail(corruptf("histogram part %d: %v", it.pi-1, r))
			vt = chunkenc.ValNone
		}
	}()
	vt = it.hit.Next()
	if vt == chunkenc.ValNone {
		if err := it.hit.Err(); err != nil {
			it.fail(fmt.Errorf("%w: histogram part %d: %w", ErrCorrupt, it.pi-1, err))
		}
		return chunkenc.ValNone
	}
	t := it.hit.AtT()
	if t <= it.lastT {
		it.fail(corruptf("histogram part %d: timestamp %d not after %d", it.pi-1, t, it.lastT))
		return chunkenc.ValNone
	}
	if it.lastT == math.MinInt64 && it.pcheck && t != it.pmint {
		it.fail(corruptf("first timestamp %d, header says %d", t, it.pmint))
		return chunkenc.ValNone
	}
	it.lastT = t
	return vt
}

// Seek advances to the first sample at or after t and returns its type. If
// the current sample is already at or after t it stays put, even when Next
// has run past the end, as chunkenc's iterators do. It returns ValNone when no
// such sample is left.
func (it *Iterator) Seek(t int64) chunkenc.ValueType {
	if it.err != nil {
		return chunkenc.ValNone
	}
	if it.cur != chunkenc.ValNone || it.i >= 0 {
		if it.AtT() >= t {
			return it.curType()
		}
	}
	for {
		if it.i+1 < len(it.ts) {
			rest := it.ts[it.i+1:]
			if rest[len(rest)-1] >= t {
				it.i += 1 + seekIndex(rest, t)
				it.cur = chunkenc.ValFloat
				return chunkenc.ValFloat
			}
			it.i = len(it.ts) - 1
			it.cur = chunkenc.ValFloat
		}
		vt := it.nextSlow()
		if vt == chunkenc.ValNone {
			return vt
		}
		if it.AtT() >= t {
			return vt
		}
	}
}

// seekIndex returns the index of the first element of xs at or after t;
// xs is sorted and its last element is at or after t. The engine seeks a
// few samples ahead at each step, so it looks 1, 2, 4, ... elements ahead
// before it halves the interval that holds t.
func seekIndex(xs []int64, t int64) int {
	lo, step := -1, 1 // xs[lo] < t where lo >= 0
	for {
		hi := lo + step
		if hi >= len(xs)-1 || xs[hi] >= t {
			hi = min(hi, len(xs)-1)
			j, _ := slices.BinarySearch(xs[lo+1:hi+1], t)
			return lo + 1 + j
		}
		lo, step = hi, step*2
	}
}

func (it *Iterator) curType() chunkenc.ValueType {
	if it.i >= 0 && it.i < len(it.ts) {
		return chunkenc.ValFloat
	}
	return it.cur
}

// At returns the current float sample.
func (it *Iterator) At() (int64, float64) {
	if it.i < 0 || it.i >= len(it.ts) {
		return math.MinInt64, 0
	}
	return it.ts[it.i], it.vs[it.i]
}

// AtHistogram returns the current integer histogram sample, reusing h when
// it is not nil. For other sample types it returns a nil histogram.
func (it *Iterator) AtHistogram(h *histogram.Histogram) (t int64, rh *histogram.Histogram) {
	if !it.inHist || it.cur != chunkenc.ValHistogram {
		return it.AtT(), nil
	}
	defer recoverAt(it, &t, &rh, h)
	return it.hit.AtHistogram(h)
}

// AtFloatHistogram returns the current histogram sample as a float
// histogram, reusing fh when it is not nil. For float samples it returns a
// nil histogram.
func (it *Iterator) AtFloatHistogram(fh *histogram.FloatHistogram) (t int64, rfh *histogram.FloatHistogram) {
	if !it.inHist || it.cur == chunkenc.ValFloat || it.cur == chunkenc.ValNone {
		return it.AtT(), nil
	}
	defer recoverAt(it, &t, &rfh, fh)
	return it.hit.AtFloatHistogram(fh)
}

// recoverAt, deferred by AtHistogram and AtFloatHistogram, turns a panic
// of the chunkenc iterator on malformed chunk bytes behind a valid checksum
// into the end of the iteration with an error, and still gives the caller a
// histogram: reuse, or a new one.
func recoverAt[H any](it *Iterator, t *int64, out **H, reuse *H) {
	if r := recover(); r != nil {
		it.fail(corruptf("histogram part %d: %v", it.pi-1, r))
		*t, *out = it.lastT, reuse
		if reuse == nil {
			*out = new(H)
		}
	}
}

// AtT returns the current sample's timestamp.
func (it *Iterator) AtT() int64 {
	if it.i >= 0 && it.i < len(it.ts) {
		return it.ts[it.i]
	}
	if it.inHist {
		return it.hit.AtT()
	}
	return it.lastT
}

// AtST returns 0: blocks do not store start timestamps.
func (*Iterator) AtST() int64 { return 0 }

// Err returns the error that ended the iteration, if any.
func (it *Iterator) Err() error { return it.err }

// AppendRange appends to ts and vs the samples of block, a float block, in
// [mint, maxt], and returns them: ts and vs as they were when none is in the
// range. Only the part of block around the range is decoded (ResetRange).
// It leaves the iterator exhausted. A block of another kind is an error, as
// is one that does not decode; ts and vs are returned as they were.
//
// A reader that keeps a few minutes of a long block (an alerting rule's
// [5m] of a 2 h block) can keep these as a Source (Source.Floats) in place
// of the block.
func (it *Iterator) AppendRange(ts []int64, vs []float64, block []byte, mint, maxt int64) ([]int64, []float64, error) {
	defer func() {
		it.clear()
		it.done = true
	}()
	if len(block) == 0 || Kind(block[0]) != KindFloat {
		return ts, vs, errNotFloat
	}
	if err := it.ResetRange(block, mint, maxt); err != nil {
		return ts, vs, err
	}
	lo, _ := slices.BinarySearch(it.ts, mint)
	hi, found := slices.BinarySearch(it.ts, maxt)
	if found {
		hi++
	}
	if lo < hi {
		ts, vs = append(ts, it.ts[lo:hi]...), append(vs, it.vs[lo:hi]...)
	}
	return ts, vs, nil
}
