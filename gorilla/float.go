package gorilla

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
)

// Value encodings of a float block.
const (
	valConst   byte = 0 // one value for every sample
	valXOR     byte = 1 // Gorilla XOR against the previous value
	valDecimal byte = 2 // integers m with value m / 10^e, plus exceptions
)

const (
	maxExp     = 18      // largest decimal exponent tried
	maxExactIn = 1 << 53 // integers up to this magnitude are exact in float64
)

var pow10f = func() (p [maxExp + 1]float64) {
	p[0] = 1
	for i := 1; i <= maxExp; i++ {
		p[i] = p[i-1] * 10 // exact: 10^i < 2^53 * 2^i needs no rounding up to 10^22
	}
	return p
}()

var pow10i = func() (p [maxExp + 1]int64) {
	p[0] = 1
	for i := 1; i <= maxExp; i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// decimalValue returns the float64 that m / 10^e decodes to.
func decimalValue(m int64, e uint) float64 {
	if e == 0 {
		return float64(m)
	}
	return float64(m) / pow10f[e]
}

// decimalFrom finds an e such that v decodes exactly from some integer
// m / 10^e with |m| <= 2^53. Division of two exact float64 values is
// correctly rounded, so a value written as a short decimal is found with the
// e of its decimal digits. It tries exponents from e0 up, then below e0: a
// block scales every value to its largest exponent, so starting from the
// exponent reached so far loses nothing and usually succeeds at once.
func decimalFrom(v float64, e0 uint) (m int64, e uint, ok bool) {
	vb := math.Float64bits(v)
	try := func(e uint) (int64, bool) {
		x := v * pow10f[e]
		if !(math.Abs(x) <= maxExactIn) { // also false for NaN
			return 0, false
		}
		m := int64(math.Round(x))
		return m, math.Float64bits(decimalValue(m, e)) == vb
	}
	for e = e0; e <= maxExp; e++ {
		if m, ok = try(e); ok {
			return m, e, true
		}
	}
	for e = 0; e < e0; e++ {
		if m, ok = try(e); ok {
			return m, e, true
		}
	}
	return 0, 0, false
}

// floatEncoder holds the scratch space of one Encode call.
type floatEncoder struct {
	ms   []int64
	exps []uint8
	exc  []int32
	w    bitWriter
	// A block with a seek table: its bitstream, points and table.
	bits []byte
	pts  []seekPoint
	tab  []byte
}

var encoderPool = sync.Pool{New: func() any { return new(floatEncoder) }}

const noDecimal = 0xff

// Encode appends a float block of the samples (ts[i], vs[i]) to dst. The
// timestamps must be strictly increasing and there must be at least one
// sample.
func Encode(dst []byte, ts []int64, vs []float64) ([]byte, error) {
	if len(ts) != len(vs) {
		return dst, fmt.Errorf("gorilla: %d timestamps but %d values", len(ts), len(vs))
	}
	if len(ts) == 0 {
		return dst, fmt.Errorf("gorilla: no samples to encode")
	}
	if len(ts) > MaxBlockSamples {
		return dst, fmt.Errorf("%w: %d", ErrTooManySamples, len(ts))
	}
	for i := 1; i < len(ts); i++ {
		if ts[i] <= ts[i-1] {
			return dst, fmt.Errorf("%w: timestamp %d at index %d follows %d", ErrOutOfOrder, ts[i], i, ts[i-1])
		}
	}
	e := encoderPool.Get().(*floatEncoder)
	dst = e.encode(dst, ts, vs)
	encoderPool.Put(e)
	return dst, nil
}

func (e *floatEncoder) encode(dst []byte, ts []int64, vs []float64) []byte {
	n := len(ts)
	dst = appendHeader(dst, KindFloat, n, ts[0], ts[n-1])
	var tp intPlan
	tat := len(dst)
	if n > 1 {
		tp = planInts(ts)
		dst = tp.appendTo(dst)
	}

	// Choose the value encoding by its size in bits.
	vmode := valConst
	v0 := math.Float64bits(vs[0])
	for _, v := range vs[1:] {
		if math.Float64bits(v) != v0 {
			vmode = valXOR
			break
		}
	}
	var vp intPlan
	var exp uint
	valBits := uint64(0)
	if vmode != valConst {
		xorCost := 64 + xorBits(vs)
		var decCost uint64
		exp, decCost = e.planDecimal(vs, &vp)
		valBits = xorCost
		if decCost < xorCost {
			vmode, valBits = valDecimal, decCost
		}
	}
	// The plans know the size of what follows: take the memory at once
	// rather than growing the block as the bit writer fills it.
	dst = slices.Grow(dst, 32+int((tp.bits+valBits)/8))

	nv := n
	if vmode == valDecimal {
		nv = len(e.ms)
	}
	sv := nv-1 >= seekEvery && seekable(vmode, &vp)
	if st := n-1 >= seekEvery && denseBits(&tp); st || sv {
		return e.encodeSeek(dst, tat, st, sv, ts, vs, &tp, vmode, &vp, exp, (tp.bits+valBits)/8)
	}
	dst = e.appendValueParams(dst, vmode, exp, &vp, vs)
	e.w = bitWriter{buf: dst}
	if n > 1 {
		writeInts(&e.w, ts, &tp)
	}
	e.writeValues(vmode, &vp, vs)
	dst = e.w.finish()
	e.w = bitWriter{}
	return dst
}

// appendValueParams appends the value encoding byte and the value
// parameters.
func (e *floatEncoder) appendValueParams(dst []byte, vmode byte, exp uint, vp *intPlan, vs []float64) []byte {
	dst = append(dst, vmode)
	switch vmode {
	case valConst, valXOR:
		dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(vs[0]))
	case valDecimal:
		dst = append(dst, byte(exp))
		dst = vp.appendTo(dst)
		dst = binary.AppendVarint(dst, e.ms[0])
		dst = binary.AppendUvarint(dst, uint64(len(e.exc)))
		prev := -1
		for _, i := range e.exc {
			dst = binary.AppendUvarint(dst, uint64(int(i)-prev-1))
			dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(vs[i]))
			prev = int(i)
		}
	}
	return dst
}

