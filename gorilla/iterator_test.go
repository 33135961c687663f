package gorilla

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/tsdbutil"
)

// TestSeekMatchesXOR drives our iterator and chunkenc's XOR iterator over
// the same samples with the same random Next and Seek calls, including
// Seek before the first sample, past the end and after exhaustion, and
// expects the same answers.
func TestSeekMatchesXOR(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var it Iterator
	var xit chunkenc.Iterator
	for round := range 300 {
		n := 1 + rng.IntN(200)
		s := genSeries(rng, n)[rng.IntN(11)]
		blk, err := Encode(nil, s.ts, s.vs)
		if err != nil {
			t.Fatal(err)
		}
		if err := it.Reset(blk); err != nil {
			t.Fatal(err)
		}
		xc := xorEncode(unit{s.ts, s.vs})
		xit = xc.Iterator(xit)
		lo, hi := s.ts[0], s.ts[n-1]
		for op := range 40 {
			var got, want chunkenc.ValueType
			var desc string
			if rng.IntN(3) == 0 {
				got, want, desc = it.Next(), xit.Next(), "Next"
			} else {
				var at int64
				switch rng.IntN(4) {
				case 0:
					at = lo - 1 - rng.Int64N(1000)
				case 1:
					at = hi + 1 + rng.Int64N(1000)
				case 2:
					at = s.ts[rng.IntN(n)]
				default:
					at = lo + rng.Int64N(hi-lo+1)
				}
				got, want, desc = it.Seek(at), xit.Seek(at), "Seek"
			}
			if got != want {
				t.Fatalf("round %d op %d %s: got %v, XOR %v", round, op, desc, got, want)
			}
			if got == chunkenc.ValFloat {
				gt, gv := it.At()
				wt, wv := xit.At()
				if gt != wt || math.Float64bits(gv) != math.Float64bits(wv) || it.AtT() != wt {
					t.Fatalf("round %d op %d %s: at (%d, %v), XOR (%d, %v)", round, op, desc, gt, gv, wt, wv)
				}
			}
		}
	}
}

func TestIteratorReuseDoesNotAllocate(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var blocks [][]byte
	for _, s := range genSeries(rng, 500) {
		blk, err := Encode(nil, s.ts, s.vs)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, blk)
	}
	var it Iterator
	walk := func() {
		for _, blk := range blocks {
			if err := it.Reset(blk); err != nil {
				t.Fatal(err)
			}
			for it.Next() != chunkenc.ValNone {
			}
		}
	}
	walk() // size the buffers
	if a := testing.AllocsPerRun(20, walk); a != 0 {
		t.Errorf("reset and walk allocate %v times", a)
	}
}

func TestNewIteratorErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		block []byte
	}{
		{"empty", nil},
		{"unknown kind", []byte{9, 1, 0}},
		{"zero count", []byte{1, 0, 0}},
		{"truncated", []byte{1, 5}},
	} {
		it, err := NewIterator(tc.block)
		if !errors.Is(err, ErrCorrupt) || it != nil {
			t.Errorf("%s: got %v, %v; want ErrCorrupt", tc.name, it, err)
		}
		var zero Iterator
		if zero.Reset(tc.block) == nil || zero.Next() != chunkenc.ValNone || zero.Seek(0) != chunkenc.ValNone || zero.Err() == nil {
			t.Errorf("%s: failed Reset leaves a usable iterator", tc.name)
		}
	}
	var zero Iterator
	if zero.Next() != chunkenc.ValNone || zero.Err() != nil {
		t.Error("zero Iterator is not an exhausted iterator")
	}
}

