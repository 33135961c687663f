package gorilla

import (
	"encoding/binary"
	"math"
)

// A float block's value stream can only be decoded from its start: each
// value is a residual against the one before. A reader that wants the last
// minutes of a 2 h block would decode 480 samples for the 20 it needs. A
// seek table, written between the value parameters and the bitstream of a
// block whose values cost bits, records the decoder's state every
// seekEvery values, so that such a reader starts at the point before its
// range and stops after it (docs/format/gorilla.md, "Seek table").

// seekEvery is the fewest values between two seek points. A block whose
// table at that interval would cost more than its share (seekShare) gets
// points at twice or four times the interval, or none.
const seekEvery = 64

// seekStrides are the multiples of seekEvery the encoder tries, densest
// first.
var seekStrides = [...]int{1, 2, 4}

// seekShare bounds a seek table to 1/seekShare of its value stream's bytes:
// a block whose values take few bits gains a point's worth of decoding for
// more than the point costs, so it gets a sparser table or none.
const seekShare = 16

// valSeek, set in the value encoding byte, says that a seek table follows
// the value parameters.
const valSeek byte = 0x80

// tsSeek, set in the flags of a block's timestamp plan, says that a seek
// table of the timestamps follows the plan: with it a reader of part of the
// block decodes the timestamps around its range only, and finds the value
// stream's start without the timestamps before it.
const tsSeek byte = 0x08

// seekPoint is the value decoder's state after value i·k of the stream
// (the integer sequence of a decimal block, the values of an XOR one).
type seekPoint struct {
	// pos is the bit offset after the value, from the start of the value
	// stream.
	pos uint64
	// x is the value: the integer of a decimal block, the float64 bits of
	// an XOR one.
	x int64
	// pstate is the integer predictor's state (predictor.state).
	pstate int64
	// lead and sig are the XOR window after the value; sig 0 while none.
	lead, sig uint8
}

// seekTable is the parsed seek table of a block.
type seekTable struct {
	k   int
	pts []seekPoint
}

// seekable reports whether a value stream of the given encoding and plan
// gets seek points: XOR values and dense decimal residuals that take bits.
// Constant values take no bits.
func seekable(vmode byte, vp *intPlan) bool {
	switch vmode {
	case valXOR:
		return true
	case valDecimal:
		return denseBits(vp)
	}
	return false
}

// denseBits reports whether a plan is dense with residuals that take bits:
// a sequence that gets seek points. A sparse plan's events are few and
// cheap, and its gap state would make a point larger.
func denseBits(p *intPlan) bool {
	return !p.sparse && (p.code.nb > 1 || p.code.width[0] > 0)
}

// writeIntsMarked is writeInts for a dense plan, appending the state after
// every k-th integer to pts.
func writeIntsMarked(w *bitWriter, xs []int64, p *intPlan, k int, pts []seekPoint) []seekPoint {
	var cw codeWriter
	cw.init(&p.code)
	start := w.bits()
	pr := newPredictor(p.mode, p.base)
	for i := 1; i < len(xs); i++ {
		d := xs[i] - xs[i-1]
		r := d - pr.predict()
		pr.update(d, r)
		cw.write(w, zigzag(r))
		if i%k == 0 {
			pts = append(pts, seekPoint{pos: uint64(w.bits() - start), x: xs[i], pstate: pr.state()})
		}
	}
	return pts
}

// writeXORMarked is writeXOR, appending the state after every k-th value to
// pts.
func writeXORMarked(w *bitWriter, vs []float64, k int, pts []seekPoint) []seekPoint {
	start := w.bits()
	lead, trail := uint(0xff), uint(0)
	prev := math.Float64bits(vs[0])
	for i := 1; i < len(vs); i++ {
		cur := math.Float64bits(vs[i])
		lead, trail = xorWrite(w, cur^prev, lead, trail)
		prev = cur
		if i%k == 0 {
			pt := seekPoint{pos: uint64(w.bits() - start), x: int64(cur)}
			if lead != 0xff {
				pt.lead, pt.sig = uint8(lead), uint8(64-lead-trail)
			}
			pts = append(pts, pt)
		}
	}
	return pts
}

