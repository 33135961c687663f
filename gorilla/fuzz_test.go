package gorilla

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/tsdbutil"

	"github.com/shaledb/shale/internal/fuzzseed"
)

// Fuzz targets; seeds live in testdata/fuzz/<target>. Run one with e.g.
//
//	go test -run '^$' -fuzz '^FuzzDecode$' -fuzztime 60s ./gorilla/

// FuzzDecode feeds arbitrary bytes to the decoder: it must return an error
// wrapping ErrCorrupt or samples consistent with the header, never panic.
func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		var it Iterator
		err := it.Reset(data)
		meta, merr := ReadMeta(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			// A read of part of the block checks only that part: it may
			// succeed, or fail as a whole read does.
			if merr == nil {
				mid := meta.MinTime/2 + meta.MaxTime/2
				if err := it.ResetRange(data, mid, math.MaxInt64); err != nil && !errors.Is(err, ErrCorrupt) {
					t.Fatalf("range read: error %v does not wrap ErrCorrupt", err)
				}
				// So may a cut of part of it (a float block's); what it
				// cuts is in the range and in order.
				if meta.Kind == KindFloat {
					ts, _, err := it.AppendRange(nil, nil, data, mid, math.MaxInt64)
					if err != nil && !errors.Is(err, ErrCorrupt) {
						t.Fatalf("range cut: error %v does not wrap ErrCorrupt", err)
					}
					for i, ct := range ts {
						if ct < mid || (i > 0 && ct <= ts[i-1]) {
							t.Fatalf("range cut from %d: sample %d at %d", mid, i, ct)
						}
					}
				}
			}
			return
		}
		if merr != nil {
			t.Fatalf("iterator accepts what ReadMeta rejects: %v", merr)
		}
		n, first, last := 0, int64(0), int64(0)
		var fts []int64
		var fvs []float64
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			switch vt {
			case chunkenc.ValFloat:
				ft, fv := it.At()
				fts, fvs = append(fts, ft), append(fvs, fv)
			case chunkenc.ValHistogram:
				it.AtHistogram(nil)
			case chunkenc.ValFloatHistogram:
				it.AtFloatHistogram(nil)
			}
			if n == 0 {
				first = it.AtT()
			} else if it.AtT() <= last {
				t.Fatalf("timestamp %d after %d", it.AtT(), last)
			}
			last = it.AtT()
			n++
		}
		if err := it.Err(); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if n != meta.Count || first != meta.MinTime || last != meta.MaxTime {
			t.Fatalf("decoded %d samples %d..%d, meta %+v", n, first, last, meta)
		}
		// A block that reads whole reads the same in part, and cuts to
		// the same samples.
		if meta.Kind == KindFloat {
			checkRangeReads(t, data, fts, fvs, false)
			mid := meta.MinTime/2 + meta.MaxTime/2
			cts, cvs, err := it.AppendRange(nil, nil, data, mid, meta.MaxTime)
			lo, _ := slices.BinarySearch(fts, mid)
			if err != nil || !slices.Equal(cts, fts[lo:]) || len(cvs) != len(fts)-lo {
				t.Fatalf("range cut from %d: %d samples (%v), want %d", mid, len(cts), err, len(fts)-lo)
			}
			for i := range cvs {
				if math.Float64bits(cvs[i]) != math.Float64bits(fvs[lo+i]) {
					t.Fatalf("range cut from %d: value %d differs", mid, i)
				}
			}
		}
		// A decodable block merges with itself into the same samples.
		if _, err := Merge(nil, data, data); err != nil {
			t.Fatalf("merge of a valid block: %v", err)
		}
	})
}

// samplesFrom turns fuzz bytes into a valid float series. Each sample takes a
// control byte: its low bits pick the value (repeat, small step, decimal,
// raw bits) and its high bits the timestamp step (same, jitter, large).
func samplesFrom(data []byte) (ts []int64, vs []float64) {
	t, step, v := int64(1796014823533), int64(15000), 0.0
	next := func(n int) uint64 {
		var b [8]byte
		k := copy(b[:], data[:min(n, len(data))])
		data = data[k:]
		return binary.LittleEndian.Uint64(b[:])
	}
	for len(data) > 0 && len(ts) < 5000 {
		c := data[0]
		data = data[1:]
		switch c & 3 {
		case 1:
			v += float64(int8(next(1)))
		case 2:
			v = float64(int16(next(2))) / 100
		case 3:
			v = math.Float64frombits(next(8))
		}
		switch c >> 2 & 3 {
		case 1:
			t += int64(int8(next(1)))
		case 2:
			step = 1 + int64(next(4)>>1)
		case 3:
			t = t - 1 - int64(next(1)) + step
		}
		if len(ts) > 0 && t <= ts[len(ts)-1] {
			t = ts[len(ts)-1] + 1
		}
		ts = append(ts, t)
		vs = append(vs, v)
		t += step
	}
	return ts, vs
}

// FuzzRoundTrip encodes arbitrary samples through Encode and the Appender and
// expects them back bit for bit.
func FuzzRoundTrip(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		ts, vs := samplesFrom(data)
		if len(ts) == 0 {
			return
		}
		blk, err := Encode(nil, ts, vs)
		if err != nil {
			t.Fatal(err)
		}
		it, err := NewIterator(blk)
		if err != nil {
			t.Fatal(err)
		}
		checkSamples(t, it, ts, vs)
		checkRangeReads(t, blk, ts, vs, false)
		var a Appender
		for i := range ts {
			if err := a.Append(ts[i], vs[i]); err != nil {
				t.Fatal(err)
			}
		}
		checkSamples(t, a.Iterator(it), ts, vs)
		if string(a.AppendBlock(nil)) != string(blk) {
			t.Fatal("AppendBlock and Encode differ")
		}
	})
}