func TestAppenderErrors(t *testing.T) {
	var a Appender
	if a.AppendBlock([]byte("x")) == nil || string(a.AppendBlock([]byte("x"))) != "x" {
		t.Error("empty appender changed dst")
	}
	if err := a.Append(10, 1); err != nil {
		t.Fatal(err)
	}
	for _, ts := range []int64{10, 9, math.MinInt64} {
		if err := a.Append(ts, 2); !errors.Is(err, ErrOutOfOrder) {
			t.Errorf("Append(%d) after 10: %v, want ErrOutOfOrder", ts, err)
		}
	}
	if err := a.AppendHistogram(20, tsdbutil.GenerateTestHistogram(1)); !errors.Is(err, ErrKindChange) {
		t.Errorf("histogram after float: %v, want ErrKindChange", err)
	}
	if err := a.AppendFloatHistogram(20, tsdbutil.GenerateTestFloatHistogram(1)); !errors.Is(err, ErrKindChange) {
		t.Errorf("float histogram after float: %v, want ErrKindChange", err)
	}
	if a.Count() != 1 || a.MinTime() != 10 || a.MaxTime() != 10 {
		t.Errorf("failed appends changed the appender: %d %d %d", a.Count(), a.MinTime(), a.MaxTime())
	}
	var h Appender
	if err := h.AppendHistogram(1, &histogram.Histogram{Count: 1, PositiveBuckets: []int64{5}}); err == nil {
		t.Error("invalid histogram accepted")
	}
	if h.Count() != 0 {
		t.Error("invalid histogram counted")
	}
}

// histSample is one expected histogram sample.
type histSample struct {
	t  int64
	h  *histogram.Histogram
	fh *histogram.FloatHistogram
}

func genHistSamples(n int, float bool, t0 int64) []histSample {
	var out []histSample
	for i := range n {
		// A counter reset at n/2 and a schema change at 3n/4 make the run
		// cut chunks.
		j := int64(i)
		if i >= n/2 {
			j = int64(i - n/2)
		}
		s := histSample{t: t0 + int64(i)*15000}
		if float {
			s.fh = tsdbutil.GenerateTestFloatHistogram(j)
			if i >= 3*n/4 {
				if err := s.fh.ReduceResolution(s.fh.Schema - 1); err != nil {
					panic(err)
				}
			}
		} else {
			s.h = tsdbutil.GenerateTestHistogram(j)
			if i >= 3*n/4 {
				if err := s.h.ReduceResolution(s.h.Schema - 1); err != nil {
					panic(err)
				}
			}
		}
		out = append(out, s)
	}
	return out
}

// checkHist walks it and compares with want; float samples in want have a
// nil h and fh and value v.
func checkMixed(t *testing.T, it *Iterator, want []mixedSample) {
	t.Helper()
	for i, w := range want {
		vt := it.Next()
		if vt != w.vt {
			t.Fatalf("sample %d: type %v, want %v (err %v)", i, vt, w.vt, it.Err())
		}
		if it.AtT() != w.t {
			t.Fatalf("sample %d: t %d, want %d", i, it.AtT(), w.t)
		}
		switch vt {
		case chunkenc.ValFloat:
			_, v := it.At()
			if math.Float64bits(v) != math.Float64bits(w.v) {
				t.Fatalf("sample %d: v %v, want %v", i, v, w.v)
			}
		case chunkenc.ValHistogram:
			_, h := it.AtHistogram(nil)
			h.CounterResetHint = w.h.CounterResetHint
			if !h.Equals(w.h) {
				t.Fatalf("sample %d: histogram %v, want %v", i, h, w.h)
			}
		case chunkenc.ValFloatHistogram:
			_, fh := it.AtFloatHistogram(nil)
			fh.CounterResetHint = w.fh.CounterResetHint
			if !fh.Equals(w.fh) {
				t.Fatalf("sample %d: float histogram %v, want %v", i, fh, w.fh)
			}
		}
	}
	if vt := it.Next(); vt != chunkenc.ValNone || it.Err() != nil {
		t.Fatalf("after %d samples: %v, err %v", len(want), vt, it.Err())
	}
}

type mixedSample struct {
	vt chunkenc.ValueType
	t  int64
	v  float64
	h  *histogram.Histogram
	fh *histogram.FloatHistogram
}

func toMixed(hs []histSample) []mixedSample {
	var out []mixedSample
	for _, s := range hs {
		if s.h != nil {
			out = append(out, mixedSample{vt: chunkenc.ValHistogram, t: s.t, h: s.h})
		} else {
			out = append(out, mixedSample{vt: chunkenc.ValFloatHistogram, t: s.t, fh: s.fh})
		}
	}
	return out
}

func TestHistogramRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		float bool
		n     int
		kind  Kind
	}{
		{"histogram/1", false, 1, KindHistogram},
		{"histogram/300", false, 300, KindHistogram},
		{"histogram/2500", false, 2500, KindHistogram},
		{"float/1", true, 1, KindFloatHistogram},
		{"float/300", true, 300, KindFloatHistogram},
		{"float/2500", true, 2500, KindFloatHistogram},
	} {
		t.Run(tc.name, func(t *testing.T) {
			samples := genHistSamples(tc.n, tc.float, 1000)
			var a Appender
			for _, s := range samples {
				orig := ""
				var err error
				if s.h != nil {
					orig = s.h.String()
					err = a.AppendHistogram(s.t, s.h)
					if s.h.String() != orig {
						t.Fatal("AppendHistogram changed its argument")
					}
				} else {
					err = a.AppendFloatHistogram(s.t, s.fh)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if err := a.Append(samples[tc.n-1].t+1, 1); !errors.Is(err, ErrKindChange) {
				t.Fatalf("float after histograms: %v", err)
			}
			want := toMixed(samples)
			checkMixed(t, a.Iterator(nil), want)
			blk := a.AppendBlock(nil)
			m, err := ReadMeta(blk)
			if err != nil {
				t.Fatal(err)
			}
			if m != (Meta{tc.kind, tc.n, samples[0].t, samples[tc.n-1].t}) {
				t.Fatalf("meta %+v", m)
			}
			it, err := NewIterator(blk)
			if err != nil {
				t.Fatal(err)
			}
			checkMixed(t, it, want)
			// Seek lands on histograms as on floats.
			if err := it.Reset(blk); err != nil {
				t.Fatal(err)
			}
			mid := samples[tc.n/2]
			if vt := it.Seek(mid.t - 1); vt == chunkenc.ValNone || it.AtT() != mid.t {
				t.Fatalf("Seek(%d) = %v at %d", mid.t-1, vt, it.AtT())
			}
			if vt := it.Seek(samples[tc.n-1].t + 1); vt != chunkenc.ValNone {
				t.Fatalf("Seek past end = %v", vt)
			}
			if a.Size() < len(blk)/2 {
				t.Errorf("Size %d for a %d byte block", a.Size(), len(blk))
			}
		})
	}
}

// TestAppenderIteratorSnapshot checks that an iterator taken from an
// Appender sees the samples of that moment, whatever is appended after.
func TestAppenderIteratorSnapshot(t *testing.T) {
	var a Appender
	var ts []int64
	var vs []float64
	for i := range 50 {
		ts = append(ts, int64(i)*1000)
		vs = append(vs, float64(i%7)/10)
		if err := a.Append(ts[i], vs[i]); err != nil {
			t.Fatal(err)
		}
	}
	it := a.Iterator(nil)
	for i := 50; i < 500; i++ {
		if err := a.Append(int64(i)*1000, float64(i)); err != nil {
			t.Fatal(err)
		}
	}
	checkSamples(t, it, ts, vs)

	var h Appender
	hs := tsdbutil.GenerateTestHistograms(30)
	for i, x := range hs[:10] {
		if err := h.AppendHistogram(int64(i), x); err != nil {
			t.Fatal(err)
		}
	}
	it = h.Iterator(it)
	for i, x := range hs[10:] {
		if err := h.AppendHistogram(int64(i+10), x); err != nil {
			t.Fatal(err)
		}
	}
	var want []mixedSample
	for i, x := range hs[:10] {
		want = append(want, mixedSample{vt: chunkenc.ValHistogram, t: int64(i), h: x})
	}
	checkMixed(t, it, want)
}

func TestSeekDoesNotAllocate(t *testing.T) {
	ts := make([]int64, 1000)
	vs := make([]float64, 1000)
	for i := range ts {
		ts[i] = int64(i) * 15000
		vs[i] = float64(i)
	}
	blk := mustEncode(t, ts, vs)
	var it Iterator
	if a := testing.AllocsPerRun(20, func() {
		if err := it.Reset(blk); err != nil {
			t.Fatal(err)
		}
		for s := int64(0); s < 1000*15000; s += 7 * 15000 {
			if it.Seek(s) != chunkenc.ValFloat {
				t.Fatalf("Seek(%d) found nothing", s)
			}
		}
	}); a != 0 {
		t.Errorf("Seek allocates %v times", a)
	}
}

// TestAppenderBounds checks MinTime, MaxTime and Count of float appenders
// across seals of the stream, of histogram appenders, and of their clones.
func TestAppenderBounds(t *testing.T) {
	check := func(name string, a *Appender, n int, mint, maxt int64) {
		t.Helper()
		for _, x := range []*Appender{a, a.Clone()} {
			if x.Count() != n || x.MinTime() != mint || x.MaxTime() != maxt {
				t.Errorf("%s: count %d min %d max %d, want %d %d %d", name, x.Count(), x.MinTime(), x.MaxTime(), n, mint, maxt)
			}
		}
	}
	a := NewAppender()
	for i := int64(0); i < 3*sealSamples+7; i++ {
		if err := a.Append(5000+i*15000, float64(i)); err != nil {
			t.Fatal(err)
		}
		if i == 0 || i == sealSamples-1 || i == sealSamples || i == 2*sealSamples+3 {
			check(fmt.Sprintf("float after %d", i+1), a, int(i+1), 5000, 5000+i*15000)
		}
	}
	check("float", a, 3*sealSamples+7, 5000, 5000+(3*sealSamples+6)*15000)
	h := NewAppender()
	for i, hs := range tsdbutil.GenerateTestHistograms(5) {
		if err := h.AppendHistogram(int64(i+3)*1000, hs); err != nil {
			t.Fatal(err)
		}
	}
	check("histogram", h, 5, 3000, 7000)
}

// TestAppenderDecimalStream drives every path of the decimal stream: plain
// deltas of each width, an exponent raise, a raw escape that turns the
// stream to XOR, and first values that start an XOR stream. Each case checks
// the samples come back bit for bit and the mode the stream ends in.
func TestAppenderDecimalStream(t *testing.T) {
	cases := []struct {
		name    string
		vs      []float64
		decimal bool // the stream is decimal after the last value
		exp     uint // and has this exponent
	}{
		{"unchanged", []float64{5, 5, 5}, true, 0},
		{"widths", []float64{1, 2, 40, 3000, 1e6, -1e6, 1e15, -1e15, 9007199254740992, -9007199254740992}, true, 0},
		{"two-decimals", []float64{12.34, 12.35, 11.99, 1e6 + 0.01, 0.07}, true, 2},
		{"raise", []float64{12.5, 12.57, 12.571, 13}, true, 3},
		{"raise-past-max", []float64{1.5, 1.0000000001, 2}, false, 0},
		{"raise-out-of-range", []float64{4e15, 1.5, 2}, false, 0},
		{"stale-marker", []float64{1.25, 2.5, staleNaN, 3.75, 3.75}, false, 0},
		{"negative-zero", []float64{1, math.Copysign(0, -1), 0}, false, 0},
		{"specials", []float64{0, math.Inf(1), math.NaN(), 1}, false, 0},
		{"first-not-decimal", []float64{1.0 / 3, 0.5, 0.25}, false, 0},
		{"first-stale", []float64{staleNaN, 1, 2}, false, 0},
		{"first-too-many-decimals", []float64{0.0000000001, 1, 2}, false, 0},
		{"first-huge", []float64{1e300, 1, 2}, false, 0},
	}
	var it Iterator
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var a Appender
			ts := make([]int64, len(tc.vs))
			for i, v := range tc.vs {
				ts[i] = 1796014823533 + int64(i)*15000
				if err := a.Append(ts[i], v); err != nil {
					t.Fatal(err)
				}
			}
			checkSamples(t, a.Iterator(&it), ts, tc.vs)
			blk, err := Encode(nil, ts, tc.vs)
			if err != nil {
				t.Fatal(err)
			}
			if string(a.AppendBlock(nil)) != string(blk) {
				t.Fatal("AppendBlock differs from Encode")
			}
			if got := a.lead == leadDecimal; got != tc.decimal || got && uint(a.trail) != tc.exp {
				t.Errorf("stream ends decimal=%v exponent %d, want decimal=%v exponent %d", got, a.trail, tc.decimal, tc.exp)
			}
		})
	}
}

