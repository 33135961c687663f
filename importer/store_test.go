package importer_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"testing"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	promstorage "github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/shaledb/shale/importer"
	"github.com/shaledb/shale/storage"
	"github.com/shaledb/shale/storage/lsm"
	"github.com/shaledb/shale/storage/objstore"
)

// realBlock is a Prometheus data directory of one block, written by a real
// Prometheus (3758 series, 1572314 float samples over 35 minutes).
const realBlock = "/work/shared/testdata/prom-block-real"

// store is Shale's storage opened as the import opens it alone.
type store struct {
	db   *storage.DB
	stop func()
}

func openStore(t testing.TB, dir string, opts storage.Options) *store {
	t.Helper()
	ctx := context.Background()
	b, err := objstore.NewFilesystemBucket(dir)
	if err != nil {
		t.Fatal(err)
	}
	lopts := lsm.DefaultOptions()
	lopts.WALFlushInterval = 10e6 // 10ms, as the server's default on a folder
	comps := storage.Components{Logger: slog.New(slog.DiscardHandler)}
	w, err := lsm.Open(ctx, b, "", storage.LSMOptions(opts, lopts), storage.LSMComponents(lsm.Components{Logger: comps.Logger}))
	if err != nil {
		t.Fatal(err)
	}
	db, err := storage.Open(ctx, w, opts, comps)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = db.Run(runCtx) }()
	s := &store{db: db}
	s.stop = func() {
		cancel()
		<-done
		if err := db.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		b.Close()
	}
	return s
}

func testStorageOptions() storage.Options {
	o := storage.DefaultOptions()
	o.Retention = 0
	return o
}

// point is a sample as read back, with its float's bits.
type point struct {
	t  int64
	v  uint64 // math.Float64bits
	h  *histogram.Histogram
	fh *histogram.FloatHistogram
}

// readAll reads every series of q over [mint, maxt], keyed by labels.
func readAll(t testing.TB, q promstorage.Querier) map[string][]point {
	t.Helper()
	out := map[string][]point{}
	set := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchRegexp, "", ".*"))
	var it chunkenc.Iterator
	for set.Next() {
		s := set.At()
		key := s.Labels().String()
		it = s.Iterator(it)
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			var p point
			switch vt {
			case chunkenc.ValFloat:
				var v float64
				p.t, v = it.At()
				p.v = math.Float64bits(v)
			case chunkenc.ValHistogram:
				p.t, p.h = it.AtHistogram(nil)
			case chunkenc.ValFloatHistogram:
				p.t, p.fh = it.AtFloatHistogram(nil)
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
func sameHistogram(a, b point) bool {
	switch {
	case a.h != nil && b.h != nil:
		x, y := a.h.Copy(), b.h.Copy()
		x.CounterResetHint, y.CounterResetHint = 0, 0
		return x.Equals(y)
	case a.fh != nil && b.fh != nil:
		x, y := a.fh.Copy(), b.fh.Copy()
		x.CounterResetHint, y.CounterResetHint = 0, 0
		return x.Equals(y)
	case a.h != nil && b.fh != nil:
		return sameHistogram(point{fh: a.h.ToFloat(nil)}, b)
	}
	return false
}

// comparePoints fails t unless got holds exactly want: the same series,
// timestamps and float bits (stale markers included), equal histograms.
func comparePoints(t testing.TB, want, got map[string][]point) {
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
				ok := g[i].t == w[i].t
				if w[i].h != nil || w[i].fh != nil {
					ok = ok && sameHistogram(w[i], g[i])
				} else {
					ok = ok && g[i].v == w[i].v && g[i].h == nil && g[i].fh == nil
				}
				if !ok {
					t.Errorf("%s sample %d: got t=%d v=%#x, want t=%d v=%#x", k, i, g[i].t, g[i].v, w[i].t, w[i].v)
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

func skipWithoutRealBlock(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(realBlock); errors.Is(err, os.ErrNotExist) {
		if os.Getenv("SHALE_REQUIRE_E2E") == "1" {
			t.Fatalf("%s is missing", realBlock)
		}
		t.Skipf("%s is missing", realBlock)
	}
}

func hasWAL(dir string) bool {
	_, err := os.Stat(dir + "/wal")
	return err == nil
}

// appendable is the adapter cmd/tsdb uses.
type appendable struct{ db *storage.DB }

func (a appendable) Appender(ctx context.Context) importer.Appender { return a.db.IngestAppender(ctx) }
