package main

import (
	"context"
	"encoding/xml"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/prometheus/prometheus/promql/parser"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ts0 is a timestamp in the range the generator encodes (2026).
const ts0 = int64(1_790_000_000_000)

func testSeries(t *testing.T, perTarget int) []seriesDef {
	t.Helper()
	return append(targetSeries(nodeFamilies(perTarget), 0, 0), targetSeries(nodeFamilies(perTarget), 1, 3)...)
}

// decodeRW decodes a remote write body with the upstream type R:
// prompb.WriteRequest (1.0) or writev2.Request (2.0).
func decodeRW[R any, P interface {
	*R
	Unmarshal([]byte) error
}](t *testing.T, body []byte) R {
	t.Helper()
	raw, err := snappy.Decode(nil, body)
	if err != nil {
		t.Fatalf("snappy: %v", err)
	}
	var req R
	if err := P(&req).Unmarshal(raw); err != nil {
		t.Fatalf("unmarshal %T: %v", req, err)
	}
	return req
}

func TestPayloadV1(t *testing.T) {
	for _, per := range []int{1, 3} {
		series := testSeries(t, 40)
		rng := rand.New(rand.NewPCG(1, 2))
		sh, err := newShard(1, per, series, rng)
		if err != nil {
			t.Fatal(err)
		}
		sh.values[0] = 0 // proto3 would omit a zero; the template must not
		sh.values[1] = math.Inf(-1)
		for step := range 2 {
			base := ts0 + int64(step*per)*15000
			first := append([]float64(nil), sh.values...)
			body, err := sh.payload(base, 15*time.Second, rng)
			if err != nil {
				t.Fatal(err)
			}
			req := decodeRW[prompb.WriteRequest](t, body)
			if len(req.Timeseries) != len(series) {
				t.Fatalf("per=%d: %d series decoded, want %d", per, len(req.Timeseries), len(series))
			}
			for i, ts := range req.Timeseries {
				if !labelsEqual(ts.Labels, series[i].labels) {
					t.Fatalf("series %d labels %v, want %v", i, ts.Labels, series[i].labels)
				}
				if len(ts.Samples) != per {
					t.Fatalf("series %d: %d samples, want %d", i, len(ts.Samples), per)
				}
				for j, s := range ts.Samples {
					if want := base + int64(j)*15000; s.Timestamp != want {
						t.Errorf("series %d sample %d: ts %d, want %d", i, j, s.Timestamp, want)
					}
				}
				if v := ts.Samples[0].Value; v != first[i] && !(math.IsNaN(v) && math.IsNaN(first[i])) {
					t.Errorf("series %d: first value %v, want %v", i, v, first[i])
				}
				if v := ts.Samples[per-1].Value; v != sh.values[i] {
					t.Errorf("series %d: last value %v, want the shard's current %v", i, v, sh.values[i])
				}
			}
			sh.advance(rng)
		}
	}
}

func labelsEqual(a, b []prompb.Label) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Value != b[i].Value {
			return false
		}
	}
	return true
}

