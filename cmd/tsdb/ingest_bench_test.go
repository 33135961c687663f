package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"

	"github.com/shaledb/shale/internal/cputime"
	"github.com/shaledb/shale/remotewrite"
	"github.com/shaledb/shale/storage"
	"github.com/shaledb/shale/storage/lsm"
	"github.com/shaledb/shale/storage/objstore"
)

// BenchmarkOTLPIngest measures the OTLP receiver over the real storage (an
// in-memory bucket, the WAL on): 100k series of cumulative sums, 2,000
// points a request (20 metrics of 100 points, three attributes a point),
// posted by 16 goroutines as a collector's exporters would, each iteration
// one point of every series. cpu-ns/sample is the whole process's CPU.
//
//	go test -run '^$' -bench BenchmarkOTLPIngest -benchtime 10x -count 6 ./cmd/tsdb
func BenchmarkOTLPIngest(b *testing.B) {
	const perMetric = 100
	rw := newIngestBench(b)
	oh, err := rw.OTLP(remotewrite.DefaultOTLPOptions())
	if err != nil {
		b.Fatal(err)
	}
	// body returns request r at time t (ms).
	body := func(r int, t int64) []byte {
		md := pmetric.NewMetrics()
		rm := md.ResourceMetrics().AppendEmpty()
		rm.Resource().Attributes().PutStr("service.name", "bench")
		rm.Resource().Attributes().PutStr("service.instance.id", "i"+strconv.Itoa(r%50))
		ms := rm.ScopeMetrics().AppendEmpty().Metrics()
		for m := range ingestBenchPerReq / perMetric {
			metric := ms.AppendEmpty()
			metric.SetName("bench.metric." + strconv.Itoa((r*ingestBenchPerReq/perMetric+m)%500))
			s := metric.SetEmptySum()
			s.SetIsMonotonic(true)
			s.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
			for i := range perMetric {
				dp := s.DataPoints().AppendEmpty()
				dp.SetTimestamp(pcommon.Timestamp(t * int64(time.Millisecond)))
				dp.SetDoubleValue(float64(t / 1000))
				dp.Attributes().PutStr("request", strconv.Itoa(r))
				dp.Attributes().PutStr("point", strconv.Itoa(i))
				dp.Attributes().PutStr("http.method", "GET")
			}
		}
		out, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalProto()
		if err != nil {
			b.Fatal(err)
		}
		return out
	}
	runIngestBench(b, body, func(body []byte) *http.Request {
		req := httptest.NewRequest(http.MethodPost, remotewrite.OTLPPath, bytes.NewReader(body))
		req.Header.Set("Content-Type", remotewrite.ContentTypeOTLPProto)
		return req
	}, oh)
}

// BenchmarkRemoteWriteIngest is BenchmarkOTLPIngest over remote write 1.0:
// the same 100k series, shaped as node_exporter's (a metric name, instance,
// job and up to two more labels), 2,000 samples a snappy-compressed request
// from 16 goroutines, as Prometheus' shards send them.
//
//	go test -run '^$' -bench BenchmarkRemoteWriteIngest -benchtime 10x -count 6 ./cmd/tsdb
func BenchmarkRemoteWriteIngest(b *testing.B) {
	rw := newIngestBench(b)
	modes := [...]string{"idle", "user", "system", "iowait", "irq", "softirq", "steal", "nice"}
	body := func(r int, t int64) []byte {
		req := prompb.WriteRequest{Timeseries: make([]prompb.TimeSeries, ingestBenchPerReq)}
		for i := range req.Timeseries {
			n := r*ingestBenchPerReq + i
			ls := []prompb.Label{{Name: "__name__", Value: "node_cpu_seconds_total"}}
			if n%4 == 0 {
				ls[0].Value = "node_metric_" + strconv.Itoa(n%500/4)
			} else {
				ls = append(ls, prompb.Label{Name: "cpu", Value: strconv.Itoa(n % 500 / 8)})
			}
			ls = append(ls, prompb.Label{Name: "instance", Value: "host-" + strconv.Itoa(n/500) + ":9100"},
				prompb.Label{Name: "job", Value: "node"})
			if n%4 != 0 {
				ls = append(ls, prompb.Label{Name: "mode", Value: modes[n%8]})
			}
			req.Timeseries[i] = prompb.TimeSeries{Labels: ls, Samples: []prompb.Sample{{Timestamp: t, Value: float64(t / 1000)}}}
		}
		raw, err := req.Marshal()
		if err != nil {
			b.Fatal(err)
		}
		return snappy.Encode(nil, raw)
	}
	runIngestBench(b, body, func(body []byte) *http.Request {
		req := httptest.NewRequest(http.MethodPost, "/api/v1/write", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/x-protobuf")
		req.Header.Set("Content-Encoding", "snappy")
		req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
		return req
	}, rw)
}

// The shape of the ingest benchmarks' load.
const (
	ingestBenchSeries  = 100_000
	ingestBenchPerReq  = 2_000
	ingestBenchSenders = 16
)

// newIngestBench opens the real storage over an in-memory bucket, the WAL
// on as by default, and returns a receiver over it.
func newIngestBench(b *testing.B) *remotewrite.Handler {
	ctx := context.Background()
	lopts := lsm.DefaultOptions()
	lopts.WALFlushInterval = 10 * time.Millisecond // the local folder's default
	sopts := storage.DefaultOptions()
	sopts.Retention = 0
	db, err := openWriter(ctx, objstore.NewMemoryBucket(), "", sopts, lopts, nil, storage.Components{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	rw, err := remotewrite.NewHandler(ingestAppendable{db}, remotewrite.DefaultOptions(), remotewrite.Components{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	return rw
}

// runIngestBench posts, each iteration, one sample of every series at the
// next time (15 s on), request r of a round being body(r, t), from
// ingestBenchSenders goroutines; the first round, which creates the series,
// is not measured. The bodies are built before the timer starts, so that
// neither their building nor its garbage falls in the measurement.
// cpu-ns/sample is the process's CPU while they post.
func runIngestBench(b *testing.B, body func(r int, t int64) []byte, newReq func([]byte) *http.Request, h http.Handler) {
	post := func(body []byte) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, newReq(body))
		if w.Code/100 != 2 {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	round := func(bodies [][]byte) time.Duration {
		cpu0 := cputime.Process()
		b.StartTimer()
		var wg sync.WaitGroup
		for s := range ingestBenchSenders {
			wg.Go(func() {
				for r := s; r < len(bodies); r += ingestBenchSenders {
					post(bodies[r])
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		return cputime.Process() - cpu0
	}
	b.StopTimer()
	rounds := make([][][]byte, b.N+1)
	t := time.Now().Add(-time.Hour).UnixMilli()
	for i := range rounds {
		rounds[i] = make([][]byte, ingestBenchSeries/ingestBenchPerReq)
		for r := range rounds[i] {
			rounds[i][r] = body(r, t)
		}
		t += 15_000
	}
	round(rounds[0]) // create the series
	runtime.GC()
	b.ResetTimer()
	b.StopTimer()
	var cpu time.Duration
	for _, bodies := range rounds[1:] {
		cpu += round(bodies)
	}
	samples := float64(ingestBenchSeries) * float64(b.N)
	b.ReportMetric(samples/b.Elapsed().Seconds(), "samples/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/samples, "cpu-ns/sample")
}
