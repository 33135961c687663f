package gorilla

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// blockTimes is what a float block says of its timestamps: its header, the
// timestamp plan and, when it has one (table), the timestamp seek table,
// which spans blk[start:end]; without one start and end are both where the
// value encoding byte is.
type blockTimes struct {
	h          header
	tp         intPlan
	st         seekTable
	vbits      uint64
	start, end int
	table      bool
}

// readBlockTimes parses the header, timestamp plan and timestamp table of
// blk; ok is false for a block of another kind.
func readBlockTimes(t testing.TB, blk []byte) (bt blockTimes, ok bool) {
	t.Helper()
	at, err := bt.h.parse(blk)
	if err != nil {
		t.Fatal(err)
	}
	if bt.h.kind != KindFloat {
		return bt, false
	}
	if bt.h.count > 1 {
		m, err := bt.tp.parse(blk[at:], bt.h.count, tsSeek)
		if err != nil {
			t.Fatal(err)
		}
		bt.table = blk[at]&tsSeek != 0
		at += m
	}
	bt.start, bt.end = at, at
	if bt.table {
		m, vbits, err := bt.st.parseTimes(blk[at:], &bt.tp, bt.h.count, bt.h.mint, bt.h.maxt)
		if err != nil {
			t.Fatal(err)
		}
		bt.vbits, bt.end = vbits, at+m
	}
	return bt, true
}

// valueAt parses the header and timestamps of the float block blk and
// returns the header and the index of the value encoding byte; ok is false
// for a block of another kind.
func valueAt(t testing.TB, blk []byte) (h header, at int, ok bool) {
	t.Helper()
	bt, ok := readBlockTimes(t, blk)
	return bt.h, bt.end, ok
}

// timeTableSpan returns where the timestamp seek table of the float block
// blk starts and ends; ok is false when it has none.
func timeTableSpan(t testing.TB, blk []byte) (start, end int, ok bool) {
	t.Helper()
	bt, ok := readBlockTimes(t, blk)
	return bt.start, bt.end, ok && bt.table
}

// hasSeekTable reports whether blk is a float block with a value seek
// table.
func hasSeekTable(t testing.TB, blk []byte) bool {
	_, at, ok := valueAt(t, blk)
	return ok && blk[at]&valSeek != 0
}

// hasTimeTable reports whether blk is a float block with a timestamp seek
// table.
func hasTimeTable(t testing.TB, blk []byte) bool {
	_, _, ok := timeTableSpan(t, blk)
	return ok
}

// seekRanges returns the ranges a test reads of a block with timestamps ts:
// between samples at, around and between the seek points, the first and
// last, and ranges that miss the block. all adds every pair of the indices.
func seekRanges(ts []int64, all bool) [][2]int64 {
	n := len(ts)
	idx := []int{0, n / 3, n / 2, n - 1}
	if all {
		idx = append(idx, 1, n-2)
		for k := seekEvery; k < n; k += seekEvery {
			idx = append(idx, k-1, k, k+1)
		}
	}
	idx = slices.DeleteFunc(idx, func(i int) bool { return i < 0 || i >= n })
	slices.Sort(idx)
	idx = slices.Compact(idx)
	rs := [][2]int64{
		{math.MinInt64, ts[0] - 1}, {ts[n-1] + 1, math.MaxInt64}, {math.MinInt64, math.MaxInt64},
	}
	for _, a := range idx {
		rs = append(rs, [2]int64{ts[a], math.MaxInt64}, [2]int64{math.MinInt64, ts[a]}, [2]int64{ts[a] + 1, math.MaxInt64})
		for _, b := range idx {
			if b >= a {
				rs = append(rs, [2]int64{ts[a], ts[b]}, [2]int64{ts[a] - 1, ts[b] + 1}, [2]int64{ts[a] + 1, ts[b] - 1})
			}
		}
	}
	return rs
}

