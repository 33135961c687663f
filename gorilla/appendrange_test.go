package gorilla

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// TestAppendRange cuts blocks of every shape, with and without seek tables,
// over ranges at and around their seek points and ends, and expects exactly
// the samples in each range, bit for bit, appended after what the slices
// held.
func TestAppendRange(t *testing.T) {
	rng := newRand()
	prefixT, prefixV := []int64{-7}, []float64{math.Pi}
	var it Iterator
	for _, n := range []int{1, 2, seekEvery + 1, 480, 1000} {
		for _, s := range genSeries(rng, n) {
			blk := mustEncode(t, s.ts, s.vs)
			for _, r := range seekRanges(s.ts, n < 500) {
				gts, gvs, err := it.AppendRange(slices.Clip(prefixT), slices.Clip(prefixV), blk, r[0], r[1])
				if err != nil {
					t.Fatalf("%s/%d [%d, %d]: %v", s.name, n, r[0], r[1], err)
				}
				lo, _ := slices.BinarySearch(s.ts, r[0])
				hi := lo
				for hi < len(s.ts) && s.ts[hi] <= r[1] {
					hi++
				}
				wts := append(slices.Clip(prefixT), s.ts[lo:hi]...)
				wvs := append(slices.Clip(prefixV), s.vs[lo:hi]...)
				if !slices.Equal(gts, wts) || len(gvs) != len(wvs) {
					t.Fatalf("%s/%d [%d, %d]: times %v, want %v", s.name, n, r[0], r[1], gts, wts)
				}
				for i := range wvs {
					if math.Float64bits(gvs[i]) != math.Float64bits(wvs[i]) {
						t.Fatalf("%s/%d [%d, %d]: value %d %x, want %x", s.name, n, r[0], r[1], i, math.Float64bits(gvs[i]), math.Float64bits(wvs[i]))
					}
				}
				if vt := it.Next(); vt != chunkenc.ValNone {
					t.Fatalf("%s/%d: the iterator yields %v after AppendRange", s.name, n, vt)
				}
			}
		}
	}
}

// TestAppendRangeRefuses checks that a block of histograms and a corrupt
// block are errors that leave the slices as they were.
func TestAppendRangeRefuses(t *testing.T) {
	hist := NewAppender()
	for _, s := range genHistSamples(10, false, 7500) {
		if err := hist.AppendHistogram(s.t, s.h); err != nil {
			t.Fatal(err)
		}
	}
	ts, vs := steps(0, 200, 15000, 1)
	good := mustEncode(t, ts, vs)
	for _, c := range []struct {
		name    string
		blk     []byte
		corrupt bool
	}{
		{"empty", nil, false},
		{"histograms", hist.AppendBlock(nil), false},
		{"truncated", good[:len(good)/2], true},
	} {
		var it Iterator
		pt, pv := []int64{1}, []float64{2}
		gts, gvs, err := it.AppendRange(pt, pv, c.blk, math.MinInt64, math.MaxInt64)
		if err == nil {
			t.Fatalf("%s: no error", c.name)
		}
		if c.corrupt != errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, corrupt %v", c.name, err, c.corrupt)
		}
		if !slices.Equal(gts, pt) || !slices.Equal(gvs, pv) {
			t.Errorf("%s: slices %v %v, want them as they were", c.name, gts, gvs)
		}
	}
}