// writeValues writes the value bits of vmode to e.w.
func (e *floatEncoder) writeValues(vmode byte, vp *intPlan, vs []float64) {
	switch vmode {
	case valXOR:
		writeXOR(&e.w, vs)
	case valDecimal:
		writeInts(&e.w, e.ms, vp)
	}
}

// encodeSeek ends a block whose timestamps (st) or values (sv) take bits
// with seek tables: a timestamp table after the timestamp plan, whose flags
// byte is dst[tat], and a value table after the value parameters. Each is
// the densest of seekStrides that costs at most 1/seekShare of its stream
// (the timestamp table: of the whole bitstream, streamBytes as planned), or
// none. The bitstream is written aside first, as the tables are made while
// writing it.
func (e *floatEncoder) encodeSeek(dst []byte, tat int, st, sv bool, ts []int64, vs []float64, tp *intPlan, vmode byte, vp *intPlan, exp uint, streamBytes uint64) []byte {
	e.w = bitWriter{buf: e.bits[:0]}
	switch {
	case st:
		e.pts = writeIntsMarked(&e.w, ts, tp, seekEvery, e.pts[:0])
		vbits := uint64(e.w.bits())
		for _, stride := range seekStrides {
			if len(e.pts) < stride {
				break
			}
			e.tab = binary.AppendUvarint(e.tab[:0], vbits)
			e.tab = appendSeekTable(e.tab, false, tp, ts[0], tp.base, stride, e.pts)
			if uint64(len(e.tab)*seekShare) <= streamBytes {
				dst[tat] |= tsSeek
				dst = append(dst, e.tab...)
				break
			}
		}
	case len(ts) > 1:
		writeInts(&e.w, ts, tp)
	}
	vat := len(dst)
	dst = e.appendValueParams(dst, vmode, exp, vp, vs)
	if !sv {
		e.writeValues(vmode, vp, vs)
		return e.appendBits(dst)
	}
	vstart := e.w.bits()
	var x0 int64
	if vmode == valXOR {
		e.pts = writeXORMarked(&e.w, vs, seekEvery, e.pts[:0])
	} else {
		x0 = e.ms[0]
		e.pts = writeIntsMarked(&e.w, e.ms, vp, seekEvery, e.pts[:0])
	}
	valBytes := (e.w.bits() - vstart) / 8
	for _, stride := range seekStrides {
		if len(e.pts) < stride {
			break
		}
		e.tab = appendSeekTable(e.tab[:0], vmode == valXOR, vp, x0, 0, stride, e.pts)
		if len(e.tab)*seekShare <= valBytes {
			dst[vat] |= valSeek
			dst = append(dst, e.tab...)
			break
		}
	}
	return e.appendBits(dst)
}

