package importer_test

import (
	"context"
	"log/slog"
	"math"
	"testing"

	"github.com/prometheus/prometheus/tsdb"

	"github.com/shaledb/shale/importer"
	"github.com/shaledb/shale/internal/seriestest"
)

// upstreamPoints reads a Prometheus data directory through the upstream
// reader.
func upstreamPoints(t testing.TB, dir string) map[string][]seriestest.Point {
	t.Helper()
	db, err := tsdb.OpenDBReadOnly(dir, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	blocks, err := db.Blocks()
	if err != nil {
		t.Fatal(err)
	}
	maxt := int64(math.MaxInt64)
	if len(blocks) > 0 && !hasWAL(dir) {
		maxt = blocks[len(blocks)-1].Meta().MaxTime - 1
	}
	q, err := db.Querier(math.MinInt64, maxt)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	return seriestest.ReadAll(t, q)
}

func TestImportPrometheusRealBlockBitExact(t *testing.T) {
	seriestest.SkipWithoutRealBlock(t)
	want := upstreamPoints(t, seriestest.RealBlock)
	s := openStore(t, t.TempDir(), testStorageOptions())
	defer s.stop()
	src, err := importer.NewPromSource(seriestest.RealBlock, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := importer.Run(context.Background(), src, importer.NewAppendableSink(appendable{s.db}, slog.New(slog.DiscardHandler)), importer.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", sum)
	if sum.Samples != 1572314 || sum.Series != 3758 || sum.Refused.Total() != 0 {
		t.Errorf("summary: %+v", sum)
	}
	q, err := s.db.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	got := seriestest.ReadAll(t, q)
	q.Close()
	seriestest.Compare(t, want, got)
}