// FuzzMerge merges two arbitrary series and compares with a plain merge.
func FuzzMerge(f *testing.F) {
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ats, avs := samplesFrom(a)
		bts, bvs := samplesFrom(b)
		var ab, bb []byte
		var err error
		if len(ats) > 0 {
			if ab, err = Encode(nil, ats, avs); err != nil {
				t.Fatal(err)
			}
		}
		if len(bts) > 0 {
			if bb, err = Encode(nil, bts, bvs); err != nil {
				t.Fatal(err)
			}
		}
		got, err := Merge(nil, ab, bb)
		if err != nil {
			t.Fatal(err)
		}
		m := map[int64]float64{}
		for i, t := range ats {
			m[t] = avs[i]
		}
		for i, t := range bts {
			m[t] = bvs[i]
		}
		if len(m) == 0 {
			if len(got) != 0 {
				t.Fatal("merge of nothing wrote a block")
			}
			return
		}
		it, err := NewIterator(got)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		last := int64(math.MinInt64)
		for it.Next() == chunkenc.ValFloat {
			gt, gv := it.At()
			if gt <= last {
				t.Fatalf("timestamp %d after %d", gt, last)
			}
			last = gt
			if want, ok := m[gt]; !ok || math.Float64bits(want) != math.Float64bits(gv) {
				t.Fatalf("sample (%d, %v), want %v (present %v)", gt, gv, want, ok)
			}
			n++
		}
		if n != len(m) || it.Err() != nil {
			t.Fatalf("merged %d samples, want %d (err %v)", n, len(m), it.Err())
		}
	})
}

// TestWriteFuzzSeeds regenerates the seed corpora under testdata/fuzz when
// GORILLA_WRITE_SEEDS is set.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("GORILLA_WRITE_SEEDS") == "" {
		t.Skip("set GORILLA_WRITE_SEEDS=1 to rewrite testdata/fuzz")
	}
	write := func(target, name string, args ...any) {
		if err := fuzzseed.Write(target, name, args...); err != nil {
			t.Fatal(err)
		}
	}
	// Decoder seeds: one block of every encoding.
	for _, s := range genSeriesFixed(120) {
		write("FuzzDecode", "float-"+s.name, mustEncode(t, s.ts, s.vs))
	}
	// Blocks long enough for seek tables, of the values or the timestamps.
	for _, s := range genSeriesFixed(2*seekEvery + 7) {
		if blk := mustEncode(t, s.ts, s.vs); hasSeekTable(t, blk) || hasTimeTable(t, blk) {
			write("FuzzDecode", "float-seek-"+s.name, blk)
		}
	}
	var ha, fa Appender
	for i, h := range tsdbutil.GenerateTestHistograms(30) {
		_ = ha.AppendHistogram(int64(i)*1000, h)
	}
	for i, h := range tsdbutil.GenerateTestFloatHistograms(30) {
		_ = fa.AppendFloatHistogram(int64(i)*1000+500, h)
	}
	hb, fb := ha.AppendBlock(nil), fa.AppendBlock(nil)
	mixed, err := MergeAll(nil, hb, fb, mustEncode(t, []int64{250, 20250}, []float64{1, staleNaN}))
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range ha.x.h.appendParts(nil) {
		write("FuzzHistogramChunk", fmt.Sprintf("histogram-%d", i), false, p.data)
	}
	for i, p := range fa.x.h.appendParts(nil) {
		write("FuzzHistogramChunk", fmt.Sprintf("floathistogram-%d", i), true, p.data)
	}
	write("FuzzDecode", "histogram", hb)
	write("FuzzDecode", "floathistogram", fb)
	write("FuzzDecode", "mixed", mixed)
	write("FuzzDecode", "garbage", []byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0})

	// Sample generator seeds: every value and timestamp shape.
	gen := [][]byte{
		{0, 0, 0, 0},
		{1, 5, 1, 7, 1, 250, 5, 3, 1, 1},
		{2, 0x39, 0x30, 2, 0x3a, 0x30, 6, 2, 0x10, 0x27},
		{3, 2, 0, 0, 0, 0, 0, 0xf0, 0x7f, 3, 1, 0, 0, 0, 0, 0, 0xf0, 0x7f, 3, 0, 0, 0, 0, 0, 0, 0, 0x80},
		{8, 0x20, 0x4e, 0, 0, 1, 1, 0, 0, 12, 9, 0},
	}
	for i, g := range gen {
		write("FuzzRoundTrip", fmt.Sprintf("shapes-%d", i), g)
		write("FuzzMerge", fmt.Sprintf("shapes-%d", i), g, gen[(i+1)%len(gen)])
	}
}

// genSeriesFixed is genSeries with a fixed seed.
func genSeriesFixed(n int) []series {
	return genSeries(newRand(), n)
}

// FuzzHistogramChunk feeds arbitrary bytes to the histogram part decoder as
// if they had passed the block checksum: the iterator must end with an error
// wrapping ErrCorrupt or decode samples, never panic or run out of memory.
func FuzzHistogramChunk(f *testing.F) {
	f.Fuzz(func(t *testing.T, float bool, data []byte) {
		k := partHistogram
		if float {
			k = partFloatHistogram
		}
		var it Iterator
		it.clear()
		it.parts = append(it.parts, part{kind: k, data: data})
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			it.AtFloatHistogram(nil)
			if vt == chunkenc.ValHistogram {
				it.AtHistogram(nil)
			}
		}
		if err := it.Err(); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error %v does not wrap ErrCorrupt", err)
		}
	})
}