// appendSeekTable appends the table of pts, taken every k values:
//
//	k uvarint | per point: pos - previous pos uvarint |
//	  XOR: value bits 8 BE | lead byte | sig byte
//	  integers: x - previous x - k·ref varint (the first against x0) |
//	            predictor state varint (minus ref for predDelta), unless
//	            the predictor is predBase
//
// pts are the points every seekEvery values; the table keeps every
// stride-th, so k is seekEvery·stride. ref is the step the deltas are
// written against: 0 in a value table, the plan's base in a timestamp
// table, where it leaves the jitter.
func appendSeekTable(dst []byte, xor bool, vp *intPlan, x0, ref int64, stride int, pts []seekPoint) []byte {
	k := seekEvery * stride
	dst = binary.AppendUvarint(dst, uint64(k))
	pos, x := uint64(0), x0
	for i := stride - 1; i < len(pts); i += stride {
		pt := pts[i]
		dst = binary.AppendUvarint(dst, pt.pos-pos)
		pos = pt.pos
		if xor {
			dst = binary.BigEndian.AppendUint64(dst, uint64(pt.x))
			dst = append(dst, pt.lead, pt.sig)
			continue
		}
		dst = binary.AppendVarint(dst, pt.x-x-int64(k)*ref)
		x = pt.x
		switch vp.mode {
		case predDelta:
			dst = binary.AppendVarint(dst, pt.pstate-ref)
		case predRevert:
			dst = binary.AppendVarint(dst, pt.pstate)
		}
	}
	return dst
}

// parse reads a seek table from b for a stream of n values, XOR values
// (xor) or integers under vp whose first is x0, written against ref
// (appendSeekTable), and returns the number of bytes it used. Positions
// are checked against the stream when it is read.
func (st *seekTable) parse(b []byte, xor bool, vp *intPlan, n int, x0, ref int64) (int, error) {
	k, used := binary.Uvarint(b)
	if used <= 0 || k == 0 || k > MaxBlockSamples {
		return 0, corruptf("bad seek interval")
	}
	np := (n - 1) / int(k)
	if np == 0 {
		return 0, corruptf("seek table without points")
	}
	// Every point takes at least a byte: a table cannot make the decoder
	// allocate more points than the block has bytes.
	if np > len(b)-used {
		return 0, corruptf("seek table of %d points in %d bytes", np, len(b)-used)
	}
	st.k = int(k)
	st.pts = grow(st.pts, np)
	var pos uint64
	x := x0
	for i := range st.pts {
		d, m := binary.Uvarint(b[used:])
		if m <= 0 || d > math.MaxUint32 {
			return 0, corruptf("bad seek point %d", i)
		}
		used += m
		pos += d
		pt := seekPoint{pos: pos}
		if xor {
			if len(b)-used < 10 {
				return 0, corruptf("truncated seek point %d", i)
			}
			pt.x = int64(binary.BigEndian.Uint64(b[used:]))
			pt.lead, pt.sig = b[used+8], b[used+9]
			used += 10
			if pt.lead > 31 || pt.sig > 64 || int(pt.lead)+int(pt.sig) > 64 || (pt.sig == 0 && pt.lead != 0) {
				return 0, corruptf("bad window at seek point %d", i)
			}
		} else {
			dx, m := binary.Varint(b[used:])
			if m <= 0 {
				return 0, corruptf("bad seek point %d", i)
			}
			used += m
			x += dx + int64(k)*ref
			pt.x = x
			if vp.mode != predBase {
				pt.pstate, m = binary.Varint(b[used:])
				if m <= 0 {
					return 0, corruptf("bad seek point %d", i)
				}
				used += m
				if vp.mode == predDelta {
					pt.pstate += ref
				}
			}
		}
		st.pts[i] = pt
	}
	return used, nil
}

