package gorilla

import (
	"encoding/binary"
	"math"
	"math/bits"
	"slices"
)

// A prefixCode writes an unsigned residual as a bucket prefix followed by the
// residual in the bucket's width. Buckets are numbered in code order; bucket
// i's prefix is i one-bits then a zero-bit, except the last bucket whose
// prefix is nb-1 one-bits. With one bucket there is no prefix at all, so a
// block whose residuals are all zero spends no bits on them.
type prefixCode struct {
	nb    uint8
	width [maxBuckets]uint8
}

const maxBuckets = 4

func (c *prefixCode) prefixLen(i int) uint {
	return uint(min(i+1, int(c.nb)-1))
}

func (c *prefixCode) appendTo(dst []byte) []byte {
	dst = append(dst, c.nb)
	return append(dst, c.width[:c.nb]...)
}

func (c *prefixCode) parse(b []byte) (int, error) {
	if len(b) == 0 || b[0] < 1 || b[0] > maxBuckets || len(b) < 1+int(b[0]) {
		return 0, corruptf("bad residual code")
	}
	c.nb = b[0]
	for i := range int(c.nb) {
		if b[1+i] > 64 {
			return 0, corruptf("residual width %d", b[1+i])
		}
		c.width[i] = b[1+i]
	}
	return 1 + int(c.nb), nil
}

// maxWidth is the widest bucket; residuals of more bits cannot be written.
func (c *prefixCode) maxWidth() uint8 {
	return slices.Max(c.width[:c.nb])
}

// codeWriter writes residuals with a prefixCode, using a table from bit
// length to the cheapest bucket that holds it.
type codeWriter struct {
	bucket [65]uint8
	prefix [maxBuckets]uint64
	plen   [maxBuckets]uint
	width  [maxBuckets]uint
}

func (cw *codeWriter) init(c *prefixCode) {
	for i := range int(c.nb) {
		cw.plen[i] = c.prefixLen(i)
		cw.width[i] = uint(c.width[i])
		if i < int(c.nb)-1 {
			cw.prefix[i] = 1<<(i+1) - 2
		} else {
			cw.prefix[i] = 1<<(c.nb-1) - 1
		}
	}
	for l := range int(c.maxWidth()) + 1 { // longer residuals do not occur
		best, bestCost := -1, uint(0)
		for i := range int(c.nb) {
			if cw.width[i] >= uint(l) && (best < 0 || cw.plen[i]+cw.width[i] < bestCost) {
				best, bestCost = i, cw.plen[i]+cw.width[i]
			}
		}
		cw.bucket[l] = uint8(max(best, 0)) // lengths with no bucket never occur
	}
}

func (cw *codeWriter) write(w *bitWriter, u uint64) {
	i := cw.bucket[bits.Len64(u)]
	if pl, wd := cw.plen[i], cw.width[i]; pl+wd <= 64 {
		// u fits its bucket's width, so prefix and residual go out at once.
		w.write(cw.prefix[i]<<wd|u, pl+wd)
		return
	}
	w.write(cw.prefix[i], cw.plen[i])
	w.write(u, cw.width[i])
}

// lenHist counts residuals by bit length.
type lenHist [65]uint32