// TestAppenderStreamMixed round-trips random decimal streams through the
// stream decoder, whose common sample takes both codes from one load and
// carries the value's integer from one sample to the next: timestamps whose
// step changes by nothing, a little, a lot or hugely (each width of the
// timestamp code); deltas of each width of the decimal code; exponents 0 to
// maxStreamExp with raises (after which the integer is computed again);
// integers around 2^51, just below 2^52 (where m / 10^e * 10^e can round to
// another integer, so that the writer takes another exponent or XOR) and up
// to 2^53; and a value that is no decimal, which escapes to XOR for the
// rest. Lengths run from a few samples (all in the stream) past a seal. Each
// is read whole, and up to a time inside the stream.
func TestAppenderStreamMixed(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	pick := func(xs ...int64) int64 { return xs[rng.IntN(len(xs))] }
	var it Iterator
	for seq := range 400 {
		n := 2 + rng.IntN(sealSamples+40)
		e := uint(rng.IntN(maxStreamExp + 1))
		var m int64
		switch rng.IntN(4) {
		case 0:
			m = rng.Int64N(2_000_000) - 1_000_000
		case 1: // straddling +-2^51
			m = pick(1, -1) * (1<<51 + rng.Int64N(2_000_000) - 1_000_000)
		case 2: // just below 2^52, where m / 10^e * 10^e may round to m+1
			m = pick(1, -1) * (1<<52 - 1 - rng.Int64N(1<<40))
		default: // up to 2^53
			m = pick(1, -1) * (1<<53 - rng.Int64N(1<<30))
		}
		t0, step := int64(1796014823533), int64(15000)
		ts, vs := make([]int64, n), make([]float64, n)
		for i := range n {
			if i > 0 {
				switch rng.IntN(10) {
				case 0:
					step += rng.Int64N(31) - 15 // a few bits
				case 1:
					step += rng.Int64N(60001) - 30000 // 16 bits
				case 2:
					step += rng.Int64N(1 << 40) // 64 bits
				}
				step = max(step, 1)
				t0 += step
			}
			ts[i] = t0
			switch rng.IntN(12) {
			case 0, 1: // unchanged
			case 2:
				m += rng.Int64N(1<<12) - 1<<11
			case 3:
				m += rng.Int64N(1<<24) - 1<<23
			case 4:
				m += rng.Int64N(1<<40) - 1<<39
			default:
				m += rng.Int64N(64) - 32
			}
			m = min(max(m, -(1<<53)+1), 1<<53-1)
			if e < maxStreamExp && rng.IntN(60) == 0 {
				e++ // a value with one decimal more: the stream raises
				m = m*10 + 7
				m = min(max(m, -(1<<53)+1), 1<<53-1)
			}
			vs[i] = decimalValue(m, e)
			if rng.IntN(300) == 0 {
				vs[i] = 1.0 / 3 // no decimal: XOR from here
			}
		}
		var a Appender
		for i := range n {
			if err := a.Append(ts[i], vs[i]); err != nil {
				t.Fatalf("sequence %d sample %d: %v", seq, i, err)
			}
		}
		checkSamples(t, a.Iterator(&it), ts, vs)
		checkSamples(t, a.IteratorRange(&it, ts[0], ts[n-1]), ts, vs)
		if sealed := n - a.scount(); sealed < n {
			// A range that ends inside the stream, on a sample or
			// between two: the decoder stops before the first sample
			// after it.
			k := sealed + rng.IntN(n-sealed)
			maxt := ts[k]
			if k < n-1 {
				maxt += rng.Int64N(ts[k+1] - ts[k])
			}
			checkSamples(t, a.IteratorRange(&it, ts[0], maxt), ts[:k+1], vs[:k+1])
		}
		blk, err := Encode(nil, ts, vs)
		if err != nil {
			t.Fatal(err)
		}
		if string(a.AppendBlock(nil)) != string(blk) {
			t.Fatalf("sequence %d: AppendBlock differs from Encode", seq)
		}
	}
}