func TestPayloadV2(t *testing.T) {
	series := testSeries(t, 120)
	rng := rand.New(rand.NewPCG(1, 2))
	sh, err := newShard(2, 2, series, rng)
	if err != nil {
		t.Fatal(err)
	}
	body, err := sh.payload(ts0, 10*time.Second, rng)
	if err != nil {
		t.Fatal(err)
	}
	req := decodeRW[writev2.Request](t, body)
	if len(req.Symbols) == 0 || req.Symbols[0] != "" {
		t.Fatalf("symbols must start with the empty string, got %q", req.Symbols[:min(3, len(req.Symbols))])
	}
	if len(req.Timeseries) != len(series) {
		t.Fatalf("%d series decoded, want %d", len(req.Timeseries), len(series))
	}
	var b labels.ScratchBuilder
	for i, ts := range req.Timeseries {
		got, err := ts.ToLabels(&b, req.Symbols)
		if err != nil {
			t.Fatal(err)
		}
		bl := labels.NewScratchBuilder(len(series[i].labels))
		for _, l := range series[i].labels {
			bl.Add(l.Name, l.Value)
		}
		bl.Sort()
		want := bl.Labels()
		if !labels.Equal(got, want) {
			t.Fatalf("series %d labels %s, want %s", i, got, want)
		}
		if len(ts.Samples) != 2 || ts.Samples[0].Timestamp != ts0 || ts.Samples[1].Timestamp != ts0+10000 {
			t.Fatalf("series %d samples %v", i, ts.Samples)
		}
		if ts.Samples[1].Value != sh.values[i] {
			t.Errorf("series %d: value %v, want %v", i, ts.Samples[1].Value, sh.values[i])
		}
		md, err := ts.ToMetadata(req.Symbols)
		if err != nil {
			t.Fatal(err)
		}
		if md.Help != series[i].help || md.Type == "" || md.Type == "unknown" {
			t.Errorf("series %d metadata %+v", i, md)
		}
	}
}

func TestPayloadRejectsOutOfRangeTimestamps(t *testing.T) {
	sh, err := newShard(1, 1, testSeries(t, 10), rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range []int64{0, minTS - 1, maxTS + 1} {
		if _, err := sh.payload(ts, time.Second, nil); err == nil {
			t.Errorf("payload(%d) succeeded", ts)
		}
	}
}

func TestNodeFamilies(t *testing.T) {
	for _, per := range []int{1, 37, 150, 500, 1000} {
		s := targetSeries(nodeFamilies(per), 7, 0)
		if len(s) != per {
			t.Errorf("per=%d: %d series", per, len(s))
		}
		seen := map[string]bool{}
		for _, sd := range s {
			var k strings.Builder
			for i, l := range sd.labels {
				if i > 0 && sd.labels[i-1].Name >= l.Name {
					t.Fatalf("labels not sorted: %v", sd.labels)
				}
				k.WriteString(l.Name + "=" + l.Value + ",")
			}
			if seen[k.String()] {
				t.Fatalf("per=%d: duplicate series %s", per, k.String())
			}
			seen[k.String()] = true
		}
	}
}

func TestChurnReplacesTargets(t *testing.T) {
	g, err := newGenerator(loadConfig{Series: 40, PerTarget: 10, Batch: 20, Version: 1, Interval: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got := g.series.Load(); got != 40 {
		t.Fatalf("series created %d, want 40", got)
	}
	g.cfg.Churn = 1
	rng := rand.New(rand.NewPCG(3, 3))
	st := g.shards[0]
	before := st.series[0].labels
	if err := g.churn(st, rng); err != nil {
		t.Fatal(err)
	}
	if labelsEqual(before, st.series[0].labels) {
		t.Fatal("churn with probability 1 kept the series")
	}
	if got := g.series.Load(); got != 60 {
		t.Fatalf("series created %d after one shard churned, want 60", got)
	}
	if st.gens[0] != 1 || st.gens[1] != 1 {
		t.Fatalf("generations %v, want [1 1]", st.gens)
	}
}

func TestStepGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newStepGate(2, 2)
		if !g.wait(0) || !g.wait(1) {
			t.Fatal("the first steps within the window must not block")
		}
		started := make(chan int, 1)
		go func() {
			if g.wait(2) { // needs every sender past step 0
				started <- 2
			}
		}()
		g.finish(0, 0)
		synctest.Wait()
		select {
		case <-started:
			t.Fatal("step 2 started while sender 1 had not finished step 0")
		default:
		}
		g.finish(1, 0)
		synctest.Wait()
		select {
		case <-started:
		default:
			t.Fatal("step 2 did not start once every sender finished step 0")
		}
		go func() { started <- btoi(g.wait(100)) }()
		synctest.Wait()
		g.close()
		if got := <-started; got != 0 {
			t.Fatal("wait on a closed gate returned true")
		}
	})
}

