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

// valueAt parses the header and timestamp plan of the float block blk and
// returns the header and the index of the value encoding byte; ok is false
// for a block of another kind.
func valueAt(t testing.TB, blk []byte) (h header, at int, ok bool) {
	t.Helper()
	at, err := h.parse(blk)
	if err != nil {
		t.Fatal(err)
	}
	if h.kind != KindFloat {
		return h, 0, false
	}
	if h.count > 1 {
		var tp intPlan
		m, err := tp.parse(blk[at:], h.count)
		if err != nil {
			t.Fatal(err)
		}
		at += m
	}
	return h, at, true
}

// hasSeekTable reports whether blk is a float block with a seek table.
func hasSeekTable(t testing.TB, blk []byte) bool {
	_, at, ok := valueAt(t, blk)
	return ok && blk[at]&valSeek != 0
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
			case "const", "const-stale":
				if seek {
					t.Errorf("%s/%d: a constant block has a seek table", s.name, n)
				}
			case "counter", "counter-big", "gauge-float", "random-bits":
				// Short blocks may fall below seekShare; these do not.
				if !seek && n >= 480 {
					t.Errorf("%s/%d: no seek table", s.name, n)
				}
			}
			checkRangeReads(t, blk, s.ts, s.vs, true)
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
		for i := tabStart; i < tabEnd; i++ {
			bad := slices.Clone(blk)
			bad[i] ^= 0x01
			var it Iterator
			err := it.Reset(bad)
			if err == nil {
				// A flipped low bit can leave a varint's meaning unchanged
				// only if the byte was not part of a value; every byte of
				// the table is.
				t.Errorf("%s: table byte %d altered, the block still decodes", s.name, i-tabStart)
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
		m, err := vp.parse(blk[at+1:], h.count)
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
	m, err := st.parse(blk[at:], vmode, &vp, nv, x0)
	if err != nil {
		t.Fatal(err)
	}
	return at, at + m
}
