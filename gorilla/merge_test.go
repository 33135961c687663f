package gorilla

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/tsdbutil"
)

func mustEncode(t testing.TB, ts []int64, vs []float64) []byte {
	t.Helper()
	blk, err := Encode(nil, ts, vs)
	if err != nil {
		t.Fatal(err)
	}
	return blk
}

// refMerge merges float sample sets, later sets winning on equal
// timestamps.
func refMerge(sets ...[2][]float64) (ts []int64, vs []float64) {
	m := map[int64]float64{}
	for _, s := range sets {
		for i, t := range s[0] {
			m[int64(t)] = s[1][i]
		}
	}
	for t := range m {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	for _, t := range ts {
		vs = append(vs, m[t])
	}
	return ts, vs
}

func TestMerge(t *testing.T) {
	f := func(name string, older, newer [2][]float64) {
		t.Helper()
		enc := func(s [2][]float64) []byte {
			if len(s[0]) == 0 {
				return nil
			}
			ts := make([]int64, len(s[0]))
			for i, x := range s[0] {
				ts[i] = int64(x)
			}
			return mustEncode(t, ts, s[1])
		}
		got, err := Merge([]byte("prefix"), enc(older), enc(newer))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if string(got[:6]) != "prefix" {
			t.Fatalf("%s: dst not kept", name)
		}
		wts, wvs := refMerge(older, newer)
		if len(wts) == 0 {
			if len(got) != 6 {
				t.Fatalf("%s: merge of nothing wrote %d bytes", name, len(got)-6)
			}
			return
		}
		it, err := NewIterator(got[6:])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checkSamples(t, it, wts, wvs)
	}
	s := func(ts []float64, vs []float64) [2][]float64 { return [2][]float64{ts, vs} }
	f("both empty", s(nil, nil), s(nil, nil))
	f("older empty", s(nil, nil), s([]float64{1, 2}, []float64{10, 20}))
	f("newer empty", s([]float64{1, 2}, []float64{10, 20}), s(nil, nil))
	f("disjoint before", s([]float64{1, 2}, []float64{10, 20}), s([]float64{3, 4}, []float64{30, 40}))
	f("disjoint after", s([]float64{5, 6}, []float64{10, 20}), s([]float64{3, 4}, []float64{30, 40}))
	f("interleaved", s([]float64{1, 3, 5}, []float64{1, 3, 5}), s([]float64{2, 4, 6}, []float64{2, 4, 6}))
	f("same timestamps newer wins", s([]float64{1, 2, 3}, []float64{1, 2, 3}), s([]float64{1, 2, 3}, []float64{-1, -2, -3}))
	f("partial overlap", s([]float64{1, 2, 3, 4}, []float64{1, 2, 3, 4}), s([]float64{3, 4, 5}, []float64{30, staleNaN, 50}))
	f("stale replaces value", s([]float64{1, 2}, []float64{1, 2}), s([]float64{2}, []float64{staleNaN}))

	rng := rand.New(rand.NewPCG(9, 9))
	for range 200 {
		var sets [][2][]float64
		var blocks [][]byte
		for range 1 + rng.IntN(4) {
			n := rng.IntN(50)
			var tsf, vs []float64
			var ts []int64
			t0 := rng.Int64N(100)
			for i := range n {
				t0 += 1 + rng.Int64N(3)
				ts = append(ts, t0)
				tsf = append(tsf, float64(t0))
				vs = append(vs, float64(rng.IntN(10)+i))
			}
			sets = append(sets, [2][]float64{tsf, vs})
			if n == 0 {
				blocks = append(blocks, nil)
			} else {
				blocks = append(blocks, mustEncode(t, ts, vs))
			}
		}
		got, err := MergeAll(nil, blocks...)
		if err != nil {
			t.Fatal(err)
		}
		wts, wvs := refMerge(sets...)
		if len(wts) == 0 {
			continue
		}
		it, err := NewIterator(got)
		if err != nil {
			t.Fatal(err)
		}
		checkSamples(t, it, wts, wvs)
	}
}

func TestMergeKinds(t *testing.T) {
	hs := genHistSamples(40, false, 0) // t = 0, 15000, ...
	var ha Appender
	for _, s := range hs {
		if err := ha.AppendHistogram(s.t, s.h); err != nil {
			t.Fatal(err)
		}
	}
	hblk := ha.AppendBlock(nil)
	fhs := genHistSamples(10, true, 7500) // between the histograms
	var fa Appender
	for _, s := range fhs {
		if err := fa.AppendFloatHistogram(s.t, s.fh); err != nil {
			t.Fatal(err)
		}
	}
	fhblk := fa.AppendBlock(nil)
	// Floats that overwrite histograms 10..14 and come after the last.
	var fts []int64
	var fvs []float64
	for i := 10; i < 15; i++ {
		fts = append(fts, int64(i)*15000)
		fvs = append(fvs, float64(i))
	}
	fts = append(fts, 40*15000)
	fvs = append(fvs, staleNaN)
	fblk := mustEncode(t, fts, fvs)

	want := map[int64]mixedSample{}
	for _, s := range toMixed(hs) {
		want[s.t] = s
	}
	for _, s := range toMixed(fhs) {
		want[s.t] = s
	}
	for i, ts := range fts {
		want[ts] = mixedSample{vt: chunkenc.ValFloat, t: ts, v: fvs[i]}
	}
	var wantList []mixedSample
	for _, s := range want {
		wantList = append(wantList, s)
	}
	slices.SortFunc(wantList, func(a, b mixedSample) int { return int(a.t - b.t) })

	got, err := MergeAll(nil, hblk, fhblk, fblk)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ReadMeta(got)
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind != KindMixed || m.Count != len(wantList) {
		t.Fatalf("meta %+v, want mixed with %d samples", m, len(wantList))
	}
	it, err := NewIterator(got)
	if err != nil {
		t.Fatal(err)
	}
	checkMixed(t, it, wantList)

	// Same kinds stay that kind.
	got, err = Merge(nil, hblk, hblk)
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := ReadMeta(got); m.Kind != KindHistogram || m.Count != len(hs) {
		t.Fatalf("histogram merge: meta %+v", m)
	}
	it, err = NewIterator(got)
	if err != nil {
		t.Fatal(err)
	}
	checkMixed(t, it, toMixed(hs))
}

func TestMergeCorrupt(t *testing.T) {
	good := mustEncode(t, []int64{1, 2}, []float64{1, 2})
	for _, bad := range [][]byte{{0xff}, good[:len(good)-1]} {
		if _, err := Merge(nil, good, bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("merge with %x: %v, want ErrCorrupt", bad, err)
		}
	}
}

func TestHistogramBlockChecksum(t *testing.T) {
	var a Appender
	for i, h := range tsdbutil.GenerateTestHistograms(20) {
		if err := a.AppendHistogram(int64(i), h); err != nil {
			t.Fatal(err)
		}
	}
	blk := a.AppendBlock(nil)
	for i := range blk {
		bad := slices.Clone(blk)
		bad[i] ^= 0x10
		var it Iterator
		if err := it.Reset(bad); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("byte %d: %v does not wrap ErrCorrupt", i, err)
			}
			continue
		}
		for it.Next() != chunkenc.ValNone {
		}
		if it.Err() == nil {
			t.Errorf("flipped byte %d went unnoticed", i)
		}
	}
}

