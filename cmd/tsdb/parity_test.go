package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shaledb/shale/internal/e2e"
)

// requirePrometheus3 returns the path of the Prometheus 3.16 binary that
// `make peers` builds, skipping the test (failing it under
// SHALE_REQUIRE_E2E=1) when it is missing.
func requirePrometheus3(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs(*prometheus3)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		msg := fmt.Sprintf("%s not found; build it with `make peers`", bin)
		if os.Getenv(e2e.RequireEnv) == "1" {
			t.Fatalf("%s (%s=1)", msg, e2e.RequireEnv)
		}
		t.Skip(msg)
	}
	return bin
}

// apiAnswer is an API answer as both servers send it, decoded generically.
type apiAnswer struct {
	Status    string   `json:"status"`
	Data      any      `json:"data"`
	ErrorType string   `json:"errorType"`
	Error     string   `json:"error"`
	Warnings  []string `json:"warnings"`
	Infos     []string `json:"infos"`
}

// askBoth sends the same API request (a GET) to both servers and returns
// the answers.
func askBoth(t *testing.T, path string, params url.Values, urls ...string) []apiAnswer {
	t.Helper()
	out := make([]apiAnswer, len(urls))
	for i, base := range urls {
		resp, err := http.Get(base + path + "?" + params.Encode())
		if err != nil {
			t.Fatalf("%s%s: %v", base, path, err)
		}
		err = json.NewDecoder(resp.Body).Decode(&out[i])
		resp.Body.Close()
		if err != nil {
			t.Fatalf("decode %s%s: %v", base, path, err)
		}
	}
	return out
}

