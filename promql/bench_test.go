package promql

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/teststorage"
)

// benchEnd is the end of the benchmark data; every query ends here.
var benchEnd = time.Unix(1_700_000_000, 0).UTC()

const (
	benchInterval = time.Minute    // one sample per series per minute
	benchHistory  = 24 * time.Hour // the longest range queried
)

// loadBenchData appends 24 h of one-minute samples for n counters
// (http_requests_total, 10 jobs) and n classic-histogram bucket series
// (request_duration_seconds_bucket, n/10 groups of 10 buckets).
func loadBenchData(b *testing.B, db storage.Appendable, n int) {
	b.Helper()
	type series struct {
		lset  labels.Labels
		ref   storage.SeriesRef
		slope float64
	}
	all := make([]series, 0, 2*n)
	for i := range n {
		all = append(all, series{
			lset:  labels.FromStrings("__name__", "http_requests_total", "job", "job-"+strconv.Itoa(i%10), "instance", "i-"+strconv.Itoa(i/10)),
			slope: float64(1 + i%7),
		})
	}
	bounds := []string{"0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "+Inf"}
	for g := range n / len(bounds) {
		for bi, le := range bounds {
			all = append(all, series{
				lset:  labels.FromStrings("__name__", "request_duration_seconds_bucket", "job", "job-"+strconv.Itoa(g%10), "instance", "i-"+strconv.Itoa(g), "le", le),
				slope: float64(1+g%5) * float64(bi+1),
			})
		}
	}
	start := benchEnd.Add(-benchHistory)
	for ts := start; !ts.After(benchEnd); ts = ts.Add(benchInterval) {
		app := db.Appender(context.Background())
		step := float64(ts.Sub(start) / benchInterval)
		for i := range all {
			s := &all[i]
			ref, err := app.Append(s.ref, s.lset, ts.UnixMilli(), s.slope*step)
			if err != nil {
				b.Fatalf("append %s: %v", s.lset, err)
			}
			s.ref = ref
		}
		if err := app.Commit(); err != nil {
			b.Fatalf("commit: %v", err)
		}
	}
}

// BenchmarkQueryRange measures dashboard-like range queries through the
// HTTP API (request parsing, engine, storage, JSON encoding) over the
// upstream test storage, as a baseline of the engine and API overhead.
// Each query asks for about 240 points, as a Grafana panel would.
//
// Run with:
//
//	go test -run '^$' -bench BenchmarkQueryRange -benchtime 10x ./promql/
func BenchmarkQueryRange(b *testing.B) {
	queries := []struct{ name, expr string }{
		{"rate", `rate(http_requests_total{job="job-0"}[5m])`},
		{"sum_by", `sum by (job) (rate(http_requests_total[5m]))`},
		{"histogram_quantile", `histogram_quantile(0.99, sum by (le) (rate(request_duration_seconds_bucket[5m])))`},
		{"topk", `topk(5, rate(http_requests_total[5m]))`},
		{"count_by", `count by (job) (http_requests_total)`},
	}
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("series=%d", n), func(b *testing.B) {
			db := teststorage.New(b)
			loadStart := time.Now()
			loadBenchData(b, db, n)
			b.Logf("loaded %d series x %d samples in %s", 2*n, int(benchHistory/benchInterval)+1, time.Since(loadStart).Round(time.Millisecond))
			ts := newTestServerOn(b, db, func(o *Options, _ *Components) { o.MaxSamples = 200_000_000 })

			for _, rng := range []time.Duration{time.Hour, 6 * time.Hour, 24 * time.Hour} {
				b.Run("range="+strings.TrimSuffix(rng.String(), "0m0s"), func(b *testing.B) {
					step := rng / 240
					form := func(expr string) url.Values {
						return url.Values{
							"query": {expr},
							"start": {strconv.FormatInt(benchEnd.Add(-rng).Unix(), 10)},
							"end":   {strconv.FormatInt(benchEnd.Unix(), 10)},
							"step":  {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
						}
					}
					for _, q := range queries {
						b.Run("query="+q.name, func(b *testing.B) {
							body := form(q.expr).Encode()
							var lat []time.Duration
							var bytes int64
							b.ReportAllocs()
							cpu0 := processCPU()
							for b.Loop() {
								start := time.Now()
								n := benchPost(b, ts, body)
								lat = append(lat, time.Since(start))
								bytes += n
							}
							cpu := processCPU() - cpu0
							slices.Sort(lat)
							// CPU time of the whole process (client, server, engine,
							// GC) per query: steadier than latency on a shared machine.
							b.ReportMetric(cpu.Seconds()*1000/float64(len(lat)), "cpu-ms/op")
							b.ReportMetric(percentile(lat, 0.50).Seconds()*1000, "p50-ms")
							b.ReportMetric(percentile(lat, 0.99).Seconds()*1000, "p99-ms")
							b.ReportMetric(float64(bytes)/float64(len(lat)), "resp-bytes/op")
						})
					}
				})
			}
		})
	}
}

func benchPost(b *testing.B, ts *testServer, body string) int64 {
	req, err := http.NewRequest(http.MethodPost, ts.srv.URL+"/api/v1/query_range", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := ts.client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d, err %v", resp.StatusCode, err)
	}
	return n
}

// percentile returns the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// processCPU returns the user plus system CPU time used by this process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