// checkRangeReads reads blk with ResetRange over every range of seekRanges
// and expects the samples of (ts, vs) in the range, bit for bit; samples
// outside it may come too, in order and as stored.
func checkRangeReads(t *testing.T, blk []byte, ts []int64, vs []float64, all bool) {
	t.Helper()
	for _, r := range seekRanges(ts, all) {
		// A fresh iterator: a reused one holds the last read's values,
		// which would hide a read of a value this one did not decode.
		var it Iterator
		if err := it.ResetRange(blk, r[0], r[1]); err != nil {
			t.Fatalf("range [%d, %d]: %v", r[0], r[1], err)
		}
		i := 0
		for i < len(ts) && ts[i] < r[0] {
			i++
		}
		first := true
		for it.Next() == chunkenc.ValFloat {
			gt, gv := it.At()
			if gt < r[0] || gt > r[1] {
				// Outside the range: allowed, but it must be a stored sample.
				j, ok := slices.BinarySearch(ts, gt)
				if !ok || math.Float64bits(gv) != math.Float64bits(vs[j]) {
					t.Fatalf("range [%d, %d]: sample (%d, %v) outside the range is not stored", r[0], r[1], gt, gv)
				}
				continue
			}
			if first && gt != ts[i] {
				t.Fatalf("range [%d, %d]: first sample in range at %d, want %d", r[0], r[1], gt, ts[i])
			}
			first = false
			if i >= len(ts) || gt != ts[i] || math.Float64bits(gv) != math.Float64bits(vs[i]) {
				t.Fatalf("range [%d, %d]: sample %d is (%d, %x), want (%d, %x)", r[0], r[1], i, gt, math.Float64bits(gv), ts[i], math.Float64bits(vs[i]))
			}
			i++
		}
		if err := it.Err(); err != nil {
			t.Fatalf("range [%d, %d]: %v", r[0], r[1], err)
		}
		if i < len(ts) && ts[i] <= r[1] {
			t.Fatalf("range [%d, %d]: sample %d at %d missing", r[0], r[1], i, ts[i])
		}
	}
}

// TestSeekRange encodes every shape of series at lengths around the seek
// interval, checks which blocks get a seek table, and reads each over
// ranges at and around the seek points.
func TestSeekRange(t *testing.T) {
	rng := newRand()
	for _, n := range []int{seekEvery, seekEvery + 1, 2*seekEvery - 1, 2 * seekEvery, 2*seekEvery + 1, 480, 1000} {
		for _, s := range genSeries(rng, n) {
			blk := mustEncode(t, s.ts, s.vs)
			seek := hasSeekTable(t, blk)
			switch s.name {
			case "const", "const-stale", "const-jit":
				if seek {
					t.Errorf("%s/%d: a constant block has a seek table", s.name, n)
				}
			case "counter", "counter-big", "gauge-float", "random-bits":
				// Short blocks may fall below seekShare; these do not.
				if !seek && n >= 480 {
					t.Errorf("%s/%d: no seek table", s.name, n)
				}
			}
			// Timestamps on the grid take no bits and get no table;
			// jittered ones get one once a block is long enough.
			start, end, tseek := timeTableSpan(t, blk)
			if tseek && (end-start)*seekShare > len(blk) {
				t.Errorf("%s/%d: a timestamp table of %d bytes in a block of %d", s.name, n, end-start, len(blk))
			}
			switch s.name {
			case "const", "const-stale", "gauge-int", "gauge-float", "counter-stale":
				if tseek {
					t.Errorf("%s/%d: timestamps on the grid have a seek table", s.name, n)
				}
			case "counter", "gauge-dec", "random-bits", "specials", "const-jit":
				if !tseek && n >= 480 {
					t.Errorf("%s/%d: no timestamp seek table", s.name, n)
				}
			}
			checkRangeReads(t, blk, s.ts, s.vs, true)
		}
	}
}

