// Package seriestest reads back the samples of a Prometheus querier and
// compares them bit for bit, for the tests of the import. Only tests
// import it.
package seriestest

import (
	"context"
	"math"
	"os"
	"testing"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// RealBlock is a Prometheus data directory of one block, written by a real
// Prometheus (3758 series, 1572314 float samples over 35 minutes).
const RealBlock = "/work/shared/testdata/prom-block-real"

// SkipWithoutRealBlock skips t when RealBlock is missing, or fails it
// when SHALE_REQUIRE_E2E=1.
func SkipWithoutRealBlock(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(RealBlock); err != nil {
		if os.Getenv("SHALE_REQUIRE_E2E") == "1" {
			t.Fatalf("%s: %v", RealBlock, err)
		}
		t.Skipf("%s is missing: %v", RealBlock, err)
	}
}

// Point is a sample as read back, with its float's bits.
type Point struct {
	T  int64
	V  uint64 // math.Float64bits
	H  *histogram.Histogram
	FH *histogram.FloatHistogram
}

// ReadAll reads every sample of q, keyed by the labels of its series.
func ReadAll(t testing.TB, q storage.Querier) map[string][]Point {
	t.Helper()
	out := map[string][]Point{}
	set := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchRegexp, "", ".*"))
	var it chunkenc.Iterator
	for set.Next() {
		s := set.At()
		key := s.Labels().String()
		it = s.Iterator(it)
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			var p Point
			switch vt {
			case chunkenc.ValFloat:
				var v float64
				p.T, v = it.At()
				p.V = math.Float64bits(v)
			case chunkenc.ValHistogram:
				p.T, p.H = it.AtHistogram(nil)
			case chunkenc.ValFloatHistogram:
				p.T, p.FH = it.AtFloatHistogram(nil)
			}
			out[key] = append(out[key], p)
		}
		if err := it.Err(); err != nil {
			t.Fatalf("read %s: %v", key, err)
		}
	}
	if err := set.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sameHistogram compares histograms as the storage must give them back:
// equal in every field but the counter-reset hint, which a reader may
// recompute across a chunk boundary.
func sameHistogram(a, b Point) bool {
	switch {
	case a.H != nil && b.H != nil:
		x, y := a.H.Copy(), b.H.Copy()
		x.CounterResetHint, y.CounterResetHint = 0, 0
		return x.Equals(y)
	case a.FH != nil && b.FH != nil:
		x, y := a.FH.Copy(), b.FH.Copy()
		x.CounterResetHint, y.CounterResetHint = 0, 0
		return x.Equals(y)
	case a.H != nil && b.FH != nil:
		return sameHistogram(Point{FH: a.H.ToFloat(nil)}, b)
	}
	return false
}

// Compare fails t unless got holds exactly want: the same series,
// timestamps and float bits (stale markers included), equal histograms.
func Compare(t testing.TB, want, got map[string][]Point) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("got %d series, want %d", len(got), len(want))
	}
	bad := 0
	for k, w := range want {
		g := got[k]
		if len(g) != len(w) {
			t.Errorf("%s: got %d samples, want %d", k, len(g), len(w))
			bad++
		} else {
			for i := range w {
				ok := g[i].T == w[i].T
				if w[i].H != nil || w[i].FH != nil {
					ok = ok && sameHistogram(w[i], g[i])
				} else {
					ok = ok && g[i].V == w[i].V && g[i].H == nil && g[i].FH == nil
				}
				if !ok {
					t.Errorf("%s sample %d: got t=%d v=%#x, want t=%d v=%#x", k, i, g[i].T, g[i].V, w[i].T, w[i].V)
					bad++
					break
				}
			}
		}
		if bad > 10 {
			t.Fatal("too many differences")
		}
	}
}
