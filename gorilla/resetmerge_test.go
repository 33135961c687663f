package gorilla

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// sameWalk walks got and want to their ends and fails at the first sample
// that differs.
func sameWalk(t *testing.T, got, want *Iterator) {
	t.Helper()
	for i := 0; ; i++ {
		gv, wv := got.Next(), want.Next()
		if gv != wv {
			t.Fatalf("sample %d: type %v, want %v (err %v)", i, gv, wv, got.Err())
		}
		if gv == chunkenc.ValNone {
			break
		}
		if got.AtT() != want.AtT() {
			t.Fatalf("sample %d: t %d, want %d", i, got.AtT(), want.AtT())
		}
		switch gv {
		case chunkenc.ValFloat:
			_, g := got.At()
			_, w := want.At()
			if math.Float64bits(g) != math.Float64bits(w) {
				t.Fatalf("sample %d: v %v, want %v", i, g, w)
			}
		case chunkenc.ValHistogram:
			_, g := got.AtHistogram(nil)
			_, w := want.AtHistogram(nil)
			if !g.Equals(w) {
				t.Fatalf("sample %d: histogram %v, want %v", i, g, w)
			}
		case chunkenc.ValFloatHistogram:
			_, g := got.AtFloatHistogram(nil)
			_, w := want.AtFloatHistogram(nil)
			if !g.Equals(w) {
				t.Fatalf("sample %d: float histogram %v, want %v", i, g, w)
			}
		}
	}
	if got.Err() != nil || want.Err() != nil {
		t.Fatalf("errors: got %v, want %v", got.Err(), want.Err())
	}
}

// floatAppender appends (ts[i], vs[i]) to a new Appender.
func floatAppender(t *testing.T, ts []int64, vs []float64) *Appender {
	t.Helper()
	a := NewAppender()
	for i := range ts {
		if err := a.Append(ts[i], vs[i]); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

func steps(from, n int, step int64, v0 float64) ([]int64, []float64) {
	ts := make([]int64, n)
	vs := make([]float64, n)
	for i := range n {
		ts[i] = int64(from+i) * step
		vs[i] = v0 + float64(i)*1.25
	}
	return ts, vs
}

// TestResetMerge checks that ResetMerge walks the samples of the block
// MergeAll builds of the same sources, reusing one iterator throughout.
func TestResetMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	block := func(from, n int, v0 float64) Source {
		ts, vs := steps(from, n, 15000, v0)
		return Source{Block: mustEncode(t, ts, vs)}
	}
	app := func(from, n int, v0 float64) Source {
		ts, vs := steps(from, n, 15000, v0)
		return Source{App: floatAppender(t, ts, vs).Clone()}
	}
	floats := func(from, n int, v0 float64) Source {
		ts, vs := steps(from, n, 15000, v0)
		return Source{Floats: &Floats{T: ts, V: vs}}
	}
	random := func(n int) Source {
		ts := make([]int64, 0, n)
		vs := make([]float64, 0, n)
		last := int64(0)
		for range n {
			last += 1 + rng.Int64N(30000)
			ts = append(ts, last)
			vs = append(vs, rng.NormFloat64())
		}
		return Source{Block: mustEncode(t, ts, vs)}
	}
	hs := genHistSamples(30, false, 7500)
	hist := NewAppender()
	for _, s := range hs {
		if err := hist.AppendHistogram(s.t, s.h); err != nil {
			t.Fatal(err)
		}
	}
	histBlock := Source{Block: hist.AppendBlock(nil)}

	cases := []struct {
		name string
		srcs []Source
	}{
		{"none", nil},
		{"all empty", []Source{{}, {App: NewAppender()}}},
		{"one block", []Source{block(0, 100, 1)}},
		{"one appender past a seal", []Source{app(0, 2*sealSamples+17, 1)}},
		{"one block among empty", []Source{{}, block(0, 10, 1), {App: NewAppender()}}},
		{"disjoint in order", []Source{block(0, 100, 1), block(100, 50, 7), app(150, 300, 9)}},
		{"disjoint out of order", []Source{block(100, 50, 7), block(0, 100, 1)}},
		{"overlapping, later wins", []Source{block(0, 100, 1), block(50, 100, 1000), app(75, 10, -5)}},
		{"same timestamps", []Source{block(0, 20, 1), block(0, 20, 2), block(0, 20, 3)}},
		{"random", []Source{random(300), random(200), random(1)}},
		{"histograms and floats", []Source{histBlock, block(0, 40, 1), {App: hist.Clone()}}},
		{"one run of decoded floats", []Source{floats(3, 40, 2)}},
		{"an empty run among others", []Source{{Floats: &Floats{}}, block(0, 10, 1)}},
		{"a run between a block and an appender, later wins", []Source{block(0, 100, 1), floats(50, 30, 700), app(60, 10, -5)}},
		{"a run after a block", []Source{block(0, 100, 1), floats(100, 5, 9)}},
		{"histograms and a run", []Source{histBlock, floats(0, 40, 1)}},
	}
	var it Iterator
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var blocks [][]byte
			for _, s := range c.srcs {
				switch {
				case s.App != nil:
					blocks = append(blocks, s.App.AppendBlock(nil))
				case s.Floats != nil && len(s.Floats.T) > 0:
					blocks = append(blocks, mustEncode(t, s.Floats.T, s.Floats.V))
				default:
					blocks = append(blocks, s.Block)
				}
			}
			merged, err := MergeAll(nil, blocks...)
			if err != nil {
				t.Fatal(err)
			}
			var want Iterator
			if len(merged) > 0 {
				if err := want.Reset(merged); err != nil {
					t.Fatal(err)
				}
			}
			if err := it.ResetMerge(c.srcs); err != nil {
				t.Fatal(err)
			}
			sameWalk(t, &it, &want)
			// Seek after a second reset finds what the merged block holds.
			if len(merged) > 0 {
				m, _ := ReadMeta(merged)
				mid := m.MinTime + (m.MaxTime-m.MinTime)/2
				if err := it.ResetMerge(c.srcs); err != nil {
					t.Fatal(err)
				}
				if err := want.Reset(merged); err != nil {
					t.Fatal(err)
				}
				if gv, wv := it.Seek(mid), want.Seek(mid); gv != wv || it.AtT() != want.AtT() {
					t.Fatalf("Seek(%d) = %v at %d, want %v at %d", mid, gv, it.AtT(), wv, want.AtT())
				}
			}
		})
	}
}