// TestSeekRangeTimestamps reads blocks whose timestamps get a seek table
// under each predictor, with values of every kind of stream: constant (no
// value table), a sparse decimal plan (values read whole), dense decimals
// and XOR (both tables).
func TestSeekRangeTimestamps(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const n = 700
	times := map[byte][]int64{}
	// predBase: jitter around the grid at every scrape.
	times[predBase] = genTimestamps(rng, n, 1796014823533, 15000, 4)
	// predRevert: scrapes on a fixed grid, 40 % of them some ms late. The
	// encoder's choice depends on the draw: draw until it is a dense
	// predRevert plan.
	for try := 0; try < 1000 && times[predRevert] == nil; try++ {
		rev := make([]int64, n)
		for i := range rev {
			rev[i] = 1796014823533 + int64(i)*15000
			if rng.IntN(10) < 4 {
				rev[i] += 1 + rng.Int64N(20)
			}
		}
		if p := planInts(rev); p.mode == predRevert && !p.sparse {
			times[predRevert] = rev
		}
	}
	// predDelta: a step that drifts.
	drift := make([]int64, n)
	step := int64(10000)
	for i := range drift {
		if i > 0 {
			step += rng.Int64N(41) - 20
			drift[i] = drift[i-1] + step
		}
	}
	times[predDelta] = drift
	values := map[string]func(i int) float64{
		"const":          func(int) float64 { return 3 },
		"sparse-decimal": func(i int) float64 { return float64(i/100) * 2 },
		"dense-decimal":  func(i int) float64 { return float64(i*1000+rng.IntN(700)) / 100 },
		"xor":            func(int) float64 { return rng.NormFloat64() },
		"xor-rare":       func(i int) float64 { return float64(i/50) * math.Pi },
	}
	if len(times) != 3 {
		t.Fatalf("timestamps for %d predictors, want 3", len(times))
	}
	for pred, ts := range times {
		if p := planInts(ts); p.mode != pred || p.sparse {
			t.Fatalf("timestamps for predictor %d plan as %d (sparse %v)", pred, p.mode, p.sparse)
		}
		for name, f := range values {
			vs := make([]float64, n)
			for i := range vs {
				vs[i] = f(i)
			}
			blk := mustEncode(t, ts, vs)
			if !hasTimeTable(t, blk) {
				t.Fatalf("predictor %d, %s: no timestamp seek table", pred, name)
			}
			if name == "xor-rare" && valueEncoding(t, blk) != valXOR {
				t.Fatalf("predictor %d, %s: value encoding %d, want XOR", pred, name, valueEncoding(t, blk))
			}
			if want := name == "dense-decimal" || name == "xor"; hasSeekTable(t, blk) != want {
				t.Fatalf("predictor %d, %s: value seek table %v, want %v", pred, name, !want, want)
			}
			checkRangeReads(t, blk, ts, vs, true)
		}
	}
}

// TestSeekRangeExceptions puts decimal exceptions (stale markers) at, before
// and after the seek points and at the ends: the integers of a decimal
// block skip them, so its points fall on other sample indices.
func TestSeekRangeExceptions(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	n := 600
	ts := genTimestamps(rng, n, 1796014823533, 15000, 2)
	for _, at := range [][]int{
		{0}, {n - 1}, {seekEvery - 1}, {seekEvery}, {seekEvery + 1}, {0, 1, 2, seekEvery, 2 * seekEvery, 2*seekEvery + 1, n - 2, n - 1},
		{seekEvery - 3, seekEvery - 2, seekEvery - 1, seekEvery, seekEvery + 1},
	} {
		vs := make([]float64, n)
		c := int64(0)
		for i := range vs {
			c += rng.Int64N(100000)
			vs[i] = float64(c) / 100
		}
		for _, i := range at {
			vs[i] = staleNaN
		}
		blk := mustEncode(t, ts, vs)
		if !hasSeekTable(t, blk) {
			t.Fatalf("exceptions at %v: no seek table", at)
		}
		if valueEncoding(t, blk) != valDecimal {
			t.Fatalf("exceptions at %v: value encoding %d, want decimal", at, valueEncoding(t, blk))
		}
		checkRangeReads(t, blk, ts, vs, true)
	}
}

