package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// prometheus3SelfConfig is the configuration of a Prometheus 3.16 at addr
// that scrapes itself every second (floats, classic and native histograms,
// exemplars) and sends it all by remote write 2.0 to the Shale at shaleURL.
// One shard keeps the samples in order, so that once a sample has arrived
// every earlier scrape has too; queue adds settings to its queue_config
// ("key: value, ...").
func prometheus3SelfConfig(addr, shaleURL, queue string) string {
	if queue != "" {
		queue = ", " + queue
	}
	return fmt.Sprintf(`global:
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
    queue_config: {batch_send_deadline: 100ms, min_shards: 1, max_shards: 1%s}
`, addr, shaleURL, queue)
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
	cfg := prometheus3SelfConfig(addr, s.url, "")
	prom := e2e.StartProcess(t, exec.Command(bin,
		"--config.file="+writeFile(t, dir, "prometheus.yml", cfg),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--enable-feature=metadata-wal-records",
		"--log.level=warn"))
	waitReady(t, prom, "prometheus", addr)
	// A second Prometheus holds nothing and reads everything from Shale
	// by remote read (streamed chunks): it must answer as the first does.
	readerAddr := "127.0.0.1:" + strconv.Itoa(e2e.FreePort(t))
	reader := e2e.StartProcess(t, exec.Command(bin,
		"--config.file="+writeFile(t, dir, "reader.yml", fmt.Sprintf("remote_read:\n  - url: %s/api/v1/read\n    read_recent: true\n", s.url)),
		"--storage.tsdb.path="+filepath.Join(dir, "reader"),
		"--web.listen-address="+readerAddr,
		"--log.level=warn"))
	waitReady(t, reader, "prometheus (remote read)", readerAddr)
	urls := []string{"http://" + addr, s.url, "http://" + readerAddr}

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
			if !reflect.DeepEqual(a[0], a[2]) {
				pa, _ := json.Marshal(a[0])
				ra, _ := json.Marshal(a[2])
				t.Errorf("%s %s:\nPrometheus:                      %.600s\nPrometheus reading from Shale: %.600s", q.path, e, pa, ra)
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
		a := askBoth(t, q.path, q.params, urls[:2]...)
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

// demoTarget is a scrape target, in OpenMetrics, whose exposition changes
// with each scrape in ways the PromQL language cares about: counters that
// reset (with a new created time), gauges that go negative or NaN,
// infinities, a series that ends (Prometheus then writes a staleness
// marker) and one that comes and goes, a classic histogram, a summary and
// an info metric to join on. Counters carry exemplars and created times.
type demoTarget struct {
	mu      sync.Mutex
	n       int     // scrapes served
	created float64 // seconds: half a second before the first scrape
	resetAt float64 // seconds: half a second before the latest reset of path /b
}

func (d *demoTarget) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	now := float64(time.Now().UnixMilli()) / 1000
	d.mu.Lock()
	d.n++
	n := d.n
	if n == 1 {
		d.created = now - 0.5
	}
	if n%15 == 0 || n == 1 {
		d.resetAt = now - 0.5
	}
	created, resetAt := d.created, d.resetAt
	d.mu.Unlock()
	f := float64(n)
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("# TYPE demo_requests counter")
	p(`demo_requests_total{path="/a",code="200"} %d # {trace_id="a%d"} %d %.3f`, 3*n, n, n%5, now)
	p(`demo_requests_created{path="/a",code="200"} %.3f`, created)
	p(`demo_requests_total{path="/a",code="500"} %d`, n/4)
	p(`demo_requests_created{path="/a",code="500"} %.3f`, created)
	p(`demo_requests_total{path="/b",code="200"} %d # {trace_id="b%d",span_id="s"} 0.25`, (n%15)*7, n) // resets every 15 scrapes
	p(`demo_requests_created{path="/b",code="200"} %.3f`, resetAt)
	p("# TYPE demo_temperature gauge")
	p(`demo_temperature{room="kitchen"} %g`, 20+5*math.Sin(f/3))
	p(`demo_temperature{room="cellar"} %g`, -3.5+f*0.25)
	if n%10 == 0 {
		p(`demo_temperature{room="attic"} NaN`)
	} else {
		p(`demo_temperature{room="attic"} %g`, 30-f*0.75)
	}
	p("# TYPE demo_edge gauge")
	p(`demo_edge{kind="inf"} +Inf`)
	p(`demo_edge{kind="ninf"} -Inf`)
	p(`demo_edge{kind="zero"} 0`)
	p(`demo_edge{kind="big"} %g`, 1e300*f)
	p(`demo_edge{kind="tiny"} %g`, 1e-300/f)
	p("# TYPE demo_flap gauge")
	if n >= 10 && n <= 25 {
		p(`demo_flap{id="ended"} %d`, n)
	}
	if n%8 < 4 {
		p(`demo_flap{id="blinking"} %d`, n*n)
	}
	p("# TYPE demo_latency_seconds histogram")
	bucket := 0
	for _, le := range []string{"0.1", "0.5", "1", "+Inf"} {
		bucket += n * len(le)
		p(`demo_latency_seconds_bucket{le=%q} %d`, le, bucket)
	}
	p(`demo_latency_seconds_sum %g`, f*1.25)
	p(`demo_latency_seconds_count %d`, bucket)
	p(`demo_latency_seconds_created %.3f`, created)
	p("# TYPE demo_rpc_seconds summary")
	p(`demo_rpc_seconds{quantile="0.5"} %g`, 0.01*f)
	p(`demo_rpc_seconds{quantile="0.99"} %g`, 0.1*f)
	p(`demo_rpc_seconds_sum %g`, 0.05*f*f)
	p(`demo_rpc_seconds_count %d`, n*10)
	p(`demo_rpc_seconds_created %.3f`, created)
	p("# TYPE demo_build info")
	p(`demo_build_info{version="1.2.3",revision="abc"} 1`)
	p("# EOF")
	w.Header().Set("Content-Type", "application/openmetrics-text; version=1.0.0; charset=utf-8")
	_, _ = w.Write([]byte(b.String()))
}

// parityExprs is the PromQL that TestPrometheus3QueryLanguageParity asks both
// servers: selectors and modifiers, every aggregation, binary operator and
// vector matching, the functions (experimental ones too), subqueries,
// duration expressions and the extended range selectors, over the demo
// target's series. at is a time, in seconds, inside the data.
func parityExprs(at float64) []string {
	const (
		c = "demo_requests_total"
		g = "demo_temperature"
	)
	ts := func(d float64) string { return strconv.FormatFloat(at+d, 'f', 3, 64) }
	exprs := []string{
		// Selectors and modifiers.
		c, c + `{code="200"}`, c + `{code!="200"}`, c + `{path=~"/a|/b"}`, c + `{path!~"/a"}`,
		`{__name__=~"demo_.*", code="500"}`, `{__name__=~"demo_(flap|edge)"}`, "demo_flap", "demo_edge",
		// A negative offset looks after at, which only 2.5 s after it is
		// known to have arrived in Shale whole: -2s stays within it (at
		// -5s Prometheus had a scrape the queue had not yet sent).
		c + "[10s]", "demo_flap[30s]", g + "[15s]", c + " offset 10s", c + " offset -2s", g + " offset 1m",
		"demo_flap @ " + ts(-20), "demo_flap @ " + ts(-5), c + " @ start()", g + " @ end()",
		c + "[10s] @ " + ts(-10), "demo_latency_seconds_bucket", "demo_rpc_seconds",
		// Arithmetic and comparison.
		c + " + 1", "2 * " + c, c + " / 0", "-" + c, c + " % 7", c + " ^ 0.5", g + " atan2 1",
		c + " > 10", c + " > bool 10", c + " == " + c, c + " != bool " + c, "1 + 2 * 3 ^ 2", "2 ^ 3 ^ 2",
		"demo_edge * 0", "demo_edge / demo_edge", "demo_edge - demo_edge", "-demo_edge", "demo_edge > bool 0",
		// Vector matching.
		c + " / on(path, code, instance, job) " + c, c + " / on(path) group_left sum by (path) (" + c + ")",
		c + " / ignoring(code) group_left sum without (code) (" + c + ")",
		c + " * on(instance) group_left(version) demo_build_info",
		"sum by (path) (" + c + ") / on(path) group_right sum by (path, code) (" + c + ")",
		c + " + on(instance) " + c, // many-to-many: an error from both
		c + " and " + g, c + " and on(instance) " + g, c + " or " + g, c + ` unless on(code) ` + c + `{code="500"}`,
		"demo_flap or " + g, "demo_flap unless " + g, g + " and on(room) demo_flap",
		// Aggregations.
		"topk(1, " + c + ")", "bottomk(2, " + g + ")", "topk by (path) (1, " + c + ")", "quantile(0.25, " + g + ")",
		"quantile(2, " + g + ")", `count_values("value", ` + c + ")", `count_values by (path) ("v", ` + c + ")",
		"limitk(2, " + c + ")", "limit_ratio(0.5, " + c + ")", "limit_ratio(-0.5, " + c + ")",
		"sum(demo_edge)", "avg(demo_edge)", "max(demo_edge)", "min(demo_edge)", "stddev(demo_edge)",
		// Functions of instant vectors.
		"round(" + g + ", 0.3)", "clamp_max(" + g + ", 10)", "clamp_min(" + g + ", 0)", "clamp(" + g + ", 0, 25)",
		"clamp(" + g + ", 25, 0)", "exp(" + g + " / 10)", "pi()", "scalar(sum(" + g + "))", "scalar(" + g + ")",
		"vector(time())", "time() - timestamp(" + c + ")", "sort(" + g + ")", "sort_desc(" + c + ")",
		`sort_by_label(` + c + `, "code", "path")`, `sort_by_label_desc(` + g + `, "room")`,
		`label_join(` + g + `, "where", "-", "room", "job")`, `label_replace(` + c + `, "p", "$1", "path", "/(.*)")`,
		`label_replace(` + c + `, "__name__", "renamed", "", "")`, "absent(nonexistent)", `absent(nonexistent{a="b", c=~"d"})`,
		"absent(" + g + ")", "absent_over_time(nonexistent[10s])", "absent_over_time(" + g + "[10s])",
		"histogram_quantile(0.5, rate(demo_latency_seconds_bucket[20s]))",
		"histogram_quantile(0.9, sum by (le) (rate(demo_latency_seconds_bucket[20s])))",
		"histogram_quantile(1.5, demo_latency_seconds_bucket)", "histogram_quantile(0.99, demo_latency_seconds_bucket)",
		`histogram_fraction(0, 0.5, demo_latency_seconds_bucket)`,
		"rate(demo_latency_seconds_sum[20s]) / rate(demo_latency_seconds_count[20s])",
		// Functions of range vectors.
		"predict_linear(" + g + "[20s], 30)", "double_exponential_smoothing(" + g + "[20s], 0.5, 0.5)",
		"quantile_over_time(0.75, " + g + "[20s])", "mad_over_time(" + g + "[20s])", "first_over_time(" + g + "[20s])",
		"ts_of_max_over_time(" + g + "[20s])", "ts_of_min_over_time(" + g + "[20s])", "ts_of_last_over_time(demo_flap[1m])",
		"count_over_time(demo_flap[1m])", "last_over_time(demo_flap[1m])", "present_over_time(demo_flap[1m])",
		"changes(demo_flap[1m])", "resets(" + c + "[1m])", "increase(" + c + "[1m])", "rate(" + c + "[1m])",
		"irate(" + c + "[1m])", "idelta(" + g + "[20s])", "delta(" + g + "[20s])", "deriv(" + g + "[20s])",
		"rate(" + c + "[1m] anchored)", "increase(" + c + "[20s] smoothed)", "delta(" + g + "[20s] anchored)",
		// Subqueries and duration expressions.
		"max_over_time(rate(" + c + "[10s])[30s:5s])", "avg_over_time(" + g + "[30s:])", "rate(" + c + "[20s:3s] offset 2s)",
		"deriv(sum(" + c + ")[30s:2s])", "min_over_time((" + g + " > 0)[40s:1s])", "sum_over_time(demo_flap[1m:7s])",
		c + " offset (5s + 5s)", "rate(" + c + "[2 * 10s])", "max_over_time(" + g + "[step()])", "rate(" + c + "[10s:step()])",
	}
	for _, f := range []string{"sum", "avg", "min", "max", "count", "group", "stddev", "stdvar"} {
		exprs = append(exprs, f+"("+g+")", f+" by (code) ("+c+")", f+" without (path) ("+c+")")
	}
	for _, f := range []string{"abs", "ceil", "floor", "round", "ln", "log2", "log10", "sqrt", "sgn", "sin", "cos",
		"tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "deg", "rad"} {
		exprs = append(exprs, f+"("+g+" / 30)")
	}
	for _, f := range []string{"year", "month", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "hour", "minute"} {
		exprs = append(exprs, f+"()", f+"(timestamp("+c+"))")
	}
	for _, f := range []string{"avg", "min", "max", "sum", "count", "stddev", "stdvar", "last", "present"} {
		exprs = append(exprs, f+"_over_time("+g+"[20s])", f+"_over_time(demo_edge[20s])")
	}
	return exprs
}

// TestPrometheus3QueryLanguageParity has Prometheus 3.16 scrape a target
// whose series change from scrape to scrape (see demoTarget) and send what
// it scrapes, staleness markers, exemplars and the zero samples of created
// times included, to two Shale servers, one by remote write 1.0 and one by
// 2.0. The whole query language is then asked of all three, instant
// queries at two times and range queries at three steps, and the answers
// must be the same: data, errors, warnings and infos; so must the
// exemplars. The engine is the same; what this tests is that Shale stores
// and returns exactly what Prometheus does, including what a series that
// ended or comes and goes leaves behind.
func TestPrometheus3QueryLanguageParity(t *testing.T) {
	skipEndToEnd(t)
	bin := requirePrometheus3(t)
	t.Parallel()
	const features = "--enable-feature=promql-experimental-functions,promql-duration-expr,promql-extended-range-selectors"
	s1 := startShale(t, "--storage.path="+t.TempDir(), features)
	s2 := startShale(t, "--storage.path="+t.TempDir(), features)
	// Prometheus stores a zero sample at each created time and keeps
	// exemplars only with these; Shale always does.
	const promFeatures = features + ",created-timestamp-zero-ingestion,exemplar-storage"
	target := httptest.NewServer(&demoTarget{})
	t.Cleanup(target.Close)

	dir := t.TempDir()
	addr := "127.0.0.1:" + strconv.Itoa(e2e.FreePort(t))
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
scrape_configs:
  - job_name: demo
    static_configs: [{targets: [%q]}]
remote_write:
  - url: %s/api/v1/write
    send_exemplars: true
    queue_config: {batch_send_deadline: 100ms, min_shards: 1, max_shards: 1}
  - url: %s/api/v1/write
    protobuf_message: io.prometheus.write.v2.Request
    send_exemplars: true
    queue_config: {batch_send_deadline: 100ms, min_shards: 1, max_shards: 1}
`, strings.TrimPrefix(target.URL, "http://"), s1.url, s2.url)
	prom := e2e.StartProcess(t, exec.Command(bin,
		"--config.file="+writeFile(t, dir, "prometheus.yml", cfg),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		promFeatures,
		"--log.level=warn"))
	waitReady(t, prom, "prometheus", addr)
	urls := []string{"http://" + addr, s1.url, s2.url}
	names := []string{"Prometheus", "Shale (remote write 1.0)", "Shale (remote write 2.0)"}

	// 45 scrapes in both Shale servers (the ended series ended at the
	// 25th), then a time 2.5 s before the older newest: with one shard a
	// queue, every scrape up to it has arrived whole.
	at := math.Inf(1)
	for _, u := range urls[1:] {
		var newest float64
		e2e.Eventually(t, 2*time.Minute, func() bool {
			var v []vectorSample
			queryResult(t, u, "/api/v1/query", url.Values{"query": {"timestamp(up) and count_over_time(up[1m]) >= 45"}}, &v)
			if len(v) == 1 {
				newest, _ = strconv.ParseFloat(v[0].Value[1].(string), 64)
			}
			return len(v) == 1
		}, "45 scrapes of the target in Shale at %s", u)
		at = min(at, newest-2.5)
	}

	type request struct {
		path   string
		params url.Values
	}
	var reqs []request
	for _, e := range parityExprs(at) {
		for _, d := range []float64{0, -23.7} {
			reqs = append(reqs, request{"/api/v1/query", url.Values{"query": {e}, "time": {strconv.FormatFloat(at+d, 'f', 3, 64)}}})
		}
		for _, r := range []struct{ start, step float64 }{{-40, 5}, {-40.5, 1}, {-39.9, 7}} {
			reqs = append(reqs, request{"/api/v1/query_range", url.Values{"query": {e},
				"start": {strconv.FormatFloat(at+r.start, 'f', 3, 64)}, "end": {strconv.FormatFloat(at, 'f', 3, 64)},
				"step": {strconv.FormatFloat(r.step, 'f', -1, 64)}}})
		}
	}
	// The series API lists a series only with samples in the range: the
	// ended series (scrapes 10 to 25, then a stale marker) in a range that
	// holds its end and in one after it.
	for _, start := range []float64{-40, -10, -3} {
		reqs = append(reqs, request{"/api/v1/series", url.Values{"match[]": {"demo_flap", `{__name__=~"demo_.*",kind!=""}`},
			"start": {strconv.FormatFloat(at+start, 'f', 3, 64)}, "end": {strconv.FormatFloat(at, 'f', 3, 64)}}})
	}
	for _, m := range []string{"demo_requests_total", `demo_requests_total{path="/b"}`, "demo_temperature"} {
		reqs = append(reqs, request{"/api/v1/query_exemplars", url.Values{"query": {m},
			"start": {strconv.FormatFloat(at-40, 'f', 3, 64)}, "end": {strconv.FormatFloat(at, 'f', 3, 64)}}})
	}
	differ, empty := 0, 0
	for _, q := range reqs {
		a := askBoth(t, q.path, q.params, urls...)
		if e := q.params.Get("query"); !strings.Contains(e, "sort") {
			for i := range a {
				sortVector(a[i])
			}
		}
		for i := 1; i < len(a); i++ {
			if !reflect.DeepEqual(a[0], a[i]) {
				differ++
				pa, _ := json.Marshal(a[0])
				sa, _ := json.Marshal(a[i])
				t.Errorf("%s %s:\nPrometheus: %.800s\n%s: %.800s", q.path, q.params.Get("query"), pa, names[i], sa)
			}
		}
		if a[0].Status == "success" && reflect.DeepEqual(a[0].Data, map[string]any{"resultType": "vector", "result": []any{}}) {
			empty++
		}
	}
	// The comparison means little if Prometheus answered nothing: most
	// answers must have data, a counter's created time must have given a
	// zero sample, and there must be exemplars.
	if empty > len(reqs)/4 {
		t.Errorf("%d of %d answers from Prometheus are empty vectors", empty, len(reqs))
	}
	var v []vectorSample
	queryResult(t, urls[0], "/api/v1/query", url.Values{"query": {`min_over_time(demo_requests_total{path="/a", code="200"}[10m])`},
		"time": {strconv.FormatFloat(at, 'f', 3, 64)}}, &v)
	if len(v) != 1 || v[0].Value[1] != "0" {
		t.Errorf("Prometheus has no zero sample at the created time: %v", v)
	}
	if a := askBoth(t, "/api/v1/query_exemplars", url.Values{"query": {"demo_requests_total"}, "start": {strconv.FormatFloat(at-40, 'f', 3, 64)},
		"end": {strconv.FormatFloat(at, 'f', 3, 64)}}, urls[0]); a[0].Status != "success" || reflect.ValueOf(a[0].Data).Len() != 2 {
		t.Errorf("Prometheus's exemplars: %+v", a[0])
	}
	t.Logf("%d requests compared, %d answers differ, %d empty vectors", len(reqs), differ, empty)
}

// sortVector puts an instant vector's samples in the order of their labels:
// without sort functions an instant query's order is the engine's, which
// for some aggregations follows a map's.
func sortVector(a apiAnswer) {
	d, ok := a.Data.(map[string]any)
	if !ok || d["resultType"] != "vector" {
		return
	}
	if r, ok := d["result"].([]any); ok {
		slices.SortFunc(r, func(x, y any) int {
			bx, _ := json.Marshal(x)
			by, _ := json.Marshal(y)
			return strings.Compare(string(bx), string(by))
		})
	}
}