// TestPrometheus3RemoteWrite2Parity has Prometheus 3.16 scrape itself every
// second (float series, classic and native histograms, summaries) and send
// everything by remote write 2.0, with metadata, to Shale. Then the same
// PromQL, instant and range queries over counters, gauges and histograms with
// the functions and aggregations dashboards and rules use, must give the same
// data and annotations from both, as must series, label and metadata
// lookups: Shale answers from what it received what Prometheus answers from
// its own storage.
func TestPrometheus3RemoteWrite2Parity(t *testing.T) {
	skipEndToEnd(t)
	bin := requirePrometheus3(t)
	t.Parallel()
	s := startShale(t, "--storage.path="+t.TempDir())

	dir := t.TempDir()
	addr := "127.0.0.1:" + strconv.Itoa(e2e.FreePort(t))
	// One shard keeps the samples in order, so that once a sample has
	// arrived every earlier scrape has too.
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_native_histograms: true
  always_scrape_classic_histograms: true
scrape_configs:
  - job_name: prom
    scrape_protocols: [PrometheusProto, OpenMetricsText1.0.0, PrometheusText0.0.4]
    static_configs: [{targets: [%q]}]
remote_write:
  - url: %s/api/v1/write
    protobuf_message: io.prometheus.write.v2.Request
    send_native_histograms: true
    send_exemplars: true
    queue_config: {batch_send_deadline: 100ms, min_shards: 1, max_shards: 1}
`, addr, s.url)
	prom := e2e.StartProcess(t, exec.Command(bin,
		"--config.file="+writeFile(t, dir, "prometheus.yml", cfg),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--enable-feature=metadata-wal-records",
		"--log.level=warn"))
	waitReady(t, prom, "prometheus", addr)
	urls := []string{"http://" + addr, s.url}

	// 40 scrapes in Shale, then a time 2.5 s before the newest: every
	// scrape up to it has arrived whole.
	var newest float64
	e2e.Eventually(t, 2*time.Minute, func() bool {
		var v []vectorSample
		queryResult(t, s.url, "/api/v1/query", url.Values{"query": {"timestamp(up) and count_over_time(up[1m]) >= 40"}}, &v)
		if len(v) == 1 {
			newest, _ = strconv.ParseFloat(v[0].Value[1].(string), 64)
		}
		return len(v) == 1
	}, "40 scrapes of Prometheus in Shale")
	at := newest - 2.5
	ts := strconv.FormatFloat(at, 'f', 3, 64)

	var names []string
	getJSON(t, urls[0]+"/api/v1/label/__name__/values", &names)
	var counters, gauges, histograms []string
	for _, n := range names {
		switch {
		case strings.HasSuffix(n, "_bucket"):
			if base := strings.TrimSuffix(n, "_bucket"); slices.Contains(names, base) {
				histograms = append(histograms, base) // native and classic
			}
		case strings.HasSuffix(n, "_total"):
			counters = append(counters, n)
		case !strings.HasSuffix(n, "_sum") && !strings.HasSuffix(n, "_count"):
			gauges = append(gauges, n)
		}
	}
	if len(counters) < 10 || len(gauges) < 10 || len(histograms) == 0 {
		t.Fatalf("too few metrics to compare: %d counters, %d gauges, %d native histograms", len(counters), len(gauges), len(histograms))
	}
	var exprs []string
	add := func(forms []string, metrics []string) {
		for _, m := range metrics {
			for _, f := range forms {
				exprs = append(exprs, strings.ReplaceAll(f, "M", m))
			}
		}
	}
	add([]string{"M", "rate(M[20s])", "irate(M[20s])", "increase(M[20s])", "resets(M[20s])",
		"sum by (job) (rate(M[10s]))", "M offset 5s", "timestamp(M)", "changes(M[20s])", "deriv(M[20s])",
		"sum without (instance) (M)", "topk(2, M)", `count_values("v", M)`, "M > 0",
		"M @ " + strconv.FormatFloat(at-10, 'f', 3, 64)}, counters[:15])
	add([]string{"M", "avg_over_time(M[20s])", "max_over_time(M[20s])", "min_over_time(M[20s])",
		"quantile_over_time(0.9, M[20s])", "stddev_over_time(M[20s])", "last_over_time(M[20s])",
		"present_over_time(M[20s])", "delta(M[20s])", "predict_linear(M[20s], 60)", "abs(M) * 2",
		"clamp(M, 1, 10)", "sort_desc(M)", `label_replace(M, "x", "$1", "job", "(.*)")`, "M[10s]",
		"avg by (instance) (M)", "quantile(0.5, M)", "stddev(M)", "bottomk(1, M)"}, gauges[:15])
	add([]string{"M", "M[10s]", "rate(M[20s])", "histogram_quantile(0.9, rate(M[20s]))",
		"histogram_quantile(0.9, sum by (le) (rate(M_bucket[20s])))", "histogram_count(rate(M[20s]))",
		"histogram_sum(M)", "histogram_avg(rate(M[20s]))", "histogram_fraction(0, 0.1, rate(M[20s]))",
		"sum by (job) (rate(M[20s]))", "M_count"}, histograms)
	exprs = append(exprs, "up", "count(up)", "vector(1)", "scalar(up)", "absent(nonexistent)",
		"time()", `sum by (handler) (rate({__name__=~"prometheus_http.*_total"}[20s]))`)

	compared := 0
	for _, e := range exprs {
		for _, q := range []struct {
			path   string
			params url.Values
		}{
			{"/api/v1/query", url.Values{"query": {e}, "time": {ts}}},
			{"/api/v1/query_range", url.Values{"query": {e}, "start": {strconv.FormatFloat(at-15, 'f', 3, 64)}, "end": {ts}, "step": {"5"}}},
		} {
			a := askBoth(t, q.path, q.params, urls...)
			if !reflect.DeepEqual(a[0], a[1]) {
				pa, _ := json.Marshal(a[0])
				sa, _ := json.Marshal(a[1])
				t.Errorf("%s %s:\nPrometheus: %.600s\nShale:      %.600s", q.path, e, pa, sa)
			}
			compared++
		}
	}

	// Series, labels and metadata over a window in which no series began
	// or ended: Shale selects series for these by partition, Prometheus by
	// chunk (docs/http-api.md). The handlers this test's own requests
	// create in Prometheus after the window are left out by the matchers.
	window := url.Values{"start": {strconv.FormatFloat(at-30, 'f', 3, 64)}, "end": {ts}}
	with := func(kv ...string) url.Values {
		v := url.Values{}
		for k, vs := range window {
			v[k] = vs
		}
		for i := 0; i < len(kv); i += 2 {
			v.Add(kv[i], kv[i+1])
		}
		return v
	}
	const early = `handler=~"/-/ready|/metrics"`
	for _, q := range []struct {
		path   string
		params url.Values
	}{
		{"/api/v1/series", with("match[]", `{__name__=~"prometheus_http.*", `+early+`}`)},
		{"/api/v1/series", with("match[]", "up", "match[]", `{__name__=~"go_.*"}`)},
		{"/api/v1/labels", with("match[]", `{__name__=~"go_.*|up"}`)},
		{"/api/v1/label/__name__/values", with("match[]", `{__name__=~"go_.*"}`)},
		{"/api/v1/label/handler/values", with("match[]", `{__name__="prometheus_http_requests_total", `+early+`}`)},
		{"/api/v1/metadata", url.Values{"metric": {histograms[0]}}},
		{"/api/v1/metadata", url.Values{"metric": {counters[0]}}},
		{"/api/v1/metadata", url.Values{"metric": {gauges[0]}}},
	} {
		a := askBoth(t, q.path, q.params, urls...)
		if q.path == "/api/v1/series" {
			// In no particular order: Prometheus lists the series of its
			// head in the order it created them, Shale sorted by labels.
			for i := range a {
				if d, ok := a[i].Data.([]any); ok {
					slices.SortFunc(d, func(x, y any) int {
						bx, _ := json.Marshal(x)
						by, _ := json.Marshal(y)
						return strings.Compare(string(bx), string(by))
					})
				}
			}
		}
		if !reflect.DeepEqual(a[0], a[1]) {
			pa, _ := json.Marshal(a[0])
			sa, _ := json.Marshal(a[1])
			t.Errorf("%s %v:\nPrometheus: %.600s\nShale:      %.600s", q.path, q.params, pa, sa)
		}
		compared++
	}
	t.Logf("%d requests compared (%d counters, %d gauges, %d native histograms)", compared, len(counters), len(gauges), len(histograms))
}