// TestSeekRangeDecodesPart: a range read of the last minutes of a block
// decodes from the seek point before them, not the block's start.
func TestSeekRangeDecodesPart(t *testing.T) {
	for _, s := range genSeries(newRand(), 480) {
		if s.name == "counter" || s.name == "const-jit" {
			// Jittered timestamps: those before the last point are not
			// decoded either.
			blk := mustEncode(t, s.ts, s.vs)
			var it Iterator
			it.dec.ts = make([]int64, 480)
			for i := range it.dec.ts {
				it.dec.ts[i] = -1
			}
			if err := it.ResetRange(blk, s.ts[470], math.MaxInt64); err != nil {
				t.Fatal(err)
			}
			if len(it.ts) != 480-470 || it.ts[0] != s.ts[470] {
				t.Errorf("%s: a read of the last 10 samples holds %d", s.name, len(it.ts))
			}
			last := min(470/it.dec.tseek.k, len(it.dec.tseek.pts)) * it.dec.tseek.k
			if last == 0 || it.dec.ts[last-1] != -1 {
				t.Errorf("%s: a timestamp before the last seek point (%d) was decoded", s.name, last)
			}
			// Nor were the bytes between the timestamps' point and the
			// values' copied: the decoder's copy of the block keeps the
			// sentinel there.
			if s.name == "counter" {
				mid := len(blk) / 2
				it.dec.buf[mid] = 0xa5
				if err := it.ResetRange(blk, s.ts[470], math.MaxInt64); err != nil {
					t.Fatal(err)
				}
				if it.dec.buf[mid] != 0xa5 {
					t.Errorf("%s: a read of the last samples copied the middle of the block", s.name)
				}
			}
			// A read from a point's own time starts at that point.
			it.dec.ts[last-1] = -1
			if err := it.ResetRange(blk, s.ts[last], math.MaxInt64); err != nil {
				t.Fatal(err)
			}
			if it.ts[0] != s.ts[last] || it.dec.ts[last-1] != -1 {
				t.Errorf("%s: a read from the time of seek point %d decoded the timestamp before it", s.name, last)
			}
		}
		if s.name != "gauge-float" && s.name != "counter" {
			continue
		}
		blk := mustEncode(t, s.ts, s.vs)
		var it Iterator
		if err := it.ResetRange(blk, s.ts[470], math.MaxInt64); err != nil {
			t.Fatal(err)
		}
		if len(it.ts) != 480-470 {
			t.Errorf("%s: a read of the last 10 samples holds %d", s.name, len(it.ts))
		}
		// The values before the last seek point were never decoded: the
		// decoder's buffer still holds the sentinel there.
		for i := range it.dec.vs[:3*seekEvery] {
			it.dec.vs[i] = -1
		}
		if err := it.ResetRange(blk, s.ts[470], math.MaxInt64); err != nil {
			t.Fatal(err)
		}
		if it.dec.vs[3*seekEvery-1] != -1 {
			t.Errorf("%s: a value before the last seek point was decoded", s.name)
		}
	}
}

// TestSeekTableChecked: a whole read checks every seek point against the
// values; a block whose table is altered anywhere fails to decode, and a
// range read that passes the altered point fails too.
func TestSeekTableChecked(t *testing.T) {
	for _, s := range genSeries(newRand(), 1000) {
		if s.name != "gauge-float" && s.name != "counter" {
			continue
		}
		blk := mustEncode(t, s.ts, s.vs)
		tabStart, tabEnd := seekTableSpan(t, blk)
		altered := 0
		tsStart, tsEnd, ok := timeTableSpan(t, blk)
		if s.name == "counter" && !ok {
			t.Fatalf("%s: no timestamp seek table", s.name)
		}
		for i := range tabEnd {
			if (i < tsStart || i >= tsEnd) && i < tabStart {
				continue
			}
			bad := slices.Clone(blk)
			bad[i] ^= 0x01
			var it Iterator
			err := it.Reset(bad)
			if err == nil {
				// A flipped low bit can leave a varint's meaning unchanged
				// only if the byte was not part of a value; every byte of
				// the table is.
				t.Errorf("%s: table byte %d altered, the block still decodes", s.name, i)
				continue
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s: %v does not wrap ErrCorrupt", s.name, err)
			}
			altered++
		}
		if altered == 0 {
			t.Fatalf("%s: nothing altered", s.name)
		}
	}
}