// checkingReceiver decodes every request and checks that each series'
// timestamps only grow and no sample arrives twice.
type checkingReceiver struct {
	t       *testing.T
	version int
	mu      sync.Mutex
	last    map[string]int64
	samples int
	bad     string
}

func (c *checkingReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	raw, err := snappy.Decode(nil, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	type ser struct {
		key string
		ts  []int64
	}
	var got []ser
	if c.version == 1 {
		var req prompb.WriteRequest
		if err := req.Unmarshal(raw); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, s := range req.Timeseries {
			var k strings.Builder
			for _, l := range s.Labels {
				k.WriteString(l.Name + "=" + l.Value + ",")
			}
			var tss []int64
			for _, smp := range s.Samples {
				tss = append(tss, smp.Timestamp)
			}
			got = append(got, ser{k.String(), tss})
		}
	} else {
		if ct := r.Header.Get("Content-Type"); ct != contentType(2) {
			http.Error(w, "content type "+ct, http.StatusUnsupportedMediaType)
			return
		}
		var req writev2.Request
		if err := req.Unmarshal(raw); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var b labels.ScratchBuilder
		for _, s := range req.Timeseries {
			l, err := s.ToLabels(&b, req.Symbols)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			var tss []int64
			for _, smp := range s.Samples {
				tss = append(tss, smp.Timestamp)
			}
			got = append(got, ser{l.String(), tss})
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range got {
		for _, ts := range s.ts {
			if prev, ok := c.last[s.key]; ok && ts <= prev && c.bad == "" {
				c.bad = s.key + " went back in time"
			}
			c.last[s.key] = ts
			c.samples++
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func TestGeneratorDeliversEverySampleInOrder(t *testing.T) {
	for _, tc := range []struct {
		version, per int
		churn        float64
	}{{1, 1, 0}, {2, 1, 0}, {1, 4, 0.5}, {2, 3, 0.5}} {
		rcv := &checkingReceiver{t: t, version: tc.version, last: map[string]int64{}}
		srv := httptest.NewServer(rcv)
		cfg := loadConfig{
			Series: 300, PerTarget: 50, Batch: 100, Version: tc.version, PerSeries: tc.per,
			Interval: 15 * time.Second, Start: ts0, End: ts0 + 59*15000, Churn: tc.churn, ChurnEvery: 5 * time.Minute,
			Duration: time.Minute, Concurrency: 2, Window: 1, Seed: 1, Name: "test",
		}
		g, err := newGenerator(cfg)
		if err != nil {
			t.Fatal(err)
		}
		res, err := g.run(context.Background(), srv.URL)
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		steps := 60 / tc.per * tc.per
		want := 300 * steps
		if res.Samples != int64(want) || rcv.samples != want || res.Failed != 0 {
			t.Errorf("%+v: sent %d, received %d samples, failed %d; want %d", tc, res.Samples, rcv.samples, res.Failed, want)
		}
		if rcv.bad != "" {
			t.Errorf("%+v: %s", tc, rcv.bad)
		}
		if res.LastTS != ts0+int64(steps-1)*15000 {
			t.Errorf("%+v: last ts %d, want %d", tc, res.LastTS, ts0+int64(steps-1)*15000)
		}
		if tc.churn > 0 && (res.SeriesCreated <= 300 || len(rcv.last) != int(res.SeriesCreated)) {
			t.Errorf("%+v: series created %d, received %d distinct", tc, res.SeriesCreated, len(rcv.last))
		}
		if tc.churn == 0 && len(rcv.last) != 300 {
			t.Errorf("%+v: %d distinct series received, want 300", tc, len(rcv.last))
		}
	}
}

func TestSendRetriesWhatASenderRetries(t *testing.T) {
	var calls int
	var mu sync.Mutex
	codes := []int{503, 429, 204}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		c := codes[min(calls, len(codes)-1)]
		calls++
		mu.Unlock()
		w.WriteHeader(c)
	}))
	defer srv.Close()
	ok, attempts, _ := send(srv.Client(), srv.URL, 1, []byte("x"))
	if !ok || attempts != 3 {
		t.Errorf("ok=%v attempts=%d, want true after 3", ok, attempts)
	}
	codes = []int{400}
	calls = 0
	ok, attempts, msg := send(srv.Client(), srv.URL, 1, []byte("x"))
	if ok || attempts != 1 || !strings.Contains(msg, "400") {
		t.Errorf("a 400 must not be retried: ok=%v attempts=%d msg=%q", ok, attempts, msg)
	}
}

func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, tc := range []struct{ p, want float64 }{{0, 1}, {10, 1}, {11, 2}, {50, 5}, {90, 9}, {99, 10}, {100, 10}} {
		if got := percentile(xs, tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if xs[0] != 5 {
		t.Error("percentile sorted its input")
	}
	if !math.IsNaN(percentile(nil, 50)) {
		t.Error("percentile of nothing must be NaN")
	}
	if got := percentile([]float64{7}, 99); got != 7 {
		t.Errorf("p99 of one value = %v", got)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{math.NaN(), 1, 5}, 3}} {
		if got := median(tc.xs); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
	if !math.IsNaN(median([]float64{math.NaN()})) {
		t.Error("median of only NaN must be NaN")
	}
}

func TestFmtNum(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{{math.NaN(), "—"}, {0, "0"}, {0.1234, "0.123"}, {1.5, "1.5"}, {12, "12"}, {123.4, "123"}, {9999, "9999"},
		{12345, "12.3k"}, {2_500_000, "2.5M"}, {1e6, "1M"}} {
		if got := fmtNum(tc.v); got != tc.want {
			t.Errorf("fmtNum(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
	if got := ratio(3, 2); got != "1.5x" {
		t.Errorf("ratio(3,2) = %q", got)
	}
	if got := ratio(1, 0); got != "—" {
		t.Errorf("ratio(1,0) = %q", got)
	}
}

// renderReport renders runs with reportTable and fails the test unless its
// first line is header. It returns the lines, and a function that returns
// the row of the figure label ("" when there is none).
func renderReport(t *testing.T, runs [][]*sysResult, header string) ([]string, func(label string) string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(reportTable(runs)), "\n")
	if lines[0] != header {
		t.Fatalf("header %q, want %q", lines[0], header)
	}
	return lines, func(label string) string {
		for _, l := range lines {
			if strings.HasPrefix(l, "| "+label+" |") {
				return l
			}
		}
		return ""
	}
}

// svgTokens returns the tokens of svg, failing the test unless it is
// well-formed XML.
func svgTokens(t *testing.T, svg string) []xml.Token {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	var out []xml.Token
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		out = append(out, xml.CopyToken(tok))
	}
}

func TestReportTable(t *testing.T) {
	nan := math.NaN()
	mk := func(name string, sps, obj float64) *sysResult {
		return &sysResult{Name: name, SamplesPerSec: sps, ObjOpsPerMin: obj, ObjOpsQueryMin: nan, RWP50: 1, RWP99: 2,
			CPUPerMSamples: nan, GenCPUPerM: nan, PeakRSS: nan, RSSPerSeries: nan, BytesPerSample: nan,
			BytesPerSampleNoWAL: nan, BytesPerSampleEnd: nan, DiskP50: nan, DiskP99: nan, WarmP50: nan, WarmP99: nan, ColdP50: nan, ColdP99: nan, ShutdownSec: nan,
			PerRange: map[string][2]float64{"1h": {1, 2}}}
	}
	runs := [][]*sysResult{
		{mk("shale", 100, 600), mk("prometheus", 50, nan), mk("victoria-metrics", 400, nan)},
		{mk("shale", 300, 700), mk("prometheus", 100, nan), mk("victoria-metrics", 200, nan)},
		{mk("shale", 200, 800), mk("prometheus", 200, nan), mk("victoria-metrics", 300, nan)},
	}
	lines, find := renderReport(t, runs, "| figure | unit | shale | prometheus | victoria-metrics | shale / prometheus | shale / victoria-metrics |")
	// Medians: shale 200, prometheus 100, victoria-metrics 300.
	if got, want := find("sustained ingest"), "| sustained ingest | samples/s | 200 | 100 | 300 | 2x | 0.667x |"; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got, want := find("object-store requests, ingest"), "| object-store requests, ingest | per min | 700 | — | — | — | — |"; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if find("stored bytes per sample") != "" {
		t.Error("a row with no figure for any system must be left out")
	}
	for _, l := range lines {
		if strings.Count(l, "|") != strings.Count(lines[0], "|") {
			t.Errorf("row with a different column count: %s", l)
		}
	}
	// OTLP peers are compared with shale-otlp, the others with shale.
	otlp := [][]*sysResult{{mk("shale", 100, nan), mk("shale-otlp", 60, nan), mk("victoria-metrics-otlp", 30, nan), mk("prometheus", 50, nan)}}
	_, find = renderReport(t, otlp, "| figure | unit | shale | shale-otlp | victoria-metrics-otlp | prometheus | shale-otlp / victoria-metrics-otlp | shale / prometheus |")
	if got, want := find("sustained ingest"), "| sustained ingest | samples/s | 100 | 60 | 30 | 50 | 2x | 2x |"; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if pq := perQueryTable(runs); !strings.Contains(pq, "| shale | 1h | 1 | 2 |") {
		t.Errorf("per-query table:\n%s", pq)
	}
}

func TestParseProc(t *testing.T) {
	stat := "1234 (tsdb (x) y) S 1 1234 1234 0 -1 4194560 9163 0 0 0 250 75 0 0 20 0 12 0 1000 1363845120 20000 18446744073709551615"
	got, err := parseProcStat(stat)
	if err != nil || got != 3.25 {
		t.Errorf("parseProcStat = %v, %v; want 3.25", got, err)
	}
	if _, err := parseProcStat("1234 (x) S 1 2"); err == nil {
		t.Error("short stat parsed")
	}
	status := "Name:\ttsdb\nVmPeak:\t 2000 kB\nVmHWM:\t  1500 kB\nVmRSS:\t  1200 kB\nThreads:\t9\n"
	rss, hwm, err := parseProcStatus(strings.NewReader(status))
	if err != nil || rss != 1200*1024 || hwm != 1500*1024 {
		t.Errorf("parseProcStatus = %d, %d, %v", rss, hwm, err)
	}
	// The real files of this process.
	if c, err := procCPUSeconds(os.Getpid()); err != nil || c < 0 {
		t.Errorf("procCPUSeconds(self) = %v, %v", c, err)
	}
	if rss, hwm, err := procMemory(os.Getpid()); err != nil || rss <= 0 || hwm < rss {
		t.Errorf("procMemory(self) = %d, %d, %v", rss, hwm, err)
	}
}

func TestSumMetric(t *testing.T) {
	text := `# HELP shale_objstore_operations_total Object store operations started.
# TYPE shale_objstore_operations_total counter
shale_objstore_operations_total{bucket="data",operation="get"} 10
shale_objstore_operations_total{bucket="data",operation="put"} 5.5
shale_objstore_operations_total_extra 100
shale_objstore_operations_totally{a="b"} 100
shale_objstore_operations_total 1
`
	got, ok := sumMetric(strings.NewReader(text), "shale_objstore_operations_total")
	if !ok || got != 16.5 {
		t.Errorf("sumMetric = %v, %v; want 16.5", got, ok)
	}
	if _, ok := sumMetric(strings.NewReader("other 1\n"), "shale_objstore_operations_total"); ok {
		t.Error("found a metric that is not there")
	}
}

func TestQuerySetParses(t *testing.T) {
	qs := querySet()
	if len(qs) != len(queryRanges)*len(dashboardExprs)+len(alertExprs) {
		t.Fatalf("%d queries", len(qs))
	}
	for _, q := range qs {
		if _, err := parser.NewParser(parser.Options{}).ParseExpr(q.Expr); err != nil {
			t.Errorf("%s: %v", q.Name, err)
		}
	}
	for _, tc := range []struct{ r, want time.Duration }{{time.Hour, 15 * time.Second}, {6 * time.Hour, 90 * time.Second}, {24 * time.Hour, 6 * time.Minute}} {
		if got := queryStep(tc.r, 15*time.Second); got != tc.want {
			t.Errorf("queryStep(%s) = %s, want %s", tc.r, got, tc.want)
		}
	}
}

// TestQueryParamsShowNewestSample: every range query's range holds the last
// sample sent, whatever its step; alerts evaluate at it.
func TestQueryParamsShowNewestSample(t *testing.T) {
	for _, last := range []time.Time{time.Unix(1_700_000_000, 0), time.Unix(1_700_000_015, 0), time.Unix(1_700_000_355, 0)} {
		for _, q := range querySet() {
			path, v := queryParams(q, last, 15*time.Second)
			num := func(k string) int64 {
				n, err := strconv.ParseFloat(v.Get(k), 64)
				if err != nil {
					t.Fatalf("%s: %s=%q", q.Name, k, v.Get(k))
				}
				return int64(n)
			}
			if q.Range == 0 {
				if path != "/api/v1/query" || num("time") != last.Unix() {
					t.Errorf("%s: %s %v", q.Name, path, v)
				}
				continue
			}
			start, end, step := num("start"), num("end"), num("step")
			if path != "/api/v1/query_range" || end < last.Unix() || end-step >= last.Unix() || end%step != 0 ||
				end-start != int64(q.Range.Seconds()) {
				t.Errorf("%s with last sample at %d: %s start %d end %d step %d", q.Name, last.Unix(), path, start, end, step)
			}
		}
	}
}

func TestTimelineAndSVG(t *testing.T) {
	var recs []reqRecord
	for i := range 100 {
		recs = append(recs, reqRecord{done: time.Duration(i) * 100 * time.Millisecond, latency: time.Duration(i%10+1) * time.Millisecond, samples: 10, ok: true})
	}
	tl := buildTimeline(recs, 10*time.Second, 5)
	if len(tl) != 5 {
		t.Fatalf("%d points, want 5", len(tl))
	}
	for _, p := range tl {
		if p.SamplesPerSec != 100 || p.P50 != 5 || p.P99 != 10 {
			t.Errorf("point %+v, want 100 samples/s, p50 5 ms, p99 10 ms", p)
		}
	}
	svg := timelineSVG("title <&>", []*sysResult{{Name: "shale", timeline: tl}, {Name: "prometheus"}, {Name: "null", timeline: tl}})
	polylines := 0
	for _, tok := range svgTokens(t, svg) {
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			polylines++
		}
	}
	if polylines != 2 {
		t.Errorf("%d polylines, want 2 (throughput and latency of the one system with points; null is not drawn)", polylines)
	}
}

// smokeBinary returns the absolute path of bin/tsdb for a smoke test, which
// is skipped when bin/tsdb is not built or under -short (it starts a server).
func smokeBinary(t *testing.T) string {
	t.Helper()
	bin, _ := filepath.Abs("../../bin/tsdb")
	if _, err := os.Stat(bin); err != nil {
		t.Skip("bin/tsdb not built (make build)")
	}
	if testing.Short() {
		t.Skip("starts a server")
	}
	return bin
}

// TestSmokeShale runs the whole procedure against bin/tsdb at a tiny scale:
// ingest, warm queries, restart, cold queries.
func TestSmokeShale(t *testing.T) {
	bin := smokeBinary(t)
	o, err := parseFlags([]string{"-series=400", "-series-per-target=200", "-batch=200", "-span=30m", "-concurrency=4",
		"-query-rounds=1", "-progress=0", "-systems=shale", "-shale-bin=" + bin, "-out=" + t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := o.newSystem("shale")
	if err != nil {
		t.Fatal(err)
	}
	r, err := o.benchSystem(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if r.Samples != 400*121 || r.Failed != 0 {
		t.Errorf("samples %d, failed %d (%s); want %d, 0", r.Samples, r.Failed, r.FirstError, 400*121)
	}
	if r.QueryErrors != 0 || r.EmptyDashboards != 0 {
		t.Errorf("query errors %d (%s), empty dashboard results %d %v", r.QueryErrors, r.FirstQueryError, r.EmptyDashboards, r.EmptyNames)
	}
	for name, v := range map[string]float64{"cpu": r.CPUPerMSamples, "rss": r.RSSPerSeries, "bytes/sample": r.BytesPerSample,
		"objstore ops": r.ObjOpsPerMin, "warm p50": r.WarmP50, "cold p50": r.ColdP50, "disk-cache p50": r.DiskP50} {
		if math.IsNaN(v) || v <= 0 {
			t.Errorf("%s = %v, want a positive figure", name, v)
		}
	}
	if err := writeOutputs(o, [][]*sysResult{{r}}, nil); err != nil {
		t.Fatal(err)
	}
	rep, err := os.ReadFile(filepath.Join(o.out, "report.md"))
	if err != nil || !strings.Contains(string(rep), "| sustained ingest | samples/s |") {
		t.Errorf("report.md: %v\n%s", err, rep)
	}
}

// TestValuesStayExporterLike: after many scrapes every value still has at
// most two decimals, as values computed from integers (ticks / 100, bytes)
// do; float accumulation would drift to 17 significant digits.
func TestValuesStayExporterLike(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s, err := newShard(1, 1, testSeries(t, 200), rng)
	if err != nil {
		t.Fatal(err)
	}
	for range 5000 {
		s.advance(rng)
	}
	for i, v := range s.values {
		str := strconv.FormatFloat(v, 'f', -1, 64)
		if dot := strings.IndexByte(str, '.'); dot >= 0 && len(str)-dot-1 > 2 {
			t.Fatalf("series %d (%v) has value %s after 5000 scrapes", i, s.kinds[i], str)
		}
	}
}

// TestDataWindowShared checks that every system and run of an invocation
// gets the same compressed-time window, ending at the first one's start.
func TestDataWindowShared(t *testing.T) {
	o := &options{span: 24 * time.Hour}
	s1, e1 := o.window(15 * time.Second)
	if now := time.Now().UnixMilli(); e1 > now || e1 < now-15_000 || e1-s1 != 24*3600*1000 || e1%15_000 != 0 {
		t.Fatalf("window [%d, %d] at %d: want 24 h ending at the last 15 s boundary", s1, e1, now)
	}
	o.dataEnd -= 3_600_000 // as if the first system started an hour ago
	if s2, e2 := o.window(15 * time.Second); s2 != s1-3_600_000 || e2 != e1-3_600_000 {
		t.Fatalf("second window [%d, %d], want the first one's [%d, %d]", s2, e2, s1-3_600_000, e1-3_600_000)
	}
}

// TestRunQueryKinds: a failed query says how it failed, for the soak
// report's count of query errors by kind.
func TestRunQueryKinds(t *testing.T) {
	answers := map[string]struct {
		code int
		body string
	}{
		"ok":       {200, `{"status":"success","data":{"resultType":"vector","result":[{},{}]}}`},
		"busy":     {503, `{"status":"error","errorType":"unavailable","error":"too many queries"}`},
		"bad":      {400, `{"status":"error","errorType":"bad_data","error":"parse error"}`},
		"plain":    {502, `Bad Gateway`},
		"not json": {200, `<html>`},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := answers[r.URL.Query().Get("query")]
		w.WriteHeader(a.code)
		io.WriteString(w, a.body)
	}))
	defer srv.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	for _, c := range []struct{ base, expr, kind string }{
		{srv.URL, "ok", ""},
		{srv.URL, "busy", "HTTP 503 unavailable"},
		{srv.URL, "bad", "HTTP 400 bad_data"},
		{srv.URL, "plain", "HTTP 502"},
		{srv.URL, "not json", "bad answer"},
		{closedURL, "ok", "connection refused"},
	} {
		res := runQuery(context.Background(), client, c.base, benchQuery{Name: c.expr, Expr: c.expr}, time.Now(), 15*time.Second)
		if res.Kind != c.kind || (res.Err == "") != (c.kind == "") {
			t.Errorf("%s at %s: kind %q, error %q; want kind %q", c.expr, c.base, res.Kind, res.Err, c.kind)
		}
	}
}

// TestPayloadOTLP decodes an OTLP payload with the Collector's own decoder:
// a gauge per metric name, every series' labels but __name__ as the
// attributes of its data points, two points a series at the step's times
// with the shard's values.
func TestPayloadOTLP(t *testing.T) {
	series := testSeries(t, 120)
	rng := rand.New(rand.NewPCG(1, 2))
	sh, err := newShard(versionOTLP, 2, series, rng)
	if err != nil {
		t.Fatal(err)
	}
	first := append([]float64(nil), sh.values...)
	body, err := sh.payload(ts0, 10*time.Second, rng)
	if err != nil {
		t.Fatal(err)
	}
	req := pmetricotlp.NewExportRequest()
	if err := req.UnmarshalProto(body); err != nil {
		t.Fatal(err)
	}
	md := req.Metrics()
	if md.ResourceMetrics().Len() != 1 || md.ResourceMetrics().At(0).ScopeMetrics().Len() != 1 {
		t.Fatalf("%d resources", md.ResourceMetrics().Len())
	}
	ms := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
	i := 0 // series
	for m := range ms.Len() {
		metric := ms.At(m)
		if metric.Type() != pmetric.MetricTypeGauge {
			t.Fatalf("metric %s is a %s", metric.Name(), metric.Type())
		}
		dps := metric.Gauge().DataPoints()
		for k := 0; k < dps.Len(); k += 2 {
			if i >= len(series) {
				t.Fatalf("more data points than series")
			}
			want := series[i].labels
			if metric.Name() != want[0].Value {
				t.Fatalf("series %d: metric %s, want %s", i, metric.Name(), want[0].Value)
			}
			for j := range 2 {
				dp := dps.At(k + j)
				got := []prompb.Label{{Name: "__name__", Value: metric.Name()}}
				for name, v := range dp.Attributes().All() {
					got = append(got, prompb.Label{Name: name, Value: v.Str()})
				}
				if !labelsEqual(got, want) {
					t.Fatalf("series %d point %d: labels %v, want %v", i, j, got, want)
				}
				if ts := dp.Timestamp().AsTime().UnixMilli(); ts != ts0+int64(j)*10000 {
					t.Fatalf("series %d point %d at %d, want %d", i, j, ts, ts0+int64(j)*10000)
				}
			}
			if v := dps.At(k).DoubleValue(); v != first[i] {
				t.Errorf("series %d: first value %v, want %v", i, v, first[i])
			}
			if v := dps.At(k + 1).DoubleValue(); v != sh.values[i] {
				t.Errorf("series %d: second value %v, want %v", i, v, sh.values[i])
			}
			i++
		}
	}
	if i != len(series) {
		t.Fatalf("%d series decoded, want %d", i, len(series))
	}
}