// fitCode returns the prefix code that writes the residuals counted in h in
// the fewest bits, and that number of bits.
func fitCode(h *lenHist) (prefixCode, uint64) {
	var lens [65]uint8
	var cnt [66]uint64 // prefix sums of counts over lens
	k := 0
	for l, n := range h {
		if n > 0 {
			lens[k] = uint8(l)
			cnt[k+1] = cnt[k] + uint64(n)
			k++
		}
	}
	if k == 0 {
		return prefixCode{nb: 1}, 0
	}
	// Cut candidates: a group may end after lens[i] for i < k-1. Coarsen when
	// there are many, to bound the search.
	var cands [12]int
	nc := 0
	if k-1 <= len(cands) {
		for i := 0; i < k-1; i++ {
			cands[nc] = i
			nc++
		}
	} else {
		for j := range len(cands) {
			cands[nc] = j * (k - 1) / len(cands)
			nc++
		}
	}
	var (
		bestN [maxBuckets]uint64
		bestW [maxBuckets]uint8
		bestG = 1
	)
	bestW[0] = lens[k-1]
	total := cnt[k]
	bestBits := total * uint64(lens[k-1])

	// Groups end at cut candidates and at the last length. Prefix costs, with
	// the fullest group getting the shortest prefix (counts c1 >= c2 >= ...):
	// two groups cost N bits, three 2N - c1, four 3N - 2c1 - c2.
	last := k - 1
	n := func(lo, hi int) uint64 { return cnt[hi+1] - cnt[lo] } // count of lens[lo..hi]
	for ai := 0; ai < nc; ai++ {
		a := cands[ai]
		na, wa := n(0, a), uint64(lens[a])
		// Two groups: [0..a] [a+1..last].
		nl := n(a+1, last)
		wl := uint64(lens[last])
		if c := na*wa + nl*wl + total; c < bestBits {
			bestBits = c
			bestG, bestN, bestW = 2, [maxBuckets]uint64{na, nl}, [maxBuckets]uint8{lens[a], lens[last]}
		}
		for bi := ai + 1; bi < nc; bi++ {
			b := cands[bi]
			nb, wb := n(a+1, b), uint64(lens[b])
			nl := n(b+1, last)
			data := na*wa + nb*wb + nl*wl
			if c := data + 2*total - max(na, nb, nl); c < bestBits {
				bestBits = c
				bestG, bestN, bestW = 3, [maxBuckets]uint64{na, nb, nl}, [maxBuckets]uint8{lens[a], lens[b], lens[last]}
			}
			for ci := bi + 1; ci < nc; ci++ {
				c3 := cands[ci]
				nm, wm := n(b+1, c3), uint64(lens[c3])
				nl := n(c3+1, last)
				data := na*wa + nb*wb + nm*wm + nl*wl
				c1, c2 := top2(na, nb, nm, nl)
				if c := data + 3*total - 2*c1 - c2; c < bestBits {
					bestBits = c
					bestG, bestN, bestW = 4, [maxBuckets]uint64{na, nb, nm, nl}, [maxBuckets]uint8{lens[a], lens[b], lens[c3], lens[last]}
				}
			}
		}
	}
	return orderedCode(bestN[:bestG], bestW[:bestG]), bestBits
}

// top2 returns the largest and second largest of four counts.
func top2(a, b, c, d uint64) (uint64, uint64) {
	x, y := max(a, b), min(a, b)
	for _, v := range [2]uint64{c, d} {
		if v > x {
			x, y = v, x
		} else if v > y {
			y = v
		}
	}
	return x, y
}

// orderedCode builds a code whose buckets are in decreasing order of count.
func orderedCode(counts []uint64, widths []uint8) prefixCode {
	c := prefixCode{nb: uint8(len(counts))}
	idx := [maxBuckets]int{0, 1, 2, 3}
	order := idx[:len(counts)]
	slices.SortStableFunc(order, func(i, j int) int {
		switch {
		case counts[i] > counts[j]:
			return -1
		case counts[i] < counts[j]:
			return 1
		}
		return 0
	})
	for i, o := range order {
		c.width[i] = widths[o]
	}
	return c
}

func zigzag(x int64) uint64   { return uint64(x<<1) ^ uint64(x>>63) }
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// Step predictors of an intPlan.
const (
	predBase   byte = 0 // the step is base
	predDelta  byte = 1 // the step is the previous step (delta of delta)
	predRevert byte = 2 // the step is base, minus the previous residual when that was small (jitter that returns to the grid)
)

// predictor predicts each step d_i = x_i - x_{i-1} of an integer sequence.
type predictor struct {
	mode byte
	base int64
	prev int64 // previous step, base at the start
	c    int64 // correction for predRevert
	half int64 // |base|/2: residuals at least this large are not jitter
}

func newPredictor(mode byte, base int64) predictor {
	h := base / 2
	if h < 0 {
		h = -h
	}
	return predictor{mode: mode, base: base, prev: base, half: h}
}

func (p *predictor) predict() int64 {
	switch p.mode {
	case predDelta:
		return p.prev
	case predRevert:
		return p.base - p.c
	}
	return p.base
}

// state is what a seek point keeps of the predictor: the previous step for
// predDelta, the correction for predRevert, nothing (0) for predBase.
func (p *predictor) state() int64 {
	switch p.mode {
	case predDelta:
		return p.prev
	case predRevert:
		return p.c
	}
	return 0
}

// setState restores what state returned.
func (p *predictor) setState(s int64) {
	switch p.mode {
	case predDelta:
		p.prev = s
	case predRevert:
		p.c = s
	}
}

// update records step d with residual r.
func (p *predictor) update(d, r int64) {
	p.prev = d
	if p.mode == predRevert {
		if r > -p.half && r < p.half {
			p.c = r
		} else {
			p.c = 0
		}
	}
}

