package storage

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"

	"github.com/shaledb/shale/gorilla"
)

// TestShortRangesCutBlocks: a query whose range covers a small part of its
// series' stored blocks keeps their samples in the range, decoded, instead
// of the blocks (rangeCutter), and answers exactly as before, over blocks of
// several flushes, samples written out of order over them, stale markers,
// the head beside the stored blocks and closed partitions; a range that
// covers much of a block, small blocks, and a query of few series keep the
// blocks.
func TestShortRangesCutBlocks(t *testing.T) {
	const (
		part = 2 * 3600 * 1000
		half = part / 2
		min5 = 5 * 60 * 1000
	)
	defer func(n int) { minCutSeries = n }(minCutSeries)
	minCutSeries = 1 // the test's few series
	opts := DefaultOptions()
	opts.WAL = false
	opts.Retention = 0
	opts.OutOfOrderWindow = part
	db, _ := openMemDB(t, opts)
	rng := rand.New(rand.NewPCG(5, 6))
	want := map[string][]tsample{}
	noisy := []labels.Labels{
		labels.FromStrings("__name__", "m", "s", "a"),
		labels.FromStrings("__name__", "m", "s", "b"),
	}
	flat := labels.FromStrings("__name__", "m", "s", "flat") // blocks of a few bytes
	// gappy has no sample in [gapFrom, gapTo] of its second block.
	gappy := labels.FromStrings("__name__", "m", "s", "gappy")
	const gapFrom, gapTo = part - 40*60*1000, part - 20*60*1000
	for _, l := range noisy {
		ss := seriesSamples(0, part-15000, 15000)
		for j := range ss {
			ss[j].v = rng.Float64() * 1e6 // 7-8 bytes a sample
			if j%97 == 96 {
				ss[j].v = math.Float64frombits(value.StaleNaN)
			}
		}
		want[l.String()] = ss
	}
	want[flat.String()] = seriesSamples(0, part-15000, 15000)
	var gs []tsample
	for _, s := range want[noisy[0].String()] {
		if s.t < gapFrom || s.t > gapTo {
			gs = append(gs, s)
		}
	}
	want[gappy.String()] = gs
	// burst has a sample a minute, then one a second in its last five
	// minutes: more samples in a [5m] at the end than its block's time
	// span suggests, which grow the decoded samples' slab.
	burst := labels.FromStrings("__name__", "m", "s", "burst")
	var bs []tsample
	for ts := int64(0); ts < part; {
		bs = append(bs, tsample{ts, rng.Float64() * 1e6})
		if ts < part-min5 {
			ts += 60_000
		} else {
			ts += 1000
		}
	}
	want[burst.String()] = bs
	all := append([]labels.Labels{flat, gappy, burst}, noisy...)
	// Two flushes, half the partition each.
	for h := range int64(2) {
		for _, l := range all {
			appendFloats(t, db, l, inRange(want[l.String()], h*half, (h+1)*half-1)...)
		}
		if err := db.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// Then samples between the stored ones in the last 20 minutes, out of
	// order: a third source, overlapping the second block (a small one:
	// small integers).
	for _, l := range noisy {
		var ooo []tsample
		for ts := int64(part - 20*60*1000 + 7000); ts < part; ts += 15000 {
			ooo = append(ooo, tsample{ts, float64(rng.IntN(1000))})
		}
		appendFloats(t, db, l, ooo...)
		want[l.String()] = mergeTSamples(want[l.String()], ooo)
	}
	last := int64(part - 15000)
	ranges := [][2]int64{
		{last - min5, last}, {last - min5 + 1, last - 1}, {last - min5 - 1, last + 1},
		{half - min5, half}, {half - 1, half + min5}, {half - min5/2, half + min5/2},
		{min5, 2 * min5}, {0, min5}, {-1, 0}, {last, last}, {last + 1, part},
		{last - 60*60*1000, last}, {0, part}, {gapFrom + 60_000, gapFrom + 6*60_000}, {gapFrom - min5, gapFrom + min5},
	}
	// sources counts, over a Select of [mint, maxt], the sources kept as
	// blocks, those of at least minCutBytes, and those cut to the range.
	sources := func(mint, maxt int64) (blocks, large, cut map[string]int) {
		t.Helper()
		set, err := db.selectSeries(context.Background(), mint, maxt, true, true, []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "m")})
		if err != nil {
			t.Fatal(err)
		}
		blocks, large, cut = map[string]int{}, map[string]int{}, map[string]int{}
		for _, s := range set {
			for _, seg := range s.segs {
				for _, src := range seg.srcs {
					switch {
					case src.Floats != nil:
						cut[s.lset.Get("s")]++
						for _, ts := range src.Floats.T {
							if ts < mint || ts > maxt {
								t.Fatalf("[%d, %d]: a cut block of %s holds a sample at %d", mint, maxt, s.lset, ts)
							}
						}
					case src.Block != nil:
						blocks[s.lset.Get("s")]++
						if len(src.Block) >= minCutBytes {
							large[s.lset.Get("s")]++
						}
					}
				}
			}
		}
		return blocks, large, cut
	}
	for _, when := range []string{"open", "closed"} {
		if when == "closed" {
			if err := db.flushHead(context.Background(), closeAll); err != nil {
				t.Fatal(err)
			}
		}
		for _, r := range ranges {
			checkQuery(t, when, db, r[0], r[1], want)
		}
		// [5m] at the end: the noisy series' second blocks cut, the flat
		// one's kept.
		blocks, large, cut := sources(last-min5, last)
		for _, s := range []string{"a", "b", "burst"} {
			if cut[s] == 0 || large[s] != 0 {
				t.Errorf("%s: [5m] of series %s kept %d large blocks and cut %d, want the large ones cut", when, s, large[s], cut[s])
			}
		}
		if cut["flat"] != 0 || blocks["flat"] != 1 {
			t.Errorf("%s: [5m] of the flat series kept %d blocks and cut %d, want its block kept", when, blocks["flat"], cut["flat"])
		}
		// Minutes of a block's time span where it holds no sample: no
		// source at all.
		if blocks, _, cut := sources(gapFrom+60_000, gapFrom+6*60_000); blocks["gappy"]+cut["gappy"] != 0 {
			t.Errorf("%s: minutes in the gap of series gappy kept %d blocks and cut %d, want none", when, blocks["gappy"], cut["gappy"])
		}
		// A query of fewer series than minCutSeries keeps them all.
		minCutSeries = len(all) + 1
		if blocks, _, cut := sources(last-min5, last); len(cut) != 0 || blocks["a"] == 0 {
			t.Errorf("%s: [5m] of fewer series than the least cut cut %v, want none", when, cut)
		}
		minCutSeries = 1
		// An hour of a one-hour block is all of it: kept.
		if _, large, cut := sources(half, last); cut["a"] != 0 || large["a"] == 0 {
			t.Errorf("%s: the second hour of series a kept %d large blocks and cut %d, want them kept", when, large["a"], cut["a"])
		}
	}
}