// TestResetMergeCorrupt checks that a corrupt source ends the iteration
// with an ErrCorrupt error.
func TestResetMergeCorrupt(t *testing.T) {
	ts, vs := steps(0, 50, 15000, 1)
	good := mustEncode(t, ts, vs)
	bad := append([]byte(nil), good[:len(good)/2]...)
	var it Iterator
	err := it.ResetMerge([]Source{{Block: good}, {Block: bad}})
	if !errors.Is(err, ErrCorrupt) || !errors.Is(it.Err(), ErrCorrupt) {
		t.Fatalf("ResetMerge of a truncated block: %v, Err %v; want ErrCorrupt", err, it.Err())
	}
	if vt := it.Next(); vt != chunkenc.ValNone {
		t.Fatalf("Next after the error = %v", vt)
	}
}

// TestAppenderClone checks that a clone keeps the samples appended before
// it was taken while the original goes on, and the other way round.
func TestAppenderClone(t *testing.T) {
	for _, n := range []int{1, sealSamples - 1, sealSamples, sealSamples + 3, 3*sealSamples + 100} {
		ts, vs := steps(0, n+2*sealSamples, 15000, 3)
		a := floatAppender(t, ts[:n], vs[:n])
		c := a.Clone()
		for i := n; i < len(ts); i++ {
			if err := a.Append(ts[i], vs[i]); err != nil {
				t.Fatal(err)
			}
		}
		checkSamples(t, c.Iterator(nil), ts[:n], vs[:n])
		checkSamples(t, a.Iterator(nil), ts, vs)
		// The clone can be appended to on its own.
		other := vs[n] + 100
		if err := c.Append(ts[n], other); err != nil {
			t.Fatal(err)
		}
		wantVs := append(append([]float64(nil), vs[:n]...), other)
		checkSamples(t, c.Iterator(nil), ts[:n+1], wantVs)
		checkSamples(t, a.Iterator(nil), ts, vs)
	}

	hs := genHistSamples(40, true, 0)
	a := NewAppender()
	for _, s := range hs[:30] {
		if err := a.AppendFloatHistogram(s.t, s.fh); err != nil {
			t.Fatal(err)
		}
	}
	c := a.Clone()
	for _, s := range hs[30:] {
		if err := a.AppendFloatHistogram(s.t, s.fh); err != nil {
			t.Fatal(err)
		}
	}
	checkMixed(t, c.Iterator(nil), toMixed(hs[:30]))
	checkMixed(t, a.Iterator(nil), toMixed(hs))
}