// TestTimeTableBounds: a timestamp seek table whose points leave the
// block's time range, or do not increase by at least their interval, is
// refused by whole and partial reads alike: a partial read starts at a
// point and would otherwise return samples from the wrong place.
func TestTimeTableBounds(t *testing.T) {
	var s series
	for _, g := range genSeries(newRand(), 480) {
		if g.name == "counter" {
			s = g
		}
	}
	blk := mustEncode(t, s.ts, s.vs)
	if got := rewriteTimeTable(t, blk, func([]seekPoint, int, *uint64) {}); !slices.Equal(got, blk) {
		t.Fatal("the table written again differs")
	}
	refused := func(what string, bad []byte, rs ...[2]int64) {
		t.Helper()
		for _, r := range rs {
			var it Iterator
			if err := it.ResetRange(bad, r[0], r[1]); !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s, range [%d, %d]: error %v, want ErrCorrupt", what, r[0], r[1], err)
			}
		}
	}
	whole, last := [2]int64{math.MinInt64, math.MaxInt64}, [2]int64{s.ts[470], math.MaxInt64}
	// The value stream's start: a whole read checks it, a read of part
	// relies on it but not past the block's end, and decodes no timestamp
	// past it.
	refused("value start one bit early", rewriteTimeTable(t, blk, func(_ []seekPoint, _ int, v *uint64) { *v-- }), whole, last)
	refused("value start past the end", rewriteTimeTable(t, blk, func(_ []seekPoint, _ int, v *uint64) { *v += 1 << 20 }), whole, last)
	// Values that take no bits: only the check of the start finds it.
	cs := genTimestamps(newRand(), 480, 1796014823533, 15000, 3)
	cblk := mustEncode(t, cs, make([]float64, len(cs)))
	refused("constant values, value start one bit late", rewriteTimeTable(t, cblk, func(_ []seekPoint, _ int, v *uint64) { *v++ }), whole)

	var h header
	if _, err := h.parse(blk); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		set  func(pts []seekPoint, k int64)
	}{
		{"after maxt", func(pts []seekPoint, _ int64) { pts[len(pts)-1].x = h.maxt + 1 }},
		{"at mint", func(pts []seekPoint, _ int64) { pts[0].x = h.mint }},
		{"too close to the previous point", func(pts []seekPoint, k int64) { pts[1].x = pts[0].x + k - 1 }},
		{"before the previous point", func(pts []seekPoint, _ int64) { pts[2].x = pts[0].x }},
	} {
		bad := rewriteTimeTable(t, blk, func(pts []seekPoint, k int, _ *uint64) { c.set(pts, int64(k)) })
		refused(c.name, bad, whole, last, [2]int64{s.ts[10], s.ts[20]})
	}
}

// rewriteTimeTable returns blk with its timestamp seek table written again
// after edit has changed its points (k timestamps apart) or value start.
func rewriteTimeTable(t *testing.T, blk []byte, edit func(pts []seekPoint, k int, vbits *uint64)) []byte {
	t.Helper()
	bt, ok := readBlockTimes(t, blk)
	if !ok || !bt.table {
		t.Fatal("no timestamp seek table")
	}
	pts, vbits := slices.Clone(bt.st.pts), bt.vbits
	edit(pts, bt.st.k, &vbits)
	// appendSeekTable keeps every stride-th of points every seekEvery.
	stride := bt.st.k / seekEvery
	all := make([]seekPoint, len(pts)*stride)
	for i, pt := range pts {
		all[(i+1)*stride-1] = pt
	}
	tab := binary.AppendUvarint(nil, vbits)
	tab = appendSeekTable(tab, false, &bt.tp, bt.h.mint, bt.tp.base, stride, all)
	return slices.Concat(blk[:bt.start], tab, blk[bt.end:])
}

// TestTimeTableChecksTimestamps: timestamps read with a timestamp table
// are checked as those read whole are, over the part a read decodes: a
// step that is not positive, steps that wrap past 2^63 back into the
// block's range, a last timestamp that is not the header's.
func TestTimeTableChecksTimestamps(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const n = 257
	jittered := func() []int64 {
		ts := make([]int64, n)
		for i := 1; i < n; i++ {
			ts[i] = ts[i-1] + 1000 + rng.Int64N(1000)
		}
		return ts
	}
	vs := make([]float64, n)
	for i := range vs {
		vs[i] = rng.NormFloat64()
	}
	// encode writes what Encode refuses: the integer plans wrap, so any
	// timestamps encode.
	encode := func(ts []int64) []byte {
		blk := new(floatEncoder).encode(nil, ts, vs)
		if !hasTimeTable(t, blk) {
			t.Fatal("no timestamp seek table")
		}
		return blk
	}

	repeated := jittered()
	repeated[70] = repeated[69]

	// Steps from point 64 on: the first wraps past 2^63, the others come
	// back round to just after point 64's time by point 128.
	wrapped := jittered()
	var sum uint64 = 1<<63 - 1
	wrapped[65] = int64(uint64(wrapped[64]) + sum)
	rest := (1<<63 + 1 + 64000) / 63
	for i := 66; i <= 128; i++ {
		wrapped[i] = int64(uint64(wrapped[i-1]) + uint64(rest))
	}
	for i := 129; i < n; i++ {
		wrapped[i] = wrapped[i-1] + 1000 + rng.Int64N(1000)
	}
	if wrapped[128] <= wrapped[64] || wrapped[65] >= wrapped[64] {
		t.Fatalf("timestamps do not wrap as meant: %d, %d, %d", wrapped[64], wrapped[65], wrapped[128])
	}

	// The header's last timestamp one more than the last one's.
	ts := jittered()
	offMaxt := encode(ts)
	var h header
	if _, err := h.parse(offMaxt); err != nil {
		t.Fatal(err)
	}
	hdr := appendHeader(nil, KindFloat, n, ts[0], ts[n-1])
	hdr2 := appendHeader(nil, KindFloat, n, ts[0], ts[n-1]+1)
	if len(hdr) != len(hdr2) {
		t.Fatal("header length changes")
	}
	offMaxt = slices.Concat(hdr2, offMaxt[len(hdr):])

	for _, c := range []struct {
		name string
		blk  []byte
		from int64 // a range read from here to the end must fail too
	}{
		{"repeated timestamp", encode(repeated), repeated[64]},
		{"wrapping steps", encode(wrapped), wrapped[64]},
		{"last timestamp", offMaxt, ts[n-2]},
	} {
		for _, r := range [][2]int64{{math.MinInt64, math.MaxInt64}, {c.from, math.MaxInt64}} {
			var it Iterator
			if err := it.ResetRange(c.blk, r[0], r[1]); !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s, range [%d, %d]: error %v, want ErrCorrupt", c.name, r[0], r[1], err)
			}
		}
	}
}