// mergeTSamples returns the samples of a and b in time order (b's win on
// equal times).
func mergeTSamples(a, b []tsample) []tsample {
	out := make([]tsample, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i].t < b[j].t):
			out = append(out, a[i])
			i++
		case i == len(a) || b[j].t < a[i].t:
			out = append(out, b[j])
			j++
		default:
			out = append(out, b[j])
			i, j = i+1, j+1
		}
	}
	return out
}

// TestCutKeepsBadBlocks: a block whose header reads but whose samples do not
// decode is kept as it is, for the query's iterator to report, not cut or
// dropped; a block of histograms is kept too.
func TestCutKeepsBadBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	ts, vs := make([]int64, 480), make([]float64, 480)
	for i := range ts {
		ts[i], vs[i] = int64(i)*15000, rng.Float64()*1e6
	}
	good, err := gorilla.Encode(nil, ts, vs)
	if err != nil {
		t.Fatal(err)
	}
	c := rangeCutter{mint: ts[470], maxt: ts[479]}
	if src, ok := c.source(good); !ok || src.Floats == nil || len(src.Floats.T) != 10 {
		t.Fatalf("a good block: %+v %v, want its last 10 samples", src, ok)
	}
	bad := append([]byte(nil), good[:len(good)*3/4]...)
	if _, err := gorilla.ReadMeta(bad); err != nil {
		t.Fatalf("the truncated block's header: %v", err)
	}
	if src, ok := c.source(bad); !ok || src.Floats != nil || len(src.Block) != len(bad) {
		t.Fatalf("a block that does not decode: %+v %v, want it kept", src, ok)
	}
}