// TestResetMergeReuseDoesNotAllocate checks that a reused iterator merges
// float blocks in the memory it already has. (Appender sources borrow
// scratch space from a sync.Pool, which the race detector empties at
// random, so they are left out.)
func TestResetMergeReuseDoesNotAllocate(t *testing.T) {
	ts, vs := steps(0, 600, 15000, 3)
	srcs := []Source{
		{Block: mustEncode(t, ts[:300], vs[:300])},
		{Block: mustEncode(t, ts[200:400], vs[200:400])},
		{Block: mustEncode(t, ts[400:], vs[400:])},
		{Floats: &Floats{T: ts[450:500], V: vs[450:500]}}, // decoded floats merge in place too
	}
	var it Iterator
	walk := func() {
		if err := it.ResetMerge(srcs); err != nil {
			t.Fatal(err)
		}
		for it.Next() != chunkenc.ValNone {
		}
	}
	walk()
	if n := testing.AllocsPerRun(20, walk); n != 0 {
		t.Fatalf("ResetMerge and a walk allocate %v times, want 0", n)
	}
}

// TestResetMergeRange checks that a ranged merge walks, from the range's
// start to its end, what the whole merge walks, and that an appender's
// sealed blocks and stream wholly outside the range are left undecoded: a
// range within the last sealed block yields that block's samples and none
// of the others'.
func TestResetMergeRange(t *testing.T) {
	const step = 15000
	ts, vs := steps(0, 4*sealSamples+30, step, 1) // four sealed blocks and a stream
	long := floatAppender(t, ts, vs)
	ots, ovs := steps(3*sealSamples-5, 20, step, 500) // overlaps the third and fourth
	other := mustEncode(t, ots, ovs)
	srcs := []Source{{Block: other}, {App: long.Clone()}}

	// walk reads it from Seek(mint) to maxt and returns the samples.
	walk := func(it *Iterator, mint, maxt int64) (ts []int64, vs []float64) {
		for vt := it.Seek(mint); vt == chunkenc.ValFloat && it.AtT() <= maxt; vt = it.Next() {
			t, v := it.At()
			ts, vs = append(ts, t), append(vs, v)
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		return ts, vs
	}
	for _, r := range []struct {
		name       string
		mint, maxt int64
		most       int // the samples the ranged iterator may hold at most
	}{
		{"all", math.MinInt64, math.MaxInt64, len(ts)},
		{"in the second block", (sealSamples + 10) * step, (sealSamples + 20) * step, sealSamples},
		{"across the third and fourth", (3*sealSamples - 3) * step, (3*sealSamples + 3) * step, 2*sealSamples + 20},
		{"in the stream", (4*sealSamples + 5) * step, (4*sealSamples + 6) * step, 30},
		{"the stream's last sample", ts[len(ts)-1], ts[len(ts)-1], 30},
		{"the stream's first sample", ts[4*sealSamples], ts[4*sealSamples], 30},
		{"a block's last sample", ts[sealSamples-1], ts[sealSamples-1], sealSamples},
		{"a block's first sample", ts[2*sealSamples], ts[2*sealSamples], sealSamples},
		{"before everything", -10 * step, -1, 0},
		{"after everything", (5 * sealSamples) * step, (6 * sealSamples) * step, 0},
	} {
		t.Run(r.name, func(t *testing.T) {
			for _, c := range []struct {
				name string
				srcs []Source
				most int
			}{
				{"appender alone", srcs[1:], r.most},
				{"merged with a block", srcs, r.most + len(ots)},
			} {
				var all, ranged Iterator
				if err := all.ResetMerge(c.srcs); err != nil {
					t.Fatal(err)
				}
				if err := ranged.ResetMergeRange(c.srcs, r.mint, r.maxt); err != nil {
					t.Fatal(err)
				}
				if n := len(ranged.ts); n > c.most {
					t.Errorf("%s: the ranged iterator decoded %d samples, want at most %d", c.name, n, c.most)
				}
				wts, wvs := walk(&all, r.mint, r.maxt)
				gts, gvs := walk(&ranged, r.mint, r.maxt)
				if !slices.Equal(gts, wts) || !slices.Equal(gvs, wvs) {
					t.Fatalf("%s: ranged walk %v %v, want %v %v", c.name, gts, gvs, wts, wvs)
				}
			}
		})
	}
}