// parseTimes reads a timestamp seek table, for the cnt timestamps from
// mint to maxt under tp:
//
//	value start uvarint | the table of the timestamps (appendSeekTable, ref tp.base)
//
// and returns the number of bytes it used and the bit offset where the
// value stream starts, after the timestamp residuals. Its points' times
// must lie inside the block, k steps of at least 1 ms apart.
func (st *seekTable) parseTimes(b []byte, tp *intPlan, cnt int, mint, maxt int64) (int, uint64, error) {
	if !denseBits(tp) {
		return 0, 0, corruptf("seek table on timestamps that take no bits")
	}
	vbits, used := binary.Uvarint(b)
	if used <= 0 || vbits > math.MaxUint32 {
		return 0, 0, corruptf("bad value start")
	}
	m, err := st.parse(b[used:], false, tp, cnt, mint, tp.base)
	if err != nil {
		return 0, 0, err
	}
	prev := mint
	for i, pt := range st.pts {
		// prev + k cannot wrap: prev lies in [mint, maxt] and k <= 2^21.
		if pt.x < prev+int64(st.k) || pt.x > maxt {
			return 0, 0, corruptf("seek point %d at %d outside the timestamps", i, pt.x)
		}
		prev = pt.x
	}
	return used + m, vbits, nil
}

// window returns the timestamps a reader of [mint, maxt] decodes, of cnt:
// from the last point at or before mint (0 when there is none) to the
// first point after maxt (the last timestamp when there is none).
func (st *seekTable) window(mint, maxt int64, cnt int) (from, last int) {
	// i is the number of points at or before mint, j at or before maxt.
	i := searchPoints(st.pts, mint)
	j := i + searchPoints(st.pts[i:], maxt)
	last = cnt - 1
	if j < len(st.pts) {
		last = (j + 1) * st.k
	}
	return i * st.k, last
}