// TestHistogramGarbageWithValidChecksum alters histogram chunk bytes and
// fixes the checksum up, so that chunkenc's decoder sees garbage: the
// iterator must end with ErrCorrupt or decode something, never panic.
func TestHistogramGarbageWithValidChecksum(t *testing.T) {
	var a, fa Appender
	for i, h := range tsdbutil.GenerateTestHistograms(40) {
		if err := a.AppendHistogram(int64(i)*1000, h); err != nil {
			t.Fatal(err)
		}
	}
	for i, h := range tsdbutil.GenerateTestFloatHistograms(40) {
		if err := fa.AppendFloatHistogram(int64(i)*1000, h); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(31, 32))
	var it Iterator
	for _, blk := range [][]byte{a.AppendBlock(nil), fa.AppendBlock(nil)} {
		var h header
		n, err := h.parse(blk)
		if err != nil {
			t.Fatal(err)
		}
		_, m := binary.Uvarint(blk[n:])
		crcAt := n + m
		for range 2000 {
			bad := slices.Clone(blk)
			for range 1 + rng.IntN(4) {
				bad[crcAt+4+rng.IntN(len(bad)-crcAt-4)] = byte(rng.Uint32())
			}
			binary.BigEndian.PutUint32(bad[crcAt:], crc32.Checksum(bad[crcAt+4:], castagnoli))
			if err := decodeAll(&it, bad); err != nil && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
		}
	}
}
