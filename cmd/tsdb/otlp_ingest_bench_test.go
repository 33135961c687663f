package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

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
	const (
		series    = 100_000
		perReq    = 2_000
		perMetric = 100
		senders   = 16
	)
	ctx := context.Background()
	lopts := lsm.DefaultOptions()
	lopts.WALFlushInterval = 10 * time.Millisecond // the local folder's default
	sopts := storage.DefaultOptions()
	sopts.Retention = 0
	db, err := openWriter(ctx, objstore.NewMemoryBucket(), "", sopts, lopts, nil, storage.Components{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	rw, err := remotewrite.NewHandler(ingestAppendable{db}, remotewrite.DefaultOptions(), remotewrite.Components{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	oh, err := rw.OTLP(remotewrite.DefaultOTLPOptions())
	if err != nil {
		b.Fatal(err)
	}

	// body returns request r (of series/perReq) at time t (ms).
	body := func(r int, t int64) []byte {
		md := pmetric.NewMetrics()
		rm := md.ResourceMetrics().AppendEmpty()
		rm.Resource().Attributes().PutStr("service.name", "bench")
		rm.Resource().Attributes().PutStr("service.instance.id", "i"+strconv.Itoa(r%50))
		ms := rm.ScopeMetrics().AppendEmpty().Metrics()
		for m := range perReq / perMetric {
			metric := ms.AppendEmpty()
			metric.SetName("bench.metric." + strconv.Itoa((r*perReq/perMetric+m)%500))
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
	post := func(body []byte) {
		req := httptest.NewRequest(http.MethodPost, remotewrite.OTLPPath, bytes.NewReader(body))
		req.Header.Set("Content-Type", remotewrite.ContentTypeOTLPProto)
		w := httptest.NewRecorder()
		oh.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	// round posts one point of every series at t, from senders goroutines,
	// and returns the process's CPU time while they post.
	round := func(t int64) time.Duration {
		bodies := make([][]byte, series/perReq)
		for r := range bodies {
			bodies[r] = body(r, t)
		}
		cpu0 := cputime.Process()
		b.StartTimer()
		var wg sync.WaitGroup
		for s := range senders {
			wg.Go(func() {
				for r := s; r < len(bodies); r += senders {
					post(bodies[r])
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		return cputime.Process() - cpu0
	}
	t := time.Now().Add(-time.Hour).UnixMilli()
	b.StopTimer()
	round(t) // create the series
	b.ResetTimer()
	b.StopTimer()
	var cpu time.Duration
	for range b.N {
		t += 15_000
		cpu += round(t)
	}
	samples := float64(series) * float64(b.N)
	b.ReportMetric(samples/b.Elapsed().Seconds(), "samples/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/samples, "cpu-ns/sample")
}