// appendBits appends the bitstream written aside and resets the writer.
func (e *floatEncoder) appendBits(dst []byte) []byte {
	dst = e.w.appendTo(dst)
	e.bits = e.w.buf[:0]
	e.w = bitWriter{}
	return dst
}

// planDecimal finds the common decimal exponent of vs, fills e.ms with the
// scaled integers of the values that fit and e.exc with the indices of those
// that do not, plans the integers into p and returns the exponent and the
// cost in bits of the whole value section. The cost is MaxUint64 when
// decimals do not pay.
func (e *floatEncoder) planDecimal(vs []float64, p *intPlan) (uint, uint64) {
	n := len(vs)
	e.ms = grow(e.ms, n)
	e.exps = grow(e.exps, n)
	e.exc = e.exc[:0]
	var exp uint
	bad := 0
	for i, v := range vs {
		m, x, ok := decimalFrom(v, exp)
		if !ok {
			e.exps[i] = noDecimal
			bad++
			// Mostly not decimal: XOR will win, stop searching.
			if bad > 8 && bad*4 > i+1 {
				return 0, math.MaxUint64
			}
			continue
		}
		e.ms[i], e.exps[i] = m, uint8(x)
		exp = max(exp, x)
	}
	// Scale to the common exponent and compact; whatever does not survive
	// the round trip becomes an exception. A value found at the common
	// exponent already survived it in decimalFrom.
	k := 0
	for i, v := range vs {
		x := e.exps[i]
		if x != noDecimal {
			m := e.ms[i]
			if uint(x) != exp {
				s := pow10i[exp-uint(x)]
				if m > maxExactIn/s || m < -maxExactIn/s {
					x = noDecimal
				} else if m *= s; math.Float64bits(decimalValue(m, exp)) != math.Float64bits(v) {
					x = noDecimal
				}
			}
			if x != noDecimal {
				e.ms[k] = m
				k++
			}
		}
		if x == noDecimal {
			e.exc = append(e.exc, int32(i))
		}
	}
	e.ms = e.ms[:k]
	if k == 0 {
		return 0, math.MaxUint64
	}
	*p = planInts(e.ms)
	var tmp [binary.MaxVarintLen64]byte
	cost := uint64(1+p.headerLen()+binary.PutVarint(tmp[:], e.ms[0])+binary.PutUvarint(tmp[:], uint64(len(e.exc)))) * 8
	prev := -1
	for _, i := range e.exc {
		cost += uint64(binary.PutUvarint(tmp[:], uint64(int(i)-prev-1))+8) * 8
		prev = int(i)
	}
	return exp, cost + p.bits
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// xorBits is the number of bits writeXOR writes for vs[1:].
func xorBits(vs []float64) uint64 {
	var total uint64
	lead, trail := uint(0xff), uint(0)
	prev := math.Float64bits(vs[0])
	for _, v := range vs[1:] {
		cur := math.Float64bits(v)
		x := cur ^ prev
		prev = cur
		if x == 0 {
			total++
			continue
		}
		lz, tz := min(uint(bits.LeadingZeros64(x)), 31), uint(bits.TrailingZeros64(x))
		if lead != 0xff && lz >= lead && tz >= trail {
			total += 2 + 64 - uint64(lead) - uint64(trail)
			continue
		}
		lead, trail = lz, tz
		total += 2 + 5 + 6 + 64 - uint64(lz) - uint64(tz)
	}
	return total
}

// writeXOR writes vs[1:] XORed with their predecessors, as in Gorilla: a
// zero bit for an unchanged value; 10 and the meaningful bits when they fit
// the previous window of leading and trailing zeros; otherwise 11, 5 bits of
// leading zeros, 6 bits of meaningful bit count (0 means 64) and the bits.
func writeXOR(w *bitWriter, vs []float64) {
	lead, trail := uint(0xff), uint(0)
	prev := math.Float64bits(vs[0])
	for _, v := range vs[1:] {
		cur := math.Float64bits(v)
		lead, trail = xorWrite(w, cur^prev, lead, trail)
		prev = cur
	}
}

func xorWrite(w *bitWriter, x uint64, lead, trail uint) (uint, uint) {
	if x == 0 {
		w.write(0, 1)
		return lead, trail
	}
	lz, tz := min(uint(bits.LeadingZeros64(x)), 31), uint(bits.TrailingZeros64(x))
	// Control bits and value go out in one write when they fit 64 bits.
	if lead != 0xff && lz >= lead && tz >= trail {
		if sig := 64 - lead - trail; sig <= 62 {
			w.write(0b10<<sig|x>>trail, 2+sig)
		} else {
			w.write(0b10, 2)
			w.write(x>>trail, sig)
		}
		return lead, trail
	}
	sig := 64 - lz - tz
	ctl := 0b11<<11 | uint64(lz)<<6 | uint64(sig&63)
	if sig <= 51 {
		w.write(ctl<<sig|x>>tz, 13+sig)
	} else {
		w.write(ctl, 13)
		w.write(x>>tz, sig)
	}
	return lz, tz
}

// floatDecoder decodes float blocks into timestamp and value slices it owns.
type floatDecoder struct {
	ts    []int64
	vs    []float64
	ms    []int64
	buf   []byte
	seek  seekTable // of the values
	tseek seekTable // of the timestamps
	exc   []int     // exception indices of a block read in part
	// A block read in part (decodeRange) copies into buf only the bytes of
	// src it reads (lazy).
	src  []byte
	lazy bool
}

// fillFrom copies the bitstream from bit pos to its end into d.buf, where
// a read of part (d.lazy) is about to read it; other reads copied it all.
func (d *floatDecoder) fillFrom(pos uint) {
	if d.lazy && pos/8 < uint(len(d.src)) {
		copy(d.buf[pos/8:], d.src[pos/8:])
	}
}

// decode decodes a float block whose header h has been parsed from b[:n].
func (d *floatDecoder) decode(h *header, b []byte) error {
	_, _, err := d.decodeRange(h, b, math.MinInt64, math.MaxInt64)
	return err
}

// decodeRange is decode for a reader of the samples in [mint, maxt]: d.ts
// and d.vs hold them at [lo, hi). A block without seek tables, or a range
// that holds the whole block, is decoded and checked whole (lo 0, hi the
// count). Otherwise the timestamps are decoded whole, or with a timestamp
// table from the point at or before mint to the one after maxt; the values
// whole, or with a value table from the point before lo to hi; and the
// points passed on the way are checked.
func (d *floatDecoder) decodeRange(h *header, b []byte, mint, maxt int64) (lo, hi int, _ error) {
	cnt := h.count
	d.ts = grow(d.ts, cnt)
	d.vs = grow(d.vs, cnt)
	d.ts[0] = h.mint
	var (
		tp    intPlan
		tseek bool
		vbits uint64 // where the values start, with a timestamp table
	)
	if cnt > 1 {
		m, err := tp.parse(b, cnt, tsSeek)
		if err != nil {
			return 0, 0, fmt.Errorf("timestamps: %w", err)
		}
		tseek = b[0]&tsSeek != 0
		b = b[m:]
		if tseek {
			m, vbits, err = d.tseek.parseTimes(b, &tp, cnt, h.mint, h.maxt)
			if err != nil {
				return 0, 0, fmt.Errorf("timestamps: %w", err)
			}
			b = b[m:]
		}
	}
	if len(b) == 0 {
		return 0, 0, corruptf("missing value encoding")
	}
	vmode, seek := b[0]&^valSeek, b[0]&valSeek != 0
	b = b[1:]
	var (
		v0   uint64
		exp  uint
		vp   intPlan
		nexc int
		excs []byte
	)
	switch vmode {
	case valConst, valXOR:
		if len(b) < 8 {
			return 0, 0, corruptf("truncated first value")
		}
		v0 = binary.BigEndian.Uint64(b)
		b = b[8:]
	case valDecimal:
		if len(b) == 0 || b[0] > maxExp {
			return 0, 0, corruptf("bad decimal exponent")
		}
		exp = uint(b[0])
		m, err := vp.parse(b[1:], cnt, 0)
		if err != nil {
			return 0, 0, fmt.Errorf("values: %w", err)
		}
		b = b[1+m:]
		d.ms = grow(d.ms, cnt)
		d.ms[0], m = binary.Varint(b)
		if m <= 0 {
			return 0, 0, corruptf("bad first value")
		}
		b = b[m:]
		u, m := binary.Uvarint(b)
		if m <= 0 || u >= uint64(cnt) {
			return 0, 0, corruptf("bad exception count")
		}
		nexc = int(u)
		b = b[m:]
		// Exceptions are checked while decoding; find where they end.
		excs = b
		for range nexc {
			_, m := binary.Uvarint(b)
			if m <= 0 || len(b) < m+8 {
				return 0, 0, corruptf("truncated exceptions")
			}
			b = b[m+8:]
		}
		excs = excs[:len(excs)-len(b)]
	default:
		return 0, 0, corruptf("unknown value encoding %d", vmode)
	}
	if seek {
		if !seekable(vmode, &vp) {
			return 0, 0, corruptf("values: seek table on values that take no bits")
		}
		nv, x0 := cnt, int64(0)
		if vmode == valDecimal {
			nv, x0 = cnt-nexc, d.ms[0]
		}
		m, err := d.seek.parse(b, vmode == valXOR, &vp, nv, x0, 0)
		if err != nil {
			return 0, 0, fmt.Errorf("values: %w", err)
		}
		b = b[m:]
	}

	part := (seek || tseek) && (mint > h.mint || maxt < h.maxt)
	from, last := 0, cnt-1
	end := uint(len(b)) * 8
	if tseek && vbits > uint64(end) {
		return 0, 0, corruptf("values start at bit %d, past the block's %d", vbits, end)
	}
	// A read of part with a timestamp table copies only what it reads of
	// the bitstream (a 2 h block of noisy floats is some KB, of which the
	// last minutes are a tenth): the timestamps from their point to the
	// value start now, the values from theirs (fillFrom) once the range's
	// samples are known. Other reads copy it whole.
	d.src, d.lazy = b, part && tseek
	defer func() { d.src = nil }()
	if d.lazy {
		from, last = d.tseek.window(mint, maxt, cnt)
		d.buf = grow(d.buf, len(b)+readPad)
		clear(d.buf[len(b):])
		tstart := uint64(0)
		if from > 0 {
			tstart = min(d.tseek.pts[from/d.tseek.k-1].pos, vbits)
		}
		copy(d.buf[tstart/8:], b[tstart/8:min(uint64(len(b)), vbits/8+readPad)])
	} else {
		d.buf = padded(d.buf, b)
	}
	r := bitReader{data: d.buf, end: end}
	if d.lazy {
		r.end = uint(vbits) // the timestamps end where the values start
	}
	if cnt > 1 {
		if err := d.readTimes(&r, h, &tp, tseek, from, last); err != nil {
			return 0, 0, fmt.Errorf("timestamps: %w", err)
		}
	}
	r.end = end
	if tseek {
		if !part && uint64(r.pos) != vbits {
			return 0, 0, corruptf("values start at bit %d, the timestamp table says %d", r.pos, vbits)
		}
		r.pos = uint(vbits)
	}
	lo, hi = 0, cnt
	if part {
		ts := d.ts[from : last+1]
		lo, hi = from+searchTime(ts, mint), cnt
		if maxt < h.maxt {
			hi = from + searchTime(ts, maxt+1)
		}
		if lo >= hi {
			return lo, lo, nil
		}
	}
	vstart := r.pos
	switch vmode {
	case valConst:
		v := math.Float64frombits(v0)
		for i := range d.vs {
			d.vs[i] = v
		}
	case valXOR:
		var err error
		switch {
		case seek:
			at := d.seek.start(lo)
			d.fillFrom(d.seek.startBit(at, vstart))
			err = d.seek.readXORSeek(&r, d.vs, v0, vstart, at, hi-1)
		case part:
			d.fillFrom(vstart)
			// Timestamps read in part, values whole: the last value
			// needed is where this read stops.
			_, _, err = readXOR(&r, d.vs[:hi], v0, 0, 0)
		default:
			_, _, err = readXOR(&r, d.vs, v0, 0, 0)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("values: %w", err)
		}
	case valDecimal:
		ms := d.ms[:cnt-nexc]
		if err := d.readDecimal(&r, ms, &vp, exp, excs, seek, part, vstart, lo, hi); err != nil {
			return 0, 0, err
		}
	}
	if !part && (r.pos+7)/8 != r.end/8 {
		return 0, 0, corruptf("%d bits left over after the samples", r.end-r.pos)
	}
	return lo, hi, nil
}

// readTimes reads the timestamps d.ts[from..last] under tp, with the
// timestamp seek table when tseek (from and last are then 0 or a point,
// and last, or the last timestamp), and checks them: increasing, and the
// last one the header's maxt.
func (d *floatDecoder) readTimes(r *bitReader, h *header, tp *intPlan, tseek bool, from, last int) error {
	var (
		steps stepRange
		err   error
	)
	if tseek {
		steps, err = d.tseek.readIntsSeek(r, d.ts, tp, 0, from, last)
	} else {
		steps, err = readInts(r, d.ts, tp)
	}
	if err != nil {
		return err
	}
	if steps.min <= 0 {
		return corruptf("timestamps do not increase")
	}
	// Positive steps that add up to less than 2^63 cannot wrap, so they
	// reach maxt (checked below) without overflowing on the way. Larger
	// ones need a look at every timestamp.
	if steps.max > math.MaxInt64/int64(h.count) {
		for i := from + 1; i <= last; i++ {
			if d.ts[i] <= d.ts[i-1] {
				return corruptf("timestamps not increasing at sample %d", i)
			}
		}
	}
	if last == h.count-1 && d.ts[last] != h.maxt {
		return corruptf("last timestamp %d, header says %d", d.ts[last], h.maxt)
	}
	return nil
}

// readDecimal reads the integers of a decimal block and sets d.vs: all of
// them, or with a seek table in a block read in part (part), those of the
// samples lo..hi-1.
func (d *floatDecoder) readDecimal(r *bitReader, ms []int64, vp *intPlan, exp uint, excs []byte, seek, part bool, vstart uint, lo, hi int) error {
	if !seek || !part {
		d.fillFrom(vstart)
	}
	if !seek {
		if _, err := readInts(r, ms, vp); err != nil {
			return fmt.Errorf("values: %w", err)
		}
		return d.expand(ms, exp, excs)
	}
	if !part {
		if _, err := d.seek.readIntsSeek(r, ms, vp, vstart, 0, len(ms)-1); err != nil {
			return fmt.Errorf("values: %w", err)
		}
		return d.expand(ms, exp, excs)
	}
	var err error
	if d.exc, err = exceptionIndices(d.exc[:0], excs, len(d.vs)); err != nil {
		return err
	}
	// The integers of samples lo..hi-1: j0 is the number of integers before
	// lo, j1 the index of the last one before hi.
	before := func(i int) int {
		n := 0
		for n < len(d.exc) && d.exc[n] < i {
			n++
		}
		return i - n
	}
	j0, j1 := before(lo), before(hi)-1
	if j1 >= len(ms) {
		return corruptf("too few values")
	}
	if j1 >= j0 {
		at := d.seek.start(j0)
		d.fillFrom(d.seek.startBit(at, vstart))
		if _, err := d.seek.readIntsSeek(r, ms, vp, vstart, at, j1); err != nil {
			return fmt.Errorf("values: %w", err)
		}
	}
	return d.expandRange(ms, exp, excs, d.exc, lo, hi, j0)
}

// expand converts the integers ms to values in d.vs, inserting the
// exceptions.
func (d *floatDecoder) expand(ms []int64, exp uint, excs []byte) error {
	vs := d.vs
	if len(excs) == 0 {
		if exp == 0 {
			for i, m := range ms {
				vs[i] = float64(m)
			}
			return nil
		}
		p := pow10f[exp]
		for i, m := range ms {
			vs[i] = float64(m) / p
		}
		return nil
	}
	var err error
	if d.exc, err = exceptionIndices(d.exc[:0], excs, len(vs)); err != nil {
		return err
	}
	if len(vs)-len(d.exc) != len(ms) {
		return corruptf("%d values for %d integers", len(vs)-len(d.exc), len(ms))
	}
	return d.expandRange(ms, exp, excs, d.exc, 0, len(vs), 0)
}

// readXOR fills out[1:] from XOR bits, given the first value's bits and
// the window (leading zeros and meaningful bits, sig 0 while none is set)
// after it, and returns the window after the last value.
func readXOR(r *bitReader, out []float64, v uint64, lead, sig uint) (uint, uint, error) {
	out[0] = math.Float64frombits(v)
	data, pos, end := r.data, r.pos, r.end
	for i := 1; i < len(out); i++ {
		pk := binary.BigEndian.Uint64(data[pos>>3:]) << (pos & 7)
		switch {
		case pk>>63 == 0:
			pos++
		case pk>>62 == 0b10:
			if sig == 0 {
				r.pos = pos
				return lead, sig, corruptf("value reuses a window before one was set")
			}
			pos += 2
			r.pos = pos
			v ^= r.read(sig) << (64 - lead - sig)
			pos = r.pos
		default:
			lead = uint(pk>>57) & 31
			sig = uint(pk>>51) & 63
			if sig == 0 {
				sig = 64
			}
			if lead+sig > 64 {
				r.pos = pos
				return lead, sig, corruptf("value window %d+%d exceeds 64 bits", lead, sig)
			}
			pos += 13
			r.pos = pos
			v ^= r.read(sig) << (64 - lead - sig)
			pos = r.pos
		}
		out[i] = math.Float64frombits(v)
		if pos > end {
			r.pos = pos
			return lead, sig, corruptf("values overrun the block")
		}
	}
	r.pos = pos
	return lead, sig, nil
}
