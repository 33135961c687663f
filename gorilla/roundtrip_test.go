package gorilla

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

var staleNaN = math.Float64frombits(0x7ff0000000000002)

// specialFloats are values whose bits must survive exactly.
var specialFloats = []float64{
	staleNaN, math.NaN(), math.Float64frombits(0x7ff8000000000001), math.Float64frombits(0xfff8000000000000),
	math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 0, math.MaxFloat64, -math.MaxFloat64,
	math.SmallestNonzeroFloat64, 1 << 53, 1<<53 + 2, -(1 << 53), 0.1, 1e-300, 1e300,
}

// series describes a generated test series.
type series struct {
	name string
	ts   []int64
	vs   []float64
}

func genTimestamps(rng *rand.Rand, n int, start, step, jitter int64) []int64 {
	ts := make([]int64, n)
	t := start
	for i := range ts {
		ts[i] = t
		d := step
		if jitter > 0 {
			d += rng.Int64N(2*jitter+1) - jitter
		}
		t += max(d, 1)
	}
	return ts
}

// genSeries returns a mix of shapes: constants, counters, gauges, decimals,
// random bits and special values.
func genSeries(rng *rand.Rand, n int) []series {
	var out []series
	add := func(name string, ts []int64, f func(i int, prev float64) float64) {
		vs := make([]float64, len(ts))
		prev := 0.0
		for i := range vs {
			vs[i] = f(i, prev)
			prev = vs[i]
		}
		out = append(out, series{name, ts, vs})
	}
	reg := genTimestamps(rng, n, 1796014823533, 15000, 0)
	jit := genTimestamps(rng, n, 1796014823533, 15000, 3)
	wild := genTimestamps(rng, n, -1<<40, 1<<30, 1<<29)
	add("const", reg, func(int, float64) float64 { return 42 })
	add("const-stale", reg, func(int, float64) float64 { return staleNaN })
	add("counter", jit, func(_ int, p float64) float64 { return p + float64(rng.IntN(1000)) })
	add("counter-big", jit, func(_ int, p float64) float64 { return p + float64(rng.IntN(1<<30)) })
	add("gauge-int", reg, func(int, float64) float64 { return float64(rng.IntN(200) - 100) })
	add("gauge-dec", jit, func(int, float64) float64 { return float64(rng.IntN(100000)) / 1000 })
	add("gauge-float", reg, func(int, float64) float64 { return rng.NormFloat64() })
	add("random-bits", wild, func(int, float64) float64 { return math.Float64frombits(rng.Uint64()) })
	add("specials", jit, func(int, float64) float64 { return specialFloats[rng.IntN(len(specialFloats))] })
	add("counter-stale", reg, func(i int, p float64) float64 {
		if i%50 == 49 {
			return staleNaN
		}
		return float64(i * 7)
	})
	add("time-seconds", jit, func(i int, _ float64) float64 { return float64(jit[i]) / 1000 })
	add("const-jit", jit, func(int, float64) float64 { return 1 })
	return out
}

func checkSamples(t *testing.T, it *Iterator, ts []int64, vs []float64) {
	t.Helper()
	for i := range ts {
		if vt := it.Next(); vt != chunkenc.ValFloat {
			t.Fatalf("sample %d: Next = %v, want float (err %v)", i, vt, it.Err())
		}
		gt, gv := it.At()
		if gt != ts[i] || math.Float64bits(gv) != math.Float64bits(vs[i]) {
			t.Fatalf("sample %d: got (%d, %v %x), want (%d, %v %x)", i, gt, gv, math.Float64bits(gv), ts[i], vs[i], math.Float64bits(vs[i]))
		}
	}
	if vt := it.Next(); vt != chunkenc.ValNone {
		t.Fatalf("Next after %d samples = %v, want none", len(ts), vt)
	}
	if err := it.Err(); err != nil {
		t.Fatalf("Err = %v", err)
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var it Iterator
	for _, n := range []int{1, 2, 3, 10, 120, 1000} {
		for _, s := range genSeries(rng, n) {
			blk, err := Encode(nil, s.ts, s.vs)
			if err != nil {
				t.Fatalf("%s n=%d: %v", s.name, n, err)
			}
			if err := it.Reset(blk); err != nil {
				t.Fatalf("%s n=%d: Reset: %v", s.name, n, err)
			}
			checkSamples(t, &it, s.ts, s.vs)
			m, err := ReadMeta(blk)
			if err != nil {
				t.Fatal(err)
			}
			if want := (Meta{KindFloat, n, s.ts[0], s.ts[n-1]}); m != want {
				t.Fatalf("%s: meta %+v, want %+v", s.name, m, want)
			}

			var a Appender
			for i := range s.ts {
				if err := a.Append(s.ts[i], s.vs[i]); err != nil {
					t.Fatal(err)
				}
			}
			checkSamples(t, a.Iterator(&it), s.ts, s.vs)
			blk2 := a.AppendBlock(nil)
			if string(blk2) != string(blk) {
				t.Fatalf("%s: AppendBlock differs from Encode", s.name)
			}
			if n == 1000 {
				t.Logf("%-14s %6.3f bytes/sample  appender %d bytes", s.name, float64(len(blk))/float64(n), a.Size())
			}
		}
	}
}

func TestEncodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		ts   []int64
		vs   []float64
		want error
	}{
		{"empty", nil, nil, nil},
		{"mismatch", []int64{1}, nil, nil},
		{"equal", []int64{1, 1}, []float64{1, 2}, ErrOutOfOrder},
		{"backwards", []int64{2, 1}, []float64{1, 2}, ErrOutOfOrder},
	} {
		_, err := Encode(nil, tc.ts, tc.vs)
		if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
	}
}

func newRand() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

// TestFormatExample pins the worked example of docs/format/gorilla.md.
func TestFormatExample(t *testing.T) {
	blk := mustEncode(t, []int64{1000, 16000, 31003, 46000, 61000, 76000}, []float64{0.5, 0.75, 1, staleNaN, 1.25, 1.5})
	const want = "01 06 d0 0f f8 c9 04 02 b0 ea 01 02 00 03 02 02 00 32 01 00 64 01 03 7f f0 00 00 00 00 00 02 70"
	if got := fmt.Sprintf("% x", blk); got != want {
		t.Errorf("example block\n got %s\nwant %s", got, want)
	}
}
