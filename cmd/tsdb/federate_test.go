package main

import (
	"fmt"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/prompb"

	"github.com/shaledb/shale/internal/e2e"
)

// TestFederationToPrometheus writes samples to Shale and has Debian's
// prometheus federate them from /federate with honor_labels, as a global
// Prometheus federates a lower one: it must end with the same series,
// labels, values and timestamps, and none of those the selector leaves out
// or that end with a stale marker. Prometheus runs with native histograms
// on, so it asks for protobuf, the only format that carries them.
func TestFederationToPrometheus(t *testing.T) {
	skipEndToEnd(t)
	prom := e2e.RequireBinary(t, "prometheus", "apt-get install prometheus")
	dir := t.TempDir()
	s := startShale(t, "--storage.path="+filepath.Join(dir, "shale"))

	ts := time.Now().Add(-5 * time.Second).UnixMilli()
	series := func(v float64, kv ...string) prompb.TimeSeries {
		var ls []prompb.Label
		for i := 0; i < len(kv); i += 2 {
			ls = append(ls, prompb.Label{Name: kv[i], Value: kv[i+1]})
		}
		return prompb.TimeSeries{Labels: ls, Samples: []prompb.Sample{{Timestamp: ts, Value: v}}}
	}
	gone := series(1, "__name__", "e2e_fed_gone", "instance", "a:1", "job", "api")
	gone.Samples = []prompb.Sample{{Timestamp: ts - 10_000, Value: 1}, {Timestamp: ts, Value: math.Float64frombits(value.StaleNaN)}}
	written := []prompb.TimeSeries{
		series(42.5, "__name__", "e2e_fed_requests_total", "instance", "a:1", "job", "api", "method", "GET"),
		series(7, "__name__", "e2e_fed_requests_total", "instance", "b:1", "job", "api", "method", "POST"),
		series(-3.25, "__name__", "e2e_fed_temperature_celsius", "instance", "x", "job", "sensors", "room", "kitchen"),
		// Without an instance label: the federating server must not add
		// its target's.
		series(1, "__name__", "e2e_fed_last_run", "job", "batch"),
	}
	// A native histogram: it travels in the protobuf format, which
	// Prometheus asks for with native histograms enabled.
	rpc := series(0, "__name__", "e2e_fed_rpc_seconds", "instance", "a:1", "job", "api")
	rpc.Samples = nil
	rpc.Histograms = []prompb.Histogram{prompb.FromIntHistogram(ts, &histogram.Histogram{
		Count: 5, Sum: 12.5, Schema: 1, ZeroThreshold: 0.001, ZeroCount: 1,
		PositiveSpans: []histogram.Span{{Offset: 0, Length: 2}}, PositiveBuckets: []int64{1, 2},
	})}
	all := append(append([]prompb.TimeSeries{gone, rpc}, written...),
		series(5, "__name__", "other_metric", "instance", "a:1", "job", "api")) // not selected
	if code, body, err := remoteWrite(s.url, all); err != nil || code/100 != 2 {
		t.Fatalf("remote write: %d %s %v", code, body, err)
	}

	promPort := e2e.FreePort(t)
	promURL := fmt.Sprintf("http://127.0.0.1:%d", promPort)
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
scrape_configs:
  - job_name: federate
    honor_labels: true
    metrics_path: /federate
    params:
      'match[]': ['{__name__=~"e2e_.*"}']
    static_configs: [{targets: ['%s']}]
`, strings.TrimPrefix(s.url, "http://"))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	e2e.StartProcess(t, exec.Command(prom, "--config.file="+cfgPath, fmt.Sprintf("--web.listen-address=127.0.0.1:%d", promPort),
		"--storage.tsdb.path="+filepath.Join(dir, "prom"), "--enable-feature=native-histograms"))
	e2e.WaitHTTP(t, 60*time.Second, promURL+"/-/ready")

	var up []vectorSample
	e2e.Eventually(t, 60*time.Second, func() bool {
		queryResult(t, promURL, "/api/v1/query", url.Values{"query": {`up{job="federate"}`}}, &up)
		return len(up) == 1 && up[0].Value[1] == "1"
	}, "Prometheus to scrape Shale's /federate successfully (up: %v)", up)

	// Each series as labels, value and timestamp in ms.
	key := func(m map[string]string, v string, ms int64) string {
		names := make([]string, 0, len(m))
		for n := range m {
			names = append(names, n)
		}
		sort.Strings(names)
		var b strings.Builder
		for _, n := range names {
			fmt.Fprintf(&b, "%s=%q,", n, m[n])
		}
		return fmt.Sprintf("{%s} %s @%d", b.String(), v, ms)
	}
	var want []string
	for _, w := range written {
		m := map[string]string{}
		for _, l := range w.Labels {
			m[l.Name] = l.Value
		}
		want = append(want, key(m, strconv.FormatFloat(w.Samples[0].Value, 'f', -1, 64), w.Samples[0].Timestamp))
	}
	sort.Strings(want)

	// A range selector shows every sample Prometheus stored: one per
	// series, since each scrape brings the same timestamp again.
	var got []string
	e2e.Eventually(t, 30*time.Second, func() bool {
		var res []matrixSeries
		queryResult(t, promURL, "/api/v1/query", url.Values{"query": {`{__name__=~"e2e_.*"}[1m]`}}, &res)
		got = got[:0]
		for _, r := range res {
			for _, v := range r.Values {
				sec, _ := v[0].(float64)
				got = append(got, key(r.Metric, fmt.Sprint(v[1]), int64(math.Round(sec*1000))))
			}
		}
		sort.Strings(got)
		return len(got) >= len(want)
	}, "Prometheus to hold the %d federated series", len(want))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("federated series in Prometheus:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for q, want := range map[string]string{
		"histogram_count(e2e_fed_rpc_seconds)":          "5",
		"histogram_sum(e2e_fed_rpc_seconds)":            "12.5",
		"timestamp(e2e_fed_rpc_seconds) * 1000":         strconv.FormatInt(ts, 10),
		`histogram_fraction(0, 1, e2e_fed_rpc_seconds)`: "0.4", // the zero bucket and (2^-0.5, 1]: 2 of 5
	} {
		var res []vectorSample
		queryResult(t, promURL, "/api/v1/query", url.Values{"query": {q}}, &res)
		if len(res) != 1 || fmt.Sprint(res[0].Value[1]) != want {
			t.Errorf("%s in Prometheus: %v, want one sample %s", q, res, want)
		}
	}
	var other []vectorSample
	queryResult(t, promURL, "/api/v1/query", url.Values{"query": {`{__name__=~".+",__name__!~"e2e_.*",job!="federate"}`}}, &other)
	if len(other) != 0 {
		t.Fatalf("series outside the match[] selector reached Prometheus: %v", other)
	}
	s.stop(t)
}
