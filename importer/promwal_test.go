package importer_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/tsdbutil"
	"github.com/prometheus/prometheus/util/compression"

	"github.com/shaledb/shale/importer"
	"github.com/shaledb/shale/internal/seriestest"
)

// writeCompactedPromDir runs the upstream TSDB through what a long-lived
// Prometheus goes through: samples over seven hours, in order and out of
// order (the WBL), a head compaction into blocks (which truncates the WAL
// behind a checkpoint), series deleted both in the blocks (tombstone
// files) and in the head (WAL tombstone records), then more samples.
func writeCompactedPromDir(t *testing.T, dir string, walCompression compression.Type) {
	t.Helper()
	ctx := context.Background()
	const hour = int64(3600_000)
	opts := tsdb.DefaultOptions()
	opts.WALCompression = walCompression
	opts.WALSegmentSize = 32 << 10 // many segments, so that truncation checkpoints some
	opts.OutOfOrderTimeWindow = hour
	db, err := tsdb.Open(dir, slog.New(slog.DiscardHandler), nil, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if db != nil {
			db.Close()
		}
	}()
	// Many small commits: many records, so many segments.
	add := func(from, to, step int64) {
		app := db.Appender(ctx)
		for ts := from; ts < to; ts += step {
			if (ts-from)/step%5 == 4 {
				if err := app.Commit(); err != nil {
					t.Fatal(err)
				}
				app = db.Appender(ctx)
			}
			for i := range 8 {
				lset := labels.FromStrings("__name__", fmt.Sprintf("m%d", i%4), "i", fmt.Sprint(i))
				var err error
				if i == 3 {
					_, err = app.AppendHistogram(0, lset, ts, tsdbutil.GenerateTestHistogram(ts/step), nil)
				} else {
					_, err = app.Append(0, lset, ts, float64(ts/step*int64(i+1)))
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
	add(0, 7*hour, 15_000)
	if err := db.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	// Out of order: within the hour before the newest sample.
	add(7*hour-50*60_000+7_000, 7*hour-10*60_000, 60_000)
	del := func(mint, maxt int64, name string) {
		if err := db.Delete(ctx, mint, maxt, labels.MustNewMatcher(labels.MatchEqual, "__name__", name)); err != nil {
			t.Fatal(err)
		}
	}
	del(hour, 2*hour, "m1")          // in a block
	del(6*hour+60_000, 7*hour, "m2") // in the head
	del(3*hour, 6*hour+30_000, "m0") // in both
	add(7*hour, 8*hour, 30_000)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = nil
}

// TestImportPrometheusCompactedDir imports data directories with blocks,
// tombstones, a checkpointed WAL (uncompressed, snappy and zstd) and
// out-of-order samples, and finds exactly what the upstream reader reads.
func TestImportPrometheusCompactedDir(t *testing.T) {
	for _, c := range []compression.Type{compression.None, compression.Snappy, compression.Zstd} {
		t.Run("wal="+string(c), func(t *testing.T) {
			dir := t.TempDir()
			writeCompactedPromDir(t, dir, c)
			var blocks, tombstoned, checkpoints int
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if _, err := os.Stat(filepath.Join(dir, e.Name(), "meta.json")); err == nil {
					blocks++
					if st, err := os.Stat(filepath.Join(dir, e.Name(), "tombstones")); err == nil && st.Size() > 16 {
						tombstoned++
					}
				}
			}
			walEntries, err := os.ReadDir(filepath.Join(dir, "wal"))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range walEntries {
				if strings.HasPrefix(e.Name(), "checkpoint.") {
					checkpoints++
				}
			}
			if blocks < 2 || tombstoned == 0 || checkpoints == 0 {
				t.Fatalf("the directory has %d blocks, %d with tombstones, %d checkpoints: it tests less than it should", blocks, tombstoned, checkpoints)
			}
			if _, err := os.Stat(filepath.Join(dir, "wbl")); err != nil {
				t.Fatalf("no WBL: %v", err)
			}

			want := upstreamPoints(t, dir)
			src, err := importer.NewPromSource(dir, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			_, got := importInto(t, src)
			seriestest.Compare(t, want, got)
		})
	}
}
