package importer_test

import (
	"context"
	"log/slog"
	"math"
	"testing"

	"github.com/prometheus/prometheus/tsdb"

	"github.com/shaledb/shale/importer"
)

// upstreamPoints reads a Prometheus data directory through the upstream
// reader.
func upstreamPoints(t testing.TB, dir string) map[string][]point {
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
	return readAll(t, q)
}

func TestImportPrometheusRealBlockBitExact(t *testing.T) {
	skipWithoutRealBlock(t)
	want := upstreamPoints(t, realBlock)
	s := openStore(t, t.TempDir(), testStorageOptions())
	defer s.stop()
	src, err := importer.NewPromSource(realBlock, slog.New(slog.DiscardHandler))
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
	got := readAll(t, q)
	q.Close()
	comparePoints(t, want, got)
}