// valueEncoding returns the value encoding of the float block blk.
func valueEncoding(t *testing.T, blk []byte) byte {
	_, at, _ := valueAt(t, blk)
	return blk[at] &^ valSeek
}

// seekTableSpan returns where the seek table of the float block blk starts
// and ends.
func seekTableSpan(t *testing.T, blk []byte) (int, int) {
	t.Helper()
	h, at, _ := valueAt(t, blk)
	vmode := blk[at] &^ valSeek
	if blk[at]&valSeek == 0 {
		t.Fatal("no seek table")
	}
	at++
	var vp intPlan
	nv, x0 := h.count, int64(0)
	if vmode == valXOR {
		at += 8
	} else {
		m, err := vp.parse(blk[at+1:], h.count, 0)
		if err != nil {
			t.Fatal(err)
		}
		at += 1 + m
		x0, m = binary.Varint(blk[at:])
		at += m
		nexc, m := binary.Uvarint(blk[at:])
		at += m
		for range nexc {
			_, m := binary.Uvarint(blk[at:])
			at += m + 8
		}
		nv -= int(nexc)
	}
	var st seekTable
	m, err := st.parse(blk[at:], vmode == valXOR, &vp, nv, x0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return at, at + m
}

// TestSeekTableAllocationBounded: a table that claims more points than its
// block has bytes is refused before anything is allocated for them.
func TestSeekTableAllocationBounded(t *testing.T) {
	var st seekTable
	tp := intPlan{mode: predBase, base: 15000, code: prefixCode{nb: 2, width: [maxBuckets]uint8{0, 3}}}
	// k = 1 over 2^21 timestamps in a 4-byte table.
	tab := []byte{0x01, 0x00, 0x00, 0x00}
	if _, err := st.parse(tab, false, &tp, MaxBlockSamples, 0, tp.base); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("error %v, want ErrCorrupt", err)
	}
	if cap(st.pts) != 0 {
		t.Fatalf("%d points allocated", cap(st.pts))
	}
}

// TestSeekIndex checks seekIndex against a binary search of the whole slice
// for every target around every element of sorted slices of 1 to 70
// elements, gaps and runs of equal values among them.
func TestSeekIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for n := 1; n <= 70; n++ {
		xs := make([]int64, n)
		for i := range xs {
			xs[i] = int64(i) * 10
			if i > 0 && rng.IntN(4) == 0 {
				xs[i] = xs[i-1] // an equal value
			} else if i > 0 {
				xs[i] = xs[i-1] + 1 + rng.Int64N(30)
			}
		}
		for _, x := range xs {
			for _, tt := range []int64{x - 1, x, x + 1} {
				if tt > xs[n-1] {
					continue // the caller's precondition
				}
				want, _ := slices.BinarySearch(xs, tt)
				if got := seekIndex(xs, tt); got != want {
					t.Fatalf("n=%d t=%d: seekIndex %d, binary search %d (%v)", n, tt, got, want, xs)
				}
			}
		}
	}
}
