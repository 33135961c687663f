package gorilla

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
)

// realBlockDir is the real Prometheus block, relative to this package: the
// shared test data lives next to the module root.
const realBlockDir = "../../shared/testdata/prom-block-real/01M8NF78WK30D3KCQ6QM04Q6JC"

type realSeries struct {
	labels string
	ts     []int64
	vs     []float64
	xor    [][]byte // the block's XOR chunks, payload only
	counts []int    // samples per XOR chunk
}

var (
	realOnce sync.Once
	realData []realSeries
	realErr  error
)

// loadReal reads every series of the real block, skipping the test when the
// data is absent.
func loadReal(tb testing.TB) []realSeries {
	tb.Helper()
	if _, err := os.Stat(realBlockDir); err != nil {
		tb.Skipf("real data not found at %s (relative to the gorilla package): %v", realBlockDir, err)
	}
	realOnce.Do(func() { realData, realErr = readRealBlock(realBlockDir) })
	if realErr != nil {
		tb.Fatalf("read %s: %v", realBlockDir, realErr)
	}
	return realData
}

func readRealBlock(dir string) ([]realSeries, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	b, err := tsdb.OpenBlock(nil, dir, chunkenc.NewPool(), nil)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	all := labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, ".+")
	cq, err := tsdb.NewBlockChunkQuerier(b, math.MinInt64, math.MaxInt64)
	if err != nil {
		return nil, err
	}
	defer cq.Close()
	css := cq.Select(context.Background(), true, nil, all)
	var out []realSeries
	var cit chunks.Iterator
	var it chunkenc.Iterator
	for css.Next() {
		s := realSeries{labels: css.At().Labels().String()}
		cit = css.At().Iterator(cit)
		for cit.Next() {
			m := cit.At()
			s.xor = append(s.xor, append([]byte(nil), m.Chunk.Bytes()...))
			s.counts = append(s.counts, m.Chunk.NumSamples())
			it = m.Chunk.Iterator(it)
			for it.Next() == chunkenc.ValFloat {
				t, v := it.At()
				s.ts = append(s.ts, t)
				s.vs = append(s.vs, v)
			}
			if err := it.Err(); err != nil {
				return nil, err
			}
		}
		if err := cit.Err(); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, css.Err()
}

// TestRealData round-trips every series of the real block, whole and cut
// like the XOR chunks, and checks the size goal against XOR.
func TestRealData(t *testing.T) {
	data := loadReal(t)
	var it Iterator
	var samples, xorBytes, wholeBytes, cutBytes int
	var blk []byte
	for _, s := range data {
		samples += len(s.ts)
		for _, c := range s.xor {
			xorBytes += len(c)
		}
		var err error
		blk, err = Encode(blk[:0], s.ts, s.vs)
		if err != nil {
			t.Fatalf("%s: %v", s.labels, err)
		}
		wholeBytes += len(blk)
		if err := it.Reset(blk); err != nil {
			t.Fatalf("%s: %v", s.labels, err)
		}
		checkSamples(t, &it, s.ts, s.vs)

		off := 0
		for _, n := range s.counts {
			blk, err = Encode(blk[:0], s.ts[off:off+n], s.vs[off:off+n])
			if err != nil {
				t.Fatalf("%s: %v", s.labels, err)
			}
			cutBytes += len(blk)
			if err := it.Reset(blk); err != nil {
				t.Fatalf("%s: %v", s.labels, err)
			}
			checkSamples(t, &it, s.ts[off:off+n], s.vs[off:off+n])
			off += n
		}
	}
	xor := float64(xorBytes) / float64(samples)
	whole := float64(wholeBytes) / float64(samples)
	cut := float64(cutBytes) / float64(samples)
	t.Logf("%d series, %d samples: XOR chunks %.3f B/sample; whole-series blocks %.3f (%.2fx); blocks cut as the XOR chunks %.3f (%.2fx)",
		len(data), samples, xor, whole, whole/xor, cut, cut/xor)
	if whole > 0.75*xor {
		t.Errorf("whole-series blocks take %.3f B/sample, more than 0.75x XOR's %.3f", whole, xor)
	}
}
