package importer_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/importer"
	"github.com/shaledb/shale/internal/cputime"
	"github.com/shaledb/shale/internal/seriestest"
)

// BenchmarkImportPrometheus imports the real Prometheus block alone (the
// storage appender on a local-folder bucket), as tsdb import prometheus
// does, and reports samples/s of wall time and CPU time per sample (the
// machine is shared: CPU time is the steadier figure).
//
//	go test ./importer -run '^$' -bench ImportPrometheus -benchtime 3x -count 5
func BenchmarkImportPrometheus(b *testing.B) {
	seriestest.SkipWithoutRealBlock(b)
	for _, wal := range []bool{true, false} {
		name := "wal=on"
		if !wal {
			name = "wal=off"
		}
		b.Run(name, func(b *testing.B) {
			opts := testStorageOptions()
			opts.WAL = wal
			var (
				samples int
				wall    time.Duration
				cpu     time.Duration
			)
			for b.Loop() {
				b.StopTimer()
				s := openStore(b, b.TempDir(), opts)
				src, err := importer.NewPromSource(seriestest.RealBlock, slog.New(slog.DiscardHandler))
				if err != nil {
					b.Fatal(err)
				}
				c0 := cputime.Process()
				b.StartTimer()
				sum, err := importer.Run(context.Background(), src, importer.NewAppendableSink(appendable{s.db}, slog.New(slog.DiscardHandler)), importer.DefaultOptions())
				b.StopTimer()
				cpu += cputime.Process() - c0
				if err != nil {
					b.Fatal(err)
				}
				samples += sum.Samples
				wall += sum.Duration
				s.stop()
				b.StartTimer()
			}
			b.ReportMetric(float64(samples)/wall.Seconds(), "samples/s")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(samples), "cpu-ns/sample")
		})
	}
}

// BenchmarkDecodeVMLine decodes lines of VictoriaMetrics' export: eight
// labels and a few samples (a short export window) or 360 (an hour at 10 s).
//
//	go test ./importer -run '^$' -bench DecodeVMLine -count 6
func BenchmarkDecodeVMLine(b *testing.B) {
	for _, n := range []int{4, 360} {
		b.Run(fmt.Sprintf("samples=%d", n), func(b *testing.B) {
			var vals, ts []string
			for i := range n {
				vals = append(vals, strconv.FormatFloat(float64(i)*1.25, 'g', -1, 64))
				ts = append(ts, strconv.Itoa(1_700_000_000_000+i*10_000))
			}
			line := []byte(`{"metric":{"__name__":"node_cpu_seconds_total","cpu":"3","instance":"host-17:9100","job":"node",` +
				`"mode":"iowait","region":"eu-west","env":"prod","team":"infra"},"values":[` + strings.Join(vals, ",") +
				`],"timestamps":[` + strings.Join(ts, ",") + `]}`)
			var sb labels.ScratchBuilder
			b.SetBytes(int64(len(line)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := importer.DecodeVMLine(line, &sb); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
