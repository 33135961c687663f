package importer_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	promstorage "github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/tsdbutil"

	"github.com/shaledb/shale/importer"
	"github.com/shaledb/shale/internal/seriestest"
)

// writePromDir writes a Prometheus data directory with the upstream TSDB:
// a block of [0, 2h) and a head (WAL) of [2h, 3h), each with floats
// (stale markers and ±Inf among them), integer, float and custom-bucket
// native histograms.
func writePromDir(t *testing.T, dir string) {
	t.Helper()
	ctx := context.Background()
	const hour = int64(3600_000)
	add := func(app promstorage.Appender, from, to int64) {
		for i := range 6 {
			lset := labels.FromStrings("__name__", fmt.Sprintf("m%d", i), "kind", []string{"float", "float", "hist", "fhist", "nhcb", "float"}[i])
			for j, ts := 0, from; ts < to; j, ts = j+1, ts+60_000 {
				var err error
				switch i {
				case 0:
					v := float64(j) * 1.1
					if j%17 == 16 {
						v = math.Float64frombits(value.StaleNaN)
					}
					_, err = app.Append(0, lset, ts, v)
				case 1:
					_, err = app.Append(0, lset, ts, []float64{math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 1e-310}[j%4])
				case 2:
					_, err = app.AppendHistogram(0, lset, ts, tsdbutil.GenerateTestHistogram(int64(j)), nil)
				case 3:
					_, err = app.AppendHistogram(0, lset, ts, nil, tsdbutil.GenerateTestFloatHistogram(int64(j)))
				case 4:
					_, err = app.AppendHistogram(0, lset, ts, tsdbutil.GenerateTestCustomBucketsHistogram(int64(j)), nil)
				case 5:
					_, err = app.Append(0, lset, ts, float64(ts))
				}
				if err != nil {
					t.Fatalf("append %s at %d: %v", lset, ts, err)
				}
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	w, err := tsdb.NewBlockWriter(slog.New(slog.DiscardHandler), dir, 2*hour)
	if err != nil {
		t.Fatal(err)
	}
	add(w.Appender(ctx), 0, 2*hour)
	if _, err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	w.Close()
	opts := tsdb.DefaultOptions()
	db, err := tsdb.Open(dir, slog.New(slog.DiscardHandler), nil, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	add(db.Appender(ctx), 2*hour, 3*hour)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestImportPrometheusDirHistogramsAndHead imports a data directory with a
// block and a head, floats and native histograms, and finds everything
// the upstream reader reads, bit for bit (histograms field by field).
func TestImportPrometheusDirHistogramsAndHead(t *testing.T) {
	dir := t.TempDir()
	writePromDir(t, dir)
	want := upstreamPoints(t, dir)
	if len(want) != 6 || len(want[`{__name__="m2", kind="hist"}`]) != 180 {
		t.Fatalf("the upstream reader gives %d series; m2 has %d samples", len(want), len(want[`{__name__="m2", kind="hist"}`]))
	}
	src, err := importer.NewPromSource(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	sum, got := importInto(t, src)
	seriestest.Compare(t, want, got)
	if sum.Samples != 3*180 || sum.Histograms != 3*180 || sum.MinT != 0 || sum.MaxT != 3*3600_000-60_000 {
		t.Errorf("summary: %+v", sum)
	}
}
