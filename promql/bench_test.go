package promql

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage"

	"github.com/shaledb/shale/internal/cputime"
	shalestorage "github.com/shaledb/shale/storage"
)

// benchEnd is the end of the benchmark data; every query ends here.
var benchEnd = time.Unix(1_700_000_000, 0).UTC()

const (
	benchInterval = time.Minute    // one sample per series per minute
	benchHistory  = 24 * time.Hour // the longest range queried
)

type benchSeries struct {
	lset  labels.Labels
	ref   storage.SeriesRef
	slope float64
}

// newBenchSeries returns n counters (http_requests_total, 10 jobs) and n
// classic-histogram bucket series (request_duration_seconds_bucket, n/10
// groups of 10 buckets).
func newBenchSeries(n int) []benchSeries {
	all := make([]benchSeries, 0, 2*n)
	for i := range n {
		all = append(all, benchSeries{
			lset:  labels.FromStrings("__name__", "http_requests_total", "job", "job-"+strconv.Itoa(i%10), "instance", "i-"+strconv.Itoa(i/10)),
			slope: float64(1 + i%7),
		})
	}
	bounds := []string{"0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "+Inf"}
	for g := range n / len(bounds) {
		for bi, le := range bounds {
			all = append(all, benchSeries{
				lset:  labels.FromStrings("__name__", "request_duration_seconds_bucket", "job", "job-"+strconv.Itoa(g%10), "instance", "i-"+strconv.Itoa(g), "le", le),
				slope: float64(1+g%5) * float64(bi+1),
			})
		}
	}
	return all
}

// benchSteps is the number of samples per series: 24 h at one per minute.
const benchSteps = int(benchHistory/benchInterval) + 1

func benchSample(s *benchSeries, step int) (int64, float64) {
	start := benchEnd.Add(-benchHistory)
	return start.Add(time.Duration(step) * benchInterval).UnixMilli(), s.slope * float64(step)
}

// loadBenchData appends 24 h of one-minute samples of newBenchSeries(n).
func loadBenchData(b *testing.B, db storage.Appendable, n int) {
	b.Helper()
	all := newBenchSeries(n)
	for step := range benchSteps {
		app := db.Appender(context.Background())
		for i := range all {
			s := &all[i]
			t, v := benchSample(s, step)
			ref, err := app.Append(s.ref, s.lset, t, v)
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

// remoteWriteBenchData sends the same samples as loadBenchData by remote
// write, an hour of samples for up to 1000 series per request.
func remoteWriteBenchData(b *testing.B, client *http.Client, url string, n int) {
	b.Helper()
	all := newBenchSeries(n)
	const window, perRequest = 60, 1000
	for from := 0; from < benchSteps; from += window {
		to := min(from+window, benchSteps)
		for lo := 0; lo < len(all); lo += perRequest {
			req := &prompb.WriteRequest{}
			for i := lo; i < min(lo+perRequest, len(all)); i++ {
				s := &all[i]
				ts := prompb.TimeSeries{}
				s.lset.Range(func(l labels.Label) {
					ts.Labels = append(ts.Labels, prompb.Label{Name: l.Name, Value: l.Value})
				})
				for step := from; step < to; step++ {
					t, v := benchSample(s, step)
					ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: t, Value: v})
				}
				req.Timeseries = append(req.Timeseries, ts)
			}
			remoteWrite(b, client, url, req)
		}
	}
}

// BenchmarkQueryRange measures dashboard-like range queries through the
// HTTP API (request parsing, engine, storage, JSON encoding): server=shale
// is this package over Shale's storage (samples flushed to sample blocks in
// an in-memory bucket, no block cache); server=prometheus is Debian's
// prometheus holding the same data (skipped when not installed). Each query asks for 240 points,
// as a Grafana panel would.
//
// Run with:
//
//	go test -run '^$' -bench BenchmarkQueryRange -benchtime 10x ./promql/ | tee bench.txt
//	benchstat -col /server bench.txt
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
			b.Run("server=shale", func(b *testing.B) {
				db := newTestStorage(b).(*shalestorage.DB)
				loadStart := time.Now()
				loadBenchData(b, db, n)
				// The samples go to sample blocks in the LSM, as the head
				// flush does every few minutes in a running server.
				if err := db.Flush(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.Logf("loaded %d series x %d samples in %s", 2*n, benchSteps, time.Since(loadStart).Round(time.Millisecond))
				ts := newTestServerOn(b, db, func(o *Options, _ *Components) { o.MaxSamples = 200_000_000 })
				benchRanges(b, queries, ts.srv.URL, ts.client, cputime.Process)
			})
			b.Run("server=prometheus", func(b *testing.B) {
				promURL, pid := startPrometheusPID(b)
				client := &http.Client{}
				b.Cleanup(client.CloseIdleConnections)
				loadStart := time.Now()
				remoteWriteBenchData(b, client, promURL+"/api/v1/write", n)
				b.Logf("remote-wrote %d series x %d samples in %s", 2*n, benchSteps, time.Since(loadStart).Round(time.Millisecond))
				benchRanges(b, queries, promURL, client, func() time.Duration { return pidCPU(pid) })
			})
		})
	}
}

// benchRanges runs every query over 1 h, 6 h and 24 h against the API at
// base; cpu returns the CPU time used so far by the server.
func benchRanges(b *testing.B, queries []struct{ name, expr string }, base string, client *http.Client, cpu func() time.Duration) {
	for _, rng := range []time.Duration{time.Hour, 6 * time.Hour, 24 * time.Hour} {
		b.Run("range="+strings.TrimSuffix(rng.String(), "0m0s"), func(b *testing.B) {
			step := rng / 240
			for _, q := range queries {
				b.Run("query="+q.name, func(b *testing.B) {
					body := url.Values{
						"query": {q.expr},
						"start": {strconv.FormatInt(benchEnd.Add(-rng).Unix(), 10)},
						"end":   {strconv.FormatInt(benchEnd.Unix(), 10)},
						"step":  {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
					}.Encode()
					var lat []time.Duration
					var bytes int64
					b.ReportAllocs()
					cpu0 := cpu()
					for b.Loop() {
						start := time.Now()
						n := benchPost(b, client, base, body)
						lat = append(lat, time.Since(start))
						bytes += n
					}
					used := cpu() - cpu0
					slices.Sort(lat)
					// CPU time of the server process per query: steadier than
					// latency on a shared machine. For server=shale it also
					// holds the in-process client.
					b.ReportMetric(used.Seconds()*1000/float64(len(lat)), "cpu-ms/op")
					b.ReportMetric(percentile(lat, 0.50).Seconds()*1000, "p50-ms")
					b.ReportMetric(percentile(lat, 0.99).Seconds()*1000, "p99-ms")
					b.ReportMetric(float64(bytes)/float64(len(lat)), "resp-bytes/op")
				})
			}
		})
	}
}

func benchPost(b *testing.B, client *http.Client, base, body string) int64 {
	req, err := http.NewRequest(http.MethodPost, base+"/api/v1/query_range", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := client.Do(req)
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

// pidCPU returns the user plus system CPU time of another process, from
// /proc (clock ticks of 10 ms).
func pidCPU(pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces; fields after it start past ')'.
	fields := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
