package gorilla

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSelectNth checks selectNth against a sort on shapes that trouble
// quickselects (all equal, few values, sorted, reversed, organ pipe), with
// its partitioning and with the sort it falls back to.
func TestSelectNth(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	shapes := map[string]func(i, n int) int64{
		"random":   func(int, int) int64 { return rng.Int64() },
		"few":      func(int, int) int64 { return rng.Int64N(3) - 1 },
		"equal":    func(int, int) int64 { return 15000 },
		"sorted":   func(i, _ int) int64 { return int64(i) },
		"reversed": func(i, n int) int64 { return int64(n - i) },
		"organ":    func(i, n int) int64 { return int64(min(i, n-i)) },
		"jittered": func(int, int) int64 { return 15000 + rng.Int64N(9) - 4 },
		"extremes": func(i, _ int) int64 { return []int64{-1 << 63, 1<<63 - 1, 0}[i%3] },
	}
	defer func(r int) { selectRounds = r }(selectRounds)
	for _, rounds := range []int{64, 1, 0} {
		selectRounds = rounds
		for name, f := range shapes {
			for _, n := range []int{1, 2, 3, 7, 64, 119, 479, 513, 2000} {
				d := make([]int64, n)
				for i := range d {
					d[i] = f(i, n)
				}
				sorted := slices.Sorted(slices.Values(d))
				for _, k := range []int{0, n / 3, n / 2, n - 1} {
					if got := selectNth(slices.Clone(d), k); got != sorted[k] {
						t.Fatalf("rounds %d, %s, n %d, k %d: %d, want %d", rounds, name, n, k, got, sorted[k])
					}
				}
			}
		}
	}
}

// TestPlanBase: the base step is the most common step when more than half
// of the steps are, and the grid's step for timestamps jittered at every
// scrape, where no step is.
func TestPlanBase(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	ts := make([]int64, 480)
	for i := range ts {
		ts[i] = 1796014823533 + int64(i)*15000 + rng.Int64N(5)
	}
	if p := planInts(ts); p.base != 15000 {
		t.Errorf("timestamps 0-4 ms off a 15 s grid: base %d, want 15000", p.base)
	}
	steps := make([]int64, 480)
	for i := 1; i < len(steps); i++ {
		d := int64(60000)
		if i%3 == 0 { // a third of the steps differ, each differently
			d = int64(i) * 7
		}
		steps[i] = steps[i-1] + d
	}
	if p := planInts(steps); p.base != 60000 {
		t.Errorf("two thirds of the steps 60000: base %d", p.base)
	}
}

// TestReadIntsWideResiduals round-trips integer sequences whose residuals
// against a base step mix a few bits with 50 to 64: the decoder takes two
// residuals from one 64-bit load where both fit in it, and must not where a
// residual (or a long one before it, read apart) leaves too few bits.
func TestReadIntsWideResiduals(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	wide := 0
	for n := range 400 {
		xs := make([]int64, 2+n%300)
		xs[0] = rng.Int64()
		for i := 1; i < len(xs); i++ {
			d := int64(15000) // the base step, most of the time
			switch r := rng.IntN(10); {
			case r < 2:
				d += rng.Int64N(16) - 8
			case r == 2:
				d += int64(rng.Uint64() >> (rng.UintN(15))) // 50 to 64 bits
			}
			xs[i] = xs[i-1] + d
		}
		p := planInts(xs)
		if p.mode == predBase && !p.sparse && p.code.width[p.code.nb-1] >= 50 {
			wide++
		}
		var w bitWriter
		writeInts(&w, xs, &p)
		bitsWritten := uint(w.bits())
		r := bitReader{data: padded(nil, w.finish()), end: bitsWritten}
		out := make([]int64, len(xs))
		out[0] = xs[0]
		if _, err := readInts(&r, out, &p); err != nil {
			t.Fatalf("sequence %d: %v", n, err)
		}
		if !slices.Equal(out, xs) {
			t.Fatalf("sequence %d (mode %d, code %v): decoded differently", n, p.mode, p.code)
		}
		if r.pos != bitsWritten {
			t.Fatalf("sequence %d: read %d bits of %d", n, r.pos, bitsWritten)
		}
	}
	if wide < 100 {
		t.Fatalf("only %d of 400 sequences had a base plan with residuals of 50 bits or more", wide)
	}
}