// intPlan says how a sequence of integers is written: each step is
// predicted (see predictor) and the residual, step minus prediction, is
// written either densely, every residual zigzagged with code, or sparsely,
// as nz events of (gap of zero residuals with gapCode, zigzag(residual)-1
// with code).
type intPlan struct {
	mode    byte
	sparse  bool
	base    int64
	nz      int // events of a sparse plan
	code    prefixCode
	gapCode prefixCode
	bits    uint64
}

// planInts chooses the cheapest intPlan for xs. Arithmetic wraps, so any
// int64 sequence round trips.
func planInts(xs []int64) intPlan {
	if len(xs) < 2 {
		return intPlan{code: prefixCode{nb: 1}}
	}
	// The base step is the median step: the most common one when more
	// than half of the steps are equal (a regular scrape, a steady
	// counter), and when none is, as with scrapes jittered every time, the
	// one that makes the smallest residuals in sum (timestamps 0-4 ms off
	// the grid: 17 % fewer bits than the last step a majority vote ends on).
	base := medianStep(xs)
	// Residual statistics of all predictors in one pass.
	const modes = 3
	var (
		dense, gaps, vals [modes]lenHist
		nz, last          [modes]int
	)
	half := base / 2
	if half < 0 {
		half = -half
	}
	prev, c := base, int64(0)
	// Zero residuals, the common case, are counted in registers: repeated
	// increments of one histogram slot would wait on each other.
	var z0, z1, z2 uint32
	count := func(m int, i int, u uint64) {
		dense[m][bits.Len64(u)]++
		gaps[m][bits.Len64(uint64(i-last[m]-1))]++
		vals[m][bits.Len64(u-1)]++
		nz[m]++
		last[m] = i
	}
	for i := 1; i < len(xs); i++ {
		d := xs[i] - xs[i-1]
		r0, r1, r2 := d-base, d-prev, d-base+c
		prev = d
		if r2 > -half && r2 < half {
			c = r2
		} else {
			c = 0
		}
		if r0 == 0 {
			z0++
		} else {
			count(0, i, zigzag(r0))
		}
		if r1 == 0 {
			z1++
		} else {
			count(1, i, zigzag(r1))
		}
		if r2 == 0 {
			z2++
		} else {
			count(2, i, zigzag(r2))
		}
	}
	dense[0][0] += z0
	dense[1][0] += z1
	dense[2][0] += z2
	best := intPlan{bits: ^uint64(0)}
	for _, mode := range [...]byte{predBase, predDelta, predRevert} {
		if mode == predRevert && half == 0 {
			continue // never reverts: same as predBase
		}
		c, b := fitCode(&dense[mode])
		if b < best.bits {
			best = intPlan{mode: mode, base: base, code: c, bits: b}
		}
		if b == 0 {
			break // constant steps: nothing is cheaper
		}
		if nz[mode]*2 > len(xs) {
			continue // mostly non-zero residuals: sparse cannot win by much
		}
		gc, gb := fitCode(&gaps[mode])
		vc, vb := fitCode(&vals[mode])
		var tmp [binary.MaxVarintLen64]byte
		sb := gb + vb + 8*uint64(binary.PutUvarint(tmp[:], uint64(nz[mode]))+1+int(gc.nb))
		if sb < best.bits {
			best = intPlan{mode: mode, sparse: true, base: base, nz: nz[mode], code: vc, gapCode: gc, bits: sb}
		}
	}
	return best
}

// medianStep returns the median of the steps of xs (the upper one of an
// even count).
func medianStep(xs []int64) int64 {
	var buf [512]int64
	d := buf[:0]
	if len(xs)-1 > len(buf) {
		d = make([]int64, 0, len(xs)-1)
	}
	for i := 1; i < len(xs); i++ {
		d = append(d, xs[i]-xs[i-1])
	}
	return selectNth(d, len(d)/2)
}

// selectRounds bounds selectNth's partitioning rounds.
var selectRounds = 64