// searchPoints returns the number of points of pts (increasing) whose
// value is at most t.
func searchPoints(pts []seekPoint, t int64) int {
	lo, hi := 0, len(pts)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if pts[h].x <= t {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return lo
}

// start returns where a reader of values from index from onwards begins:
// the index of the last point at or before it (0, the stream's start, when
// there is none).
func (st *seekTable) start(from int) int {
	return min(from/st.k, len(st.pts)) * st.k
}

// startBit returns the bit where a read from index i (0 or a point, as
// start returns) begins, in a stream starting at bit vstart.
func (st *seekTable) startBit(i int, vstart uint) uint {
	if i == 0 {
		return vstart
	}
	return vstart + uint(st.pts[i/st.k-1].pos)
}

// point returns the seek point at value index i, if there is one.
func (st *seekTable) point(i int) (*seekPoint, bool) {
	if i == 0 || i%st.k != 0 || i/st.k > len(st.pts) {
		return nil, false
	}
	return &st.pts[i/st.k-1], true
}

// nextStop returns the index a reader at from decodes to before checking
// again: the next seek point, or last if that comes first.
func (st *seekTable) nextStop(from, last int) int {
	if next := (from/st.k + 1) * st.k; next <= last && next/st.k <= len(st.pts) {
		return next
	}
	return last
}

// seekTo positions r at the point at index i (a multiple of k, not 0) of a
// value stream starting at bit vstart.
func (st *seekTable) seekTo(r *bitReader, vstart uint, i int) (*seekPoint, error) {
	pt := &st.pts[i/st.k-1]
	if pt.pos > uint64(r.end-vstart) {
		return nil, corruptf("seek point %d past the block's end", i/st.k-1)
	}
	r.pos = vstart + uint(pt.pos)
	return pt, nil
}

// readIntsSeek fills ms[from..last] of a dense integer stream starting at
// bit vstart, where from is 0 (ms[0] set) or a seek point, checks the
// decoder's state against every point it passes, and returns the range of
// the steps it read.
func (st *seekTable) readIntsSeek(r *bitReader, ms []int64, vp *intPlan, vstart uint, from, last int) (stepRange, error) {
	pr := newPredictor(vp.mode, vp.base)
	if from > 0 {
		pt, err := st.seekTo(r, vstart, from)
		if err != nil {
			return emptyRange, err
		}
		ms[from] = pt.x
		pr.setState(pt.pstate)
	}
	steps := emptyRange
	for from < last {
		next := st.nextStop(from, last)
		sr, err := readDense(r, ms[from:next+1], vp, &pr)
		if err != nil {
			return steps, err
		}
		steps.min, steps.max = min(steps.min, sr.min), max(steps.max, sr.max)
		if pt, ok := st.point(next); ok && (r.pos-vstart != uint(pt.pos) || ms[next] != pt.x || pr.state() != pt.pstate) {
			return steps, corruptf("seek point %d does not match the values", next/st.k-1)
		}
		from = next
	}
	return steps, nil
}

// readXORSeek fills vs[from..last] of an XOR stream starting at bit vstart
// whose first value's bits are v0, where from is 0 or a seek point, and
// checks the decoder's state against every point it passes.
func (st *seekTable) readXORSeek(r *bitReader, vs []float64, v0 uint64, vstart uint, from, last int) error {
	v, lead, sig := v0, uint(0), uint(0)
	if from > 0 {
		pt, err := st.seekTo(r, vstart, from)
		if err != nil {
			return err
		}
		v, lead, sig = uint64(pt.x), uint(pt.lead), uint(pt.sig)
	}
	for {
		next := st.nextStop(from, last)
		var err error
		if lead, sig, err = readXOR(r, vs[from:next+1], v, lead, sig); err != nil {
			return err
		}
		v = math.Float64bits(vs[next])
		if pt, ok := st.point(next); ok && (r.pos-vstart != uint(pt.pos) || v != uint64(pt.x) || lead != uint(pt.lead) || sig != uint(pt.sig)) {
			return corruptf("seek point %d does not match the values", next/st.k-1)
		}
		if from = next; from >= last {
			return nil
		}
	}
}

// exceptionIndices appends the sample indices of a decimal block's
// exceptions to dst, checking that they increase and lie below n.
func exceptionIndices(dst []int, excs []byte, n int) ([]int, error) {
	next := 0
	for len(excs) > 0 {
		gap, m := binary.Uvarint(excs)
		if gap >= uint64(n-next) {
			return dst, corruptf("exception index out of range")
		}
		i := next + int(gap)
		dst = append(dst, i)
		next = i + 1
		excs = excs[m+8:]
	}
	return dst, nil
}

// expandRange is expand for the samples lo..hi-1 only: ms holds the
// integers of the samples that are not exceptions from index j on, the
// first of them at or after lo; idx are the exceptions' sample indices.
func (d *floatDecoder) expandRange(ms []int64, exp uint, excs []byte, idx []int, lo, hi, j int) error {
	e := 0
	for e < len(idx) && idx[e] < lo {
		e++
	}
	raw := excs
	for range e {
		_, m := binary.Uvarint(raw)
		raw = raw[m+8:]
	}
	for i := lo; i < hi; i++ {
		if e < len(idx) && idx[e] == i {
			_, m := binary.Uvarint(raw)
			d.vs[i] = math.Float64frombits(binary.BigEndian.Uint64(raw[m:]))
			raw = raw[m+8:]
			e++
			continue
		}
		if j >= len(ms) {
			return corruptf("too few values")
		}
		d.vs[i] = decimalValue(ms[j], exp)
		j++
	}
	return nil
}

// searchTime returns the first index of ts (increasing) whose timestamp is
// at least t.
func searchTime(ts []int64, t int64) int {
	lo, hi := 0, len(ts)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if ts[h] < t {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return lo
}