// TestStreamSampleFitsOneLoad: the widest stream sample the decoder reads
// from one load, a timestamp code and a decimal code neither of
// 64 bits, fits the 57 bits a load holds, with the codes as they are; and the
// timestamp code's first bucket is the single bit the decoder takes for an
// unchanged step.
func TestStreamSampleFitsOneLoad(t *testing.T) {
	if streamCode.prefixLen(0) != 1 || streamCode.width[0] != 0 {
		t.Errorf("timestamp bucket 0: %d-bit prefix, %d-bit payload; the decoder takes it as one bit", streamCode.prefixLen(0), streamCode.width[0])
	}
	var ts, dec uint
	for i := range int(streamCode.nb) {
		if w := uint(streamCode.width[i]); w < 64 {
			ts = max(ts, streamCode.prefixLen(i)+w)
		}
	}
	for b, w := range decWidth {
		if w < 64 {
			dec = max(dec, min(uint(b)+1, 4)+w)
		}
	}
	if ts+dec > 57 || ts != 3+16 || dec != 4+24 {
		t.Errorf("widest sample %d+%d bits, the stream decoder assumes 19+28 within 57", ts, dec)
	}
}

// TestAppenderDecimalStreamSize checks that values with two decimals, as
// exporters send CPU seconds, take the decimal stream's bytes and not XOR's.
// A random walk of up to ±10.00 per scrape takes a 15-bit delta; XOR takes
// about 50 bits for the same values.
func TestAppenderDecimalStreamSize(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var a Appender
	u := int64(rng.IntN(1_000_000))
	const n = 200 // below sealSamples: all in the stream
	for i := range n {
		u += int64(rng.IntN(2001) - 1000)
		if err := a.Append(int64(i)*15000, float64(u)/100); err != nil {
			t.Fatal(err)
		}
	}
	w := a.stream()
	bits := w.bits()
	// Each later sample: 1 bit of timestamp, at most 3+12 bits of value.
	if max := (n - 1) * (1 + 3 + 12); bits > max {
		t.Errorf("stream of %d two-decimal values takes %d bits, want at most %d", n, bits, max)
	}
}