// selectNth returns what would be d[k] if d were sorted, reordering d: a
// quickselect with a median-of-three pivot that sorts what is left after
// a bounded number of rounds, so that no input makes it quadratic.
func selectNth(d []int64, k int) int64 {
	lo, hi := 0, len(d)-1
	for round := 0; lo < hi; round++ {
		if round == selectRounds {
			slices.Sort(d[lo : hi+1])
			break
		}
		a, b, c := d[lo], d[lo+(hi-lo)/2], d[hi]
		p := max(min(a, b), min(max(a, b), c))
		i, j := lo, hi
		for i <= j {
			for d[i] < p {
				i++
			}
			for d[j] > p {
				j--
			}
			if i <= j {
				d[i], d[j] = d[j], d[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return d[k]
		}
	}
	return d[k]
}

// headerLen is the number of header bytes appendTo writes.
func (p *intPlan) headerLen() int {
	return len(p.appendTo(make([]byte, 0, 32)))
}

// appendTo writes the plan:
//
//	flags byte (predictor | 4 if sparse) | base varint | code |
//	if sparse: nz uvarint | gap code
func (p *intPlan) appendTo(dst []byte) []byte {
	flags := p.mode
	if p.sparse {
		flags |= 4
	}
	dst = append(dst, flags)
	dst = binary.AppendVarint(dst, p.base)
	dst = p.code.appendTo(dst)
	if p.sparse {
		dst = binary.AppendUvarint(dst, uint64(p.nz))
		dst = p.gapCode.appendTo(dst)
	}
	return dst
}

// parse reads a plan for a sequence of n integers. extra are the flag bits
// the caller allows besides the plan's own (tsSeek for timestamps); they
// are left to the caller to read.
func (p *intPlan) parse(b []byte, n int, extra byte) (int, error) {
	if len(b) == 0 || b[0]&^(4|extra) > predRevert {
		return 0, corruptf("bad integer plan")
	}
	p.mode, p.sparse = b[0]&3, b[0]&4 != 0
	k := 1
	var m int
	p.base, m = binary.Varint(b[k:])
	if m <= 0 {
		return 0, corruptf("bad integer base")
	}
	k += m
	m, err := p.code.parse(b[k:])
	if err != nil {
		return 0, err
	}
	k += m
	if p.sparse {
		nz, m := binary.Uvarint(b[k:])
		if m <= 0 || nz >= uint64(max(n, 1)) {
			return 0, corruptf("bad count of nonzero residuals")
		}
		p.nz = int(nz)
		k += m
		m, err = p.gapCode.parse(b[k:])
		if err != nil {
			return 0, err
		}
		k += m
	}
	return k, nil
}

// writeInts writes the residuals of xs[1:] under p.
func writeInts(w *bitWriter, xs []int64, p *intPlan) {
	var cw, gw codeWriter
	cw.init(&p.code)
	if p.sparse {
		gw.init(&p.gapCode)
	}
	pr := newPredictor(p.mode, p.base)
	last := 0
	for i := 1; i < len(xs); i++ {
		d := xs[i] - xs[i-1]
		r := d - pr.predict()
		pr.update(d, r)
		u := zigzag(r)
		switch {
		case !p.sparse:
			cw.write(w, u)
		case u != 0:
			gw.write(w, uint64(i-last-1))
			cw.write(w, u-1)
			last = i
		}
	}
}

// codeReader reads residuals of one prefixCode.
type codeReader struct {
	plen, width [maxBuckets]uint
	last        int
}

func newCodeReader(c *prefixCode) codeReader {
	var cr codeReader
	for i := range int(c.nb) {
		cr.plen[i] = c.prefixLen(i)
		cr.width[i] = uint(c.width[i])
	}
	cr.last = int(c.nb) - 1
	return cr
}

func (cr *codeReader) read(r *bitReader) uint64 {
	pk := r.peek()
	b := min(bits.LeadingZeros64(^pk), cr.last) & (maxBuckets - 1)
	pl, w := cr.plen[b], cr.width[b]
	if pl+w <= 57 {
		r.pos += pl + w
		return pk << pl >> (64 - w)
	}
	r.pos += pl
	return r.read(w)
}

// stepRange is the smallest and largest step of a decoded sequence, so
// that callers can check that timestamps increase without another pass.
type stepRange struct{ min, max int64 }

func (s *stepRange) add(d int64) {
	s.min = min(s.min, d)
	s.max = max(s.max, d)
}

var emptyRange = stepRange{math.MaxInt64, math.MinInt64}

// readInts fills out[1:] from residuals under p, given out[0].
func readInts(r *bitReader, out []int64, p *intPlan) (stepRange, error) {
	if len(out) < 2 {
		return emptyRange, nil
	}
	if p.sparse {
		return readSparse(r, out, p)
	}
	pr := newPredictor(p.mode, p.base)
	return readDense(r, out, p, &pr)
}

// readDense is readInts for a dense plan, continuing the state of pr (the
// predictor after out[0]'s step), which it leaves after the last step: a
// seek point resumes a sequence in its middle (seek.go).
func readDense(r *bitReader, out []int64, p *intPlan, pr *predictor) (stepRange, error) {
	if len(out) < 2 {
		return emptyRange, nil
	}
	if p.code.nb == 1 && p.code.width[0] == 0 {
		// Every residual is zero: constant steps, no bits to read, and a
		// predictor that stays at base.
		fillSteps(out, 1, p.base)
		return stepRange{p.base, p.base}, nil
	}
	if p.mode == predBase {
		return readBase(r, out, p)
	}
	cr := newCodeReader(&p.code)
	x, sr := out[0], emptyRange
	for i := 1; i < len(out); i++ {
		res := unzigzag(cr.read(r))
		d := pr.predict() + res
		pr.update(d, res)
		x += d
		sr.add(d)
		out[i] = x
		if r.overrun() {
			return sr, corruptf("residuals overrun the block")
		}
	}
	return sr, nil
}

// readBase is readInts for dense residuals against a constant step, the
// common case, with the bit reader kept in registers.
func readBase(r *bitReader, out []int64, p *intPlan) (stepRange, error) {
	cr := newCodeReader(&p.code)
	x, base := out[0], p.base
	sr := emptyRange
	data, pos, end := r.data, r.pos, r.end
	for i := 1; i < len(out); i++ {
		pk := binary.BigEndian.Uint64(data[pos>>3:]) << (pos & 7)
		avail := 64 - pos&7 // bits of pk that are the block's
		b := min(bits.LeadingZeros64(^pk), cr.last) & (maxBuckets - 1)
		pl, w := cr.plen[b], cr.width[b]
		var u uint64
		if pl+w <= 57 {
			u = pk << pl >> (64 - w)
			pos += pl + w
			pk <<= pl + w
			avail -= pl + w
		} else {
			r.pos = pos + pl
			u = r.read(w)
			pos = r.pos
			avail = 0
		}
		d := base + unzigzag(u)
		sr.add(d)
		x += d
		out[i] = x
		if pos > end {
			r.pos = pos
			return sr, corruptf("residuals overrun the block")
		}
		// The next residual from the bits already loaded, when they hold
		// all of it: its prefix and payload within avail (bits past avail
		// are zeros shifted in, which a prefix read there stops at, so a
		// bucket read from them asks for more than avail).
		if i+1 == len(out) {
			break
		}
		b = min(bits.LeadingZeros64(^pk), cr.last) & (maxBuckets - 1)
		pl, w = cr.plen[b], cr.width[b]
		if pl+w > avail {
			continue
		}
		i++
		u = pk << pl >> (64 - w)
		pos += pl + w
		d = base + unzigzag(u)
		sr.add(d)
		x += d
		out[i] = x
		if pos > end {
			r.pos = pos
			return sr, corruptf("residuals overrun the block")
		}
	}
	r.pos = pos
	return sr, nil
}

// fillSteps sets out[i:] by adding step to each predecessor.
func fillSteps(out []int64, i int, step int64) {
	x := out[i-1]
	for ; i < len(out); i++ {
		x += step
		out[i] = x
	}
}

func readSparse(r *bitReader, out []int64, p *intPlan) (stepRange, error) {
	cr, gr := newCodeReader(&p.code), newCodeReader(&p.gapCode)
	pr := newPredictor(p.mode, p.base)
	i := 1
	sr := emptyRange
	for e := 0; e < p.nz; e++ {
		gap := gr.read(r)
		u := cr.read(r) + 1
		if r.overrun() {
			return sr, corruptf("residual events overrun the block")
		}
		if gap >= uint64(len(out)-i) {
			return sr, corruptf("residual event %d past the end", e)
		}
		if gap > 0 {
			// The first zero-residual step settles the predictor; the rest
			// repeat it.
			d := pr.predict()
			pr.update(d, 0)
			out[i] = out[i-1] + d
			sr.add(d)
			i++
			end := i + int(gap) - 1
			if end > i {
				fillSteps(out[:end], i, pr.predict())
				sr.add(pr.predict())
				pr.update(pr.predict(), 0)
			}
			i = end
		}
		res := unzigzag(u)
		d := pr.predict() + res
		pr.update(d, res)
		out[i] = out[i-1] + d
		sr.add(d)
		i++
	}
	if i < len(out) {
		d := pr.predict()
		pr.update(d, 0)
		out[i] = out[i-1] + d
		sr.add(d)
		if i+1 < len(out) {
			fillSteps(out, i+1, pr.predict())
			sr.add(pr.predict())
		}
	}
	return sr, nil
}
