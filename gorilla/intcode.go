package gorilla

import (
	"encoding/binary"
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
	for l := range cw.bucket {
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
	var cands [24]int
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
	best := prefixCode{nb: 1}
	best.width[0] = lens[k-1]
	bestBits := cnt[k] * uint64(lens[k-1])

	// try evaluates groups ending at ends[0..g-1] (inclusive indices into lens).
	try := func(ends [maxBuckets]int, g int) {
		type group struct {
			n uint64
			w uint8
		}
		var gs [maxBuckets]group
		lo := 0
		for i, e := range ends[:g] {
			gs[i] = group{cnt[e+1] - cnt[lo], lens[e]}
			lo = e + 1
		}
		// Most frequent bucket gets the shortest prefix (insertion sort, g <= 4).
		for i := 1; i < g; i++ {
			for j := i; j > 0 && gs[j].n > gs[j-1].n; j-- {
				gs[j], gs[j-1] = gs[j-1], gs[j]
			}
		}
		var total uint64
		for i := range g {
			total += gs[i].n * (uint64(min(i+1, g-1)) + uint64(gs[i].w))
		}
		if total < bestBits {
			bestBits = total
			best = prefixCode{nb: uint8(g)}
			for i := range g {
				best.width[i] = gs[i].w
			}
		}
	}
	last := k - 1
	for a := 0; a < nc; a++ {
		try([maxBuckets]int{cands[a], last}, 2)
		for b := a + 1; b < nc; b++ {
			try([maxBuckets]int{cands[a], cands[b], last}, 3)
			for c := b + 1; c < nc; c++ {
				try([maxBuckets]int{cands[a], cands[b], cands[c], last}, 4)
			}
		}
	}
	return best, bestBits
}

func zigzag(x int64) uint64   { return uint64(x<<1) ^ uint64(x>>63) }
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// intPlan says how a sequence of integers is written: each step d_i =
// x_i - x_{i-1} is predicted either by a constant base or by the previous step
// (delta of delta, the first step predicted by base), and the zigzagged
// residual d_i - prediction is written with code.
type intPlan struct {
	dod  bool
	base int64
	code prefixCode
	bits uint64
}

// planInts chooses the cheapest intPlan for xs. Arithmetic wraps, so any
// int64 sequence round trips.
func planInts(xs []int64) intPlan {
	if len(xs) < 2 {
		return intPlan{code: prefixCode{nb: 1}}
	}
	// Majority vote for the most common step.
	base, votes := xs[1]-xs[0], 0
	for i := 1; i < len(xs); i++ {
		d := xs[i] - xs[i-1]
		switch {
		case votes == 0:
			base, votes = d, 1
		case d == base:
			votes++
		default:
			votes--
		}
	}
	var hc, hd lenHist
	prev := base
	for i := 1; i < len(xs); i++ {
		d := xs[i] - xs[i-1]
		hc[bits.Len64(zigzag(d-base))]++
		hd[bits.Len64(zigzag(d-prev))]++
		prev = d
	}
	cc, bc := fitCode(&hc)
	cd, bd := fitCode(&hd)
	if bd < bc {
		return intPlan{dod: true, base: base, code: cd, bits: bd}
	}
	return intPlan{base: base, code: cc, bits: bc}
}

// headerLen is the number of header bytes appendTo writes.
func (p *intPlan) headerLen() int {
	var tmp [binary.MaxVarintLen64]byte
	return 1 + binary.PutVarint(tmp[:], p.base) + 1 + int(p.code.nb)
}

func (p *intPlan) appendTo(dst []byte) []byte {
	var flags byte
	if p.dod {
		flags = 1
	}
	dst = append(dst, flags)
	dst = binary.AppendVarint(dst, p.base)
	return p.code.appendTo(dst)
}

func (p *intPlan) parse(b []byte) (int, error) {
	if len(b) == 0 || b[0] > 1 {
		return 0, corruptf("bad integer plan")
	}
	p.dod = b[0] == 1
	n := 1
	var m int
	p.base, m = binary.Varint(b[n:])
	if m <= 0 {
		return 0, corruptf("bad integer base")
	}
	n += m
	m, err := p.code.parse(b[n:])
	if err != nil {
		return 0, err
	}
	return n + m, nil
}

// writeInts writes the residuals of xs[1:] under p.
func writeInts(w *bitWriter, xs []int64, p *intPlan) {
	var cw codeWriter
	cw.init(&p.code)
	ref := p.base
	for i := 1; i < len(xs); i++ {
		d := xs[i] - xs[i-1]
		cw.write(w, zigzag(d-ref))
		if p.dod {
			ref = d
		}
	}
}

// readInts fills out[1:] from residuals under p, given out[0].
func readInts(r *bitReader, out []int64, p *intPlan) error {
	if len(out) < 2 {
		return nil
	}
	x, ref := out[0], p.base
	if p.code.nb == 1 && p.code.width[0] == 0 {
		// Every residual is zero: constant steps, no bits to read.
		for i := 1; i < len(out); i++ {
			x += ref
			out[i] = x
		}
		return nil
	}
	var plen, width [maxBuckets]uint
	for i := range int(p.code.nb) {
		plen[i] = p.code.prefixLen(i)
		width[i] = uint(p.code.width[i])
	}
	last := int(p.code.nb) - 1
	data, pos, end := r.data, r.pos, r.end
	for i := 1; i < len(out); i++ {
		pk := binary.BigEndian.Uint64(data[pos>>3:]) << (pos & 7)
		b := min(bits.LeadingZeros64(^pk), last)
		pl, w := plen[b], width[b]
		var u uint64
		if pl+w <= 57 {
			u = pk << pl >> (64 - w)
			pos += pl + w
		} else {
			r.pos = pos + pl
			u = r.read(w)
			pos = r.pos
		}
		d := ref + unzigzag(u)
		x += d
		if p.dod {
			ref = d
		}
		out[i] = x
		if pos > end {
			r.pos = pos
			return corruptf("residuals overrun the block")
		}
	}
	r.pos = pos
	return nil
}