// TestAppenderReset checks that Reset empties the Appender, lets go of its
// memory without touching what a Clone reads, and keeps the time it is given
// as MaxTime.
func TestAppenderReset(t *testing.T) {
	var a Appender
	for i := range int64(300) { // past a seal
		if err := a.Append(i*1000, float64(i)/4); err != nil {
			t.Fatal(err)
		}
	}
	c := a.Clone()
	a.Reset(299000)
	if a.Count() != 0 || a.MaxTime() != 299000 || a.Size() != (&Appender{}).Size() {
		t.Fatalf("after Reset: count %d, max time %d, size %d", a.Count(), a.MaxTime(), a.Size())
	}
	ts, vs := []int64{300000, 301000}, []float64{0.1, math.Inf(1)}
	for i := range ts {
		if err := a.Append(ts[i], vs[i]); err != nil {
			t.Fatal(err)
		}
	}
	checkSamples(t, a.Iterator(nil), ts, vs)
	var cts []int64
	var cvs []float64
	for i := range int64(300) {
		cts, cvs = append(cts, i*1000), append(cvs, float64(i)/4)
	}
	checkSamples(t, c.Iterator(nil), cts, cvs)
}

// panickyIterator is a chunkenc iterator whose histogram reads panic, as
// chunkenc's do on some malformed chunk bytes.
type panickyIterator struct{ chunkenc.Iterator }

func (panickyIterator) AtHistogram(*histogram.Histogram) (int64, *histogram.Histogram) {
	panic("malformed")
}

func (panickyIterator) AtFloatHistogram(*histogram.FloatHistogram) (int64, *histogram.FloatHistogram) {
	panic("malformed")
}

// TestAtHistogramPanic checks that a panic of a histogram read ends the
// iteration with an error wrapping ErrCorrupt and still gives the caller
// the last timestamp and a histogram: the one passed in, or a new one.
func TestAtHistogramPanic(t *testing.T) {
	at := func(t *testing.T, read func(*Iterator) (int64, bool)) {
		t.Helper()
		it := &Iterator{hit: panickyIterator{}, inHist: true, cur: chunkenc.ValHistogram, lastT: 42, pi: 1}
		ts, ok := read(it)
		if ts != 42 || !ok {
			t.Errorf("got t=%d, histogram given back %v; want 42, true", ts, ok)
		}
		if err := it.Err(); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Err() = %v, want ErrCorrupt", err)
		}
	}
	var h histogram.Histogram
	var fh histogram.FloatHistogram
	t.Run("histogram/reuse", func(t *testing.T) {
		at(t, func(it *Iterator) (int64, bool) { ts, got := it.AtHistogram(&h); return ts, got == &h })
	})
	t.Run("histogram/nil", func(t *testing.T) {
		at(t, func(it *Iterator) (int64, bool) { ts, got := it.AtHistogram(nil); return ts, got != nil })
	})
	t.Run("float/reuse", func(t *testing.T) {
		at(t, func(it *Iterator) (int64, bool) { ts, got := it.AtFloatHistogram(&fh); return ts, got == &fh })
	})
	t.Run("float/nil", func(t *testing.T) {
		at(t, func(it *Iterator) (int64, bool) { ts, got := it.AtFloatHistogram(nil); return ts, got != nil })
	})
}
