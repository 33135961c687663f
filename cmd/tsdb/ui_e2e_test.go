package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/prompb"
	"golang.org/x/crypto/bcrypt"

	"github.com/shaledb/shale/internal/e2e"
	"github.com/shaledb/shale/internal/race"
)

// screenshotDir, when set, is where the browser tests save a screenshot
// of each page (docs/img is made this way: see docs/ui.md).
var screenshotDir = os.Getenv("SHALE_UI_SCREENSHOTS")

// browser starts headless Chromium and returns a tab's context, closed
// when the test ends. It skips (or fails with SHALE_REQUIRE_E2E=1) when
// Chromium is not installed.
//
// It also skips in a test binary with the race detector, which `make test`
// runs first: the server under test is a process of its own, built without
// it, so in this process the detector watches only the DevTools client and
// its goroutines, where it once reported a race inside chromedp's start of
// the browser. `make test` runs these tests again without it.
func browser(t testing.TB) context.Context {
	t.Helper()
	if race.Enabled {
		t.Skip("browser tests run without -race (the server is a separate process): go test -run '^TestUI' ./cmd/tsdb, as make test does")
	}
	bin := e2e.RequireBinary(t, "chromium", "apt-get install chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // root in CI containers
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("ignore-certificate-errors", true),
	)
	// Chromium now and then exits while starting on a loaded machine
	// (before it prints its DevTools address); a second start works.
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(opts, chromedp.UserDataDir(t.TempDir()))...)
		ctx, cancelTab := chromedp.NewContext(actx)
		// The first action starts the browser; it must not carry the
		// timeout, which would stop the browser with it.
		if err = chromedp.Do(ctx); err != nil {
			cancelTab()
			cancelAlloc()
			t.Logf("start chromium (attempt %d): %v", attempt, err)
			continue
		}
		tctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
		t.Cleanup(func() {
			cancelTimeout()
			cancelTab()
			cancelAlloc()
		})
		return tctx
	}
	t.Fatalf("start chromium: %v", err)
	return nil
}

// browse runs steps in the tab, failing the test on an error.
func browse(t testing.TB, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// result runs an action that returns a value.
func result[T any](t testing.TB, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

func screenshot(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	if screenshotDir == "" {
		return
	}
	png := result(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(screenshotDir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// evalJSON evaluates a JavaScript expression in the page into out.
func evalJSON(t testing.TB, ctx context.Context, expr string, out any) {
	t.Helper()
	raw := result(t, ctx, "evaluate "+expr, chromedp.Evaluate[json.RawMessage](expr))
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
}

// uiSeries is the test data: n series of name, one sample every 15 s over
// the hour before end, with gauge metadata.
func uiSeries(name string, n int, end time.Time, span time.Duration) []prompb.TimeSeries {
	var out []prompb.TimeSeries
	start := end.Add(-span)
	for i := range n {
		ts := prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: name}, {Name: "instance", Value: fmt.Sprintf("host-%02d", i)}, {Name: "job", Value: "ui"}}}
		for k, t := 0, start; !t.After(end); k, t = k+1, t.Add(15*time.Second) {
			v := float64(i*100) + 10*math.Sin(float64(k)/20) + float64(k%7)
			ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: t.UnixMilli(), Value: v})
		}
		out = append(out, ts)
	}
	return out
}

func writeUIData(t testing.TB, base, name string, n int, end time.Time, span time.Duration) {
	t.Helper()
	req := &prompb.WriteRequest{
		Timeseries: uiSeries(name, n, end, span),
		Metadata:   []prompb.MetricMetadata{{Type: prompb.MetricMetadata_GAUGE, MetricFamilyName: name, Help: "Readings of " + name + "."}},
	}
	// One series per request keeps requests small.
	for i := range req.Timeseries {
		r := &prompb.WriteRequest{Timeseries: req.Timeseries[i : i+1]}
		if i == 0 {
			r.Metadata = req.Metadata
		}
		code, _, body, err := rawRemoteWrite(base, r)
		if err != nil || code/100 != 2 {
			t.Fatalf("remote write: %d %s %v", code, body, err)
		}
	}
}

// apiGet calls the API and decodes its data.
func apiGet(t testing.TB, base, path string, params url.Values, out any) {
	t.Helper()
	resp, err := http.Get(base + path + "?" + params.Encode())
	if err != nil {
		t.Fatal(err)
	}
	decodeAnswer(t, resp, path, params, out)
}

// apiQuery runs an instant query and decodes its result.
func apiQuery(t testing.TB, base string, params url.Values, out any) {
	t.Helper()
	var data struct {
		Result json.RawMessage `json:"result"`
	}
	apiGet(t, base, "/api/v1/query", params, &data)
	if err := json.Unmarshal(data.Result, out); err != nil {
		t.Fatal(err)
	}
}

// takeCompletion types prefix into the first query editor and takes the
// completion want from the list that opens, by a click. CodeMirror ignores
// a click that comes too soon after the list opened or changed (its
// interaction delay), and on a loaded machine the list may still be
// filling from the server's answer; so the click is repeated until the
// editor holds want, and the list is opened again if it closed.
func takeCompletion(t testing.TB, ctx context.Context, prefix, want string) {
	t.Helper()
	browse(t, ctx, "type "+prefix, chromedp.Click(chromedp.CSS(".cm-content")), chromedp.SendKeys(chromedp.CSS(".cm-content"), prefix))
	var seen struct{ Expr, Selected string }
	deadline := time.Now().Add(time.Minute)
	for {
		evalJSON(t, ctx, `({Expr: document.querySelector('.cm-content').textContent,
			Selected: document.querySelector('.cm-tooltip-autocomplete li[aria-selected]')?.textContent ?? ""})`, &seen)
		switch {
		case seen.Expr == want:
			return
		case time.Now().After(deadline):
			t.Fatalf("editor holds %q and the list offers %q, want %q taken from it", seen.Expr, seen.Selected, want)
		case strings.Contains(seen.Selected, want):
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_ = chromedp.Do(cctx, chromedp.Click(chromedp.CSS(".cm-tooltip-autocomplete li[aria-selected]")))
			cancel()
		case seen.Selected == "":
			// The list opens once the server's names arrive; if it has
			// not in a few seconds, typing the last letter again opens it.
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := chromedp.Do(wctx, chromedp.WaitVisible(chromedp.CSS(".cm-tooltip-autocomplete li[aria-selected]")))
			cancel()
			if err != nil && seen.Expr == prefix {
				browse(t, ctx, "reopen the list", chromedp.KeyEvent(kb.Backspace), chromedp.KeyEvent(prefix[len(prefix)-1:]))
			}
		}
		time.Sleep(e2e.PollInterval)
	}
}

// waitPanel waits until the first query panel has an answer drawn.
// On a timeout it says what the page shows instead: the panel's state,
// the expression in its editor, and whether a completion list is open.
func waitPanel(t testing.TB, ctx context.Context, sel string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := chromedp.Do(wctx, chromedp.WaitVisible(chromedp.CSS(sel+`.panel[data-state="done"], `+sel+`.panel[data-state="error"]`)))
	if err == nil {
		return
	}
	var seen struct {
		State, Expr string
		Completions bool
	}
	evalJSON(t, ctx, `(() => { const p = document.querySelector(`+strconv.Quote(sel+".panel")+`);
		return {State: p?.dataset.state ?? "none", Expr: p?.querySelector(".cm-content")?.textContent ?? "",
			Completions: !!document.querySelector(".cm-tooltip-autocomplete")}; })()`, &seen)
	t.Fatalf("wait for the panel's answer: %v (panel state %q, expression %q, completion list open: %v)", err, seen.State, seen.Expr, seen.Completions)
}

// TestUIQueryPage loads the query page in Chromium, types an expression
// with the help of autocompletion, runs it, and checks the graph and the
// table against the API.
func TestUIQueryPage(t *testing.T) {
	skipEndToEnd(t)
	ctx := browser(t)
	s := startShale(t, "--storage.path="+t.TempDir())
	defer s.stop(t)
	end := time.Now().Truncate(time.Minute)
	writeUIData(t, s.url, "ui_test_temperature", 5, end, time.Hour)

	browse(t, ctx, "open /", chromedp.Navigate(s.url+"/"), chromedp.WaitVisible(chromedp.CSS(".cm-content")))
	loc := result(t, ctx, "location", chromedp.Location())
	if !strings.HasSuffix(loc, "/query") {
		t.Fatalf("/ led to %s, want the query page", loc)
	}
	// Type the start of the name, take the completion.
	takeCompletion(t, ctx, "ui_test_te", "ui_test_temperature")
	// Enter runs the query (graph, last hour).
	browse(t, ctx, "run", chromedp.KeyEvent(kb.Enter))
	waitPanel(t, ctx, "")
	var g struct {
		Series, Legend, Painted int
		Err                     string
	}
	evalJSON(t, ctx, `(() => {
		const e = document.querySelector('.notice.error');
		const box = document.querySelector('.graph');
		const c = document.querySelector('.graph canvas');
		const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
		let painted = 0;
		for (let i = 3; i < d.length; i += 4) if (d[i] > 0) painted++;
		return {Series: +box.dataset.series, Legend: document.querySelectorAll('.u-legend .u-series').length - 1, Painted: painted, Err: e ? e.textContent : ''};
	})()`, &g)
	if g.Err != "" || g.Series != 5 || g.Legend != 5 {
		t.Fatalf("graph: %+v, want 5 series in the graph and its legend", g)
	}
	// The lines of 5 series over 240 steps paint thousands of pixels; an
	// empty plot paints only its grid's few.
	if g.Painted < 2000 {
		t.Fatalf("graph canvas has %d painted pixels: the series were not drawn", g.Painted)
	}
	screenshot(t, ctx, "query-graph")
	// Everything the page loaded (script, styles, API calls) came from
	// the server itself.
	var resources []string
	evalJSON(t, ctx, `[location.href, ...performance.getEntriesByType('resource').map(e => e.name)]`, &resources)
	if len(resources) < 4 {
		t.Fatalf("page loaded %q: want the script, the styles and API calls", resources)
	}
	for _, r := range resources {
		if !strings.HasPrefix(r, s.url+"/") {
			t.Errorf("page loaded %s, not from the server", r)
		}
	}
	// Stacked, the top line is the sum of the five (about 1000), not the
	// largest of them (about 400).
	ymax := func() float64 {
		v := result(t, ctx, "ymax", chromedp.AttributeValue(chromedp.CSS("div.graph"), "data-ymax")).Value
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("data-ymax %q: %v", v, err)
		}
		return x
	}
	if y := ymax(); y < 400 || y > 500 {
		t.Fatalf("unstacked graph reaches %v, want about 400", y)
	}
	browse(t, ctx, "stack", chromedp.Click(chromedp.CSS("input.stacked")))
	waitPanel(t, ctx, "")
	if y := ymax(); y < 900 || y > 1100 {
		t.Fatalf("stacked graph reaches %v, want about 1000", y)
	}
	browse(t, ctx, "unstack", chromedp.Click(chromedp.CSS("input.stacked")))
	waitPanel(t, ctx, "")

	// The table at a fixed time shows the API's values.
	at := end.Add(-10 * time.Minute)
	browse(t, ctx, "set end time", chromedp.SetValue(chromedp.CSS("input.end"), strconv.FormatInt(at.Unix(), 10)), chromedp.Click(chromedp.CSS(".tab-table")))
	waitPanel(t, ctx, "")
	var rows [][2]string
	evalJSON(t, ctx, `[...document.querySelectorAll('table.result tr')].map(r => [r.querySelector('.series').textContent, r.querySelector('.value').textContent])`, &rows)
	var want []vectorSample
	apiQuery(t, s.url, url.Values{"query": {"ui_test_temperature"}, "time": {strconv.FormatInt(at.Unix(), 10)}}, &want)
	if len(rows) != len(want) || len(want) != 5 {
		t.Fatalf("table has %d rows, the API %d series (want 5)", len(rows), len(want))
	}
	byName := map[string]string{}
	for _, r := range rows {
		byName[r[0]] = r[1]
	}
	for _, w := range want {
		name := fmt.Sprintf(`ui_test_temperature{instance=%q, job="ui"}`, w.Metric["instance"])
		if got := byName[name]; got != w.Value[1] {
			t.Errorf("table: %s = %q, API %q", name, got, w.Value[1])
		}
	}
	// The state is in the URL: reloading it shows the same table.
	loc = result(t, ctx, "location", chromedp.Location())
	u, _ := url.Parse(loc)
	if q := u.Query(); q.Get("g0.expr") != "ui_test_temperature" || q.Get("g0.tab") != "table" || q.Get("g0.end_input") != strconv.FormatInt(at.Unix(), 10) {
		t.Fatalf("URL %s does not hold the panel's state", loc)
	}
	screenshot(t, ctx, "query-table")

	// An error is shown as the API gives it.
	bad := "rate(ui_test_temperature)"
	browse(t, ctx, "open a bad query", chromedp.Navigate(s.url+"/query?g0.tab=table&g0.expr="+url.QueryEscape(bad)))
	waitPanel(t, ctx, "")
	shown := result(t, ctx, "read error", chromedp.Text(chromedp.CSS(".notice.error")))
	resp, err := http.Get(s.url + "/api/v1/query?query=" + url.QueryEscape(bad))
	if err != nil {
		t.Fatal(err)
	}
	var apiErr apiResponse
	json.NewDecoder(resp.Body).Decode(&apiErr)
	resp.Body.Close()
	if apiErr.Error == "" || !strings.Contains(shown, apiErr.Error) || !strings.Contains(shown, "HTTP 400") {
		t.Fatalf("error shown %q, want the API's %q (HTTP 400)", shown, apiErr.Error)
	}

	// Several panels, each with its own answer.
	browse(t, ctx, "two panels", chromedp.Navigate(s.url+"/query?g0.tab=table&g0.expr=count(ui_test_temperature)&g1.tab=table&g1.expr=sum(ui_test_temperature%3E100)"),
		chromedp.WaitVisible(chromedp.CSS(`.panel:nth-child(2)[data-state="done"]`)), chromedp.WaitVisible(chromedp.CSS(`.panel:nth-child(1)[data-state="done"]`)))
	var vals []string
	evalJSON(t, ctx, `[...document.querySelectorAll('.panel td.value')].map(x => x.textContent)`, &vals)
	if len(vals) != 2 || vals[0] != "5" {
		t.Fatalf("two panels show %q, want count 5 first", vals)
	}
}

// metricsText reads the server's /metrics.
func metricsText(t testing.TB, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

// metricSum sums the values of a family's series whose labels include
// match.
func metricSum(mfs map[string]*dto.MetricFamily, name string, match map[string]string) float64 {
	var sum float64
	mf := mfs[name]
	if mf == nil {
		return 0
	}
outer:
	for _, m := range mf.GetMetric() {
		for k, v := range match {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue outer
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		}
	}
	return sum
}

// TestUIExploreAndStorage checks the explore page against the API and the
// storage page's counters against /metrics.
func TestUIExploreAndStorage(t *testing.T) {
	skipEndToEnd(t)
	ctx := browser(t)
	s := startShale(t, "--storage.path="+t.TempDir(), "--storage.head-flush-interval=1s")
	defer s.stop(t)
	end := time.Now().Truncate(time.Minute)
	writeUIData(t, s.url, "ui_test_temperature", 5, end, time.Hour)
	writeUIData(t, s.url, "ui_test_pressure", 3, end, time.Hour)
	// Tables for the storage page to list, in L0 or, once compacted, a run.
	e2e.Eventually(t, 30*time.Second, func() bool {
		return slices.ContainsFunc(storageStatusOf(t, s.url).Levels, func(l levelJSON) bool { return len(l.Tables) > 0 })
	}, "a head flush")
	// A query reads through the block cache.
	var v []vectorSample
	apiQuery(t, s.url, url.Values{"query": {"ui_test_temperature"}}, &v)

	browse(t, ctx, "explore", chromedp.Navigate(s.url+"/explore"), chromedp.WaitVisible(chromedp.CSS(".summary[data-metrics]")))
	type row struct{ Name, Type, Help, Count string }
	var rows []row
	evalJSON(t, ctx, `[...document.querySelectorAll('.metrics-table tbody tr')].map(r => { const c = r.querySelectorAll('td'); return {Name: c[0].textContent, Type: c[1].textContent, Help: c[2].textContent, Count: c[3].textContent}; })`, &rows)
	var names []string
	apiGet(t, s.url, "/api/v1/label/__name__/values", nil, &names)
	var got []string
	counts := map[string]string{}
	for _, r := range rows {
		got = append(got, r.Name)
		counts[r.Name] = r.Count
		if r.Name == "ui_test_temperature" && (r.Type != "gauge" || r.Help != "Readings of ui_test_temperature.") {
			t.Errorf("explore row %+v, want the gauge's type and help", r)
		}
	}
	sort.Strings(got)
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Fatalf("explore lists %q, the API %q", got, names)
	}
	for name, want := range map[string]string{"ui_test_temperature": "5", "ui_test_pressure": "3"} {
		var c []vectorSample
		apiQuery(t, s.url, url.Values{"query": {"count(" + name + ")"}}, &c)
		if len(c) != 1 || c[0].Value[1] != want || counts[name] != want {
			t.Errorf("%s: explore shows %q series, count() %v, want %s", name, counts[name], c, want)
		}
	}
	// A metric's labels and values.
	browse(t, ctx, "open a metric", chromedp.Click(chromedp.CSS(`a.metric[data-name="ui_test_pressure"]`)), chromedp.WaitVisible(chromedp.CSS(".labels-table")))
	var labels [][]string
	evalJSON(t, ctx, `[...document.querySelectorAll('.labels-table tbody tr')].map(r => [...r.querySelectorAll('td')].map(c => c.textContent))`, &labels)
	if len(labels) != 2 || labels[0][0] != "instance" || labels[0][1] != "3" || labels[0][2] != "host-00, host-01, host-02" || labels[1][0] != "job" || labels[1][2] != "ui" {
		t.Fatalf("labels of ui_test_pressure: %q", labels)
	}
	screenshot(t, ctx, "explore")

	// The storage page: its counters lie between /metrics read before and
	// after it loaded.
	before := metricsText(t, s.url)
	browse(t, ctx, "storage", chromedp.Navigate(s.url+"/storage"), chromedp.WaitVisible(chromedp.CSS(".requests-table")))
	after := metricsText(t, s.url)
	var page struct {
		Totals map[string]string
		Hits   string
		Misses string
		Levels int
		Parts  int
		Cost   string
	}
	evalJSON(t, ctx, `(() => {
		const totals = {};
		document.querySelectorAll('.requests-table .total').forEach(x => totals[x.dataset.kind] = x.textContent);
		return {Totals: totals,
			Hits: document.querySelector('.hits[data-tier="memory"]').textContent,
			Misses: document.querySelector('.misses[data-tier="memory"]').textContent,
			Levels: document.querySelectorAll('.levels-table tbody tr').length,
			Parts: document.querySelectorAll('.partitions-table tbody tr').length,
			Cost: document.querySelector('.cost').textContent};
	})()`, &page)
	between := func(what string, shown string, name string, match map[string]string) {
		t.Helper()
		x, err := strconv.ParseFloat(shown, 64)
		lo, hi := metricSum(before, name, match), metricSum(after, name, match)
		if err != nil || x < lo || x > hi {
			t.Errorf("%s: page shows %q, /metrics %v before and %v after", what, shown, lo, hi)
		}
	}
	for kind, op := range map[string]string{"PUT": "put", "LIST": "list", "GET": "get", "GET (range)": "get_range", "HEAD": "attributes", "DELETE": "delete"} {
		between(kind+" requests", page.Totals[kind], "shale_objstore_operations_total", map[string]string{"operation": op})
	}
	if page.Totals["PUT"] == "0" {
		t.Errorf("no PUT requests shown after writes")
	}
	between("memory cache hits", page.Hits, "shale_cache_hits_total", map[string]string{"tier": "memory"})
	between("memory cache misses", page.Misses, "shale_cache_misses_total", map[string]string{"tier": "memory"})
	if page.Levels < 1 || page.Parts < 1 || !strings.HasPrefix(page.Cost, "Projected request cost: $") {
		t.Errorf("storage page: %+v", page)
	}
	screenshot(t, ctx, "storage")

	browse(t, ctx, "status", chromedp.Navigate(s.url+"/status"), chromedp.WaitVisible(chromedp.CSS("#flags table")))
	var status struct{ Flags, Series string }
	evalJSON(t, ctx, `({Flags: document.querySelector('#flags').textContent, Series: document.querySelector('.head-stats tbody td').textContent})`, &status)
	if !strings.Contains(status.Flags, "--storage.path") || status.Series != "8" {
		t.Errorf("status page: %+v, want the flags and 8 series", status)
	}
	screenshot(t, ctx, "status")
	for _, p := range []string{"rules", "alerts"} {
		browse(t, ctx, p, chromedp.Navigate(s.url+"/"+p), chromedp.WaitVisible(chromedp.CSS(".notice")))
		text := result(t, ctx, "read "+p, chromedp.Text(chromedp.CSS(".notice")))
		if strings.Contains(text, "Loading") || strings.Contains(text, "Error") && !strings.Contains(text, "rules") {
			t.Errorf("%s page: %q", p, text)
		}
	}
}

// TestUISubPath runs the UI behind a reverse proxy at /shale/ (the proxy
// strips the prefix; --web.external-url names it) and at a route prefix
// of its own, and checks the query page, its completion and the storage
// page work at both.
func TestUISubPath(t *testing.T) {
	skipEndToEnd(t)
	ctx := browser(t)
	end := time.Now().Truncate(time.Minute)

	// Behind a proxy that strips /shale.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxyURL := "http://" + ln.Addr().String()
	s := startShale(t, "--storage.path="+t.TempDir(), "--web.external-url="+proxyURL+"/shale/", "--web.route-prefix=/")
	defer s.stop(t)
	target, _ := url.Parse(s.url)
	rp := httputil.NewSingleHostReverseProxy(target)
	mux := http.NewServeMux()
	mux.Handle("/shale/", http.StripPrefix("/shale", rp))
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()
	writeUIData(t, s.url, "ui_test_temperature", 5, end, time.Hour)
	checkSubPath(t, ctx, proxyURL+"/shale")

	// At a route prefix of the server's own.
	s2 := startShaleAt(t, "/app", "--storage.path="+t.TempDir(), "--web.route-prefix=/app")
	defer s2.stop(t)
	writeUIData(t, s2.url+"/app", "ui_test_temperature", 5, end, time.Hour)
	if resp, err := http.Get(s2.url + "/api/v1/query?query=1"); err != nil || resp.StatusCode != 404 {
		t.Fatalf("API outside the route prefix: %v %v, want 404", resp.Status, err)
	}
	checkSubPath(t, ctx, s2.url+"/app")
}

func checkSubPath(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	browse(t, ctx, "open "+base+"/", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(".cm-content")))
	loc := result(t, ctx, "location", chromedp.Location())
	if loc != base+"/query" {
		t.Fatalf("%s/ led to %s, want %s/query", base, loc, base)
	}
	takeCompletion(t, ctx, "ui_test_te", "ui_test_temperature")
	// The Execute button here; TestUIQueryPage runs a query with Enter.
	browse(t, ctx, "execute", chromedp.Click(chromedp.CSS(".panel button.execute")))
	waitPanel(t, ctx, "")
	var answer struct{ State, Series, Text string }
	evalJSON(t, ctx, `(() => { const p = document.querySelector(".panel");
		return {State: p.dataset.state, Series: p.querySelector(".graph")?.dataset.series ?? "", Text: p.textContent}; })()`, &answer)
	if answer.State != "done" || answer.Series != "5" {
		t.Fatalf("at %s the query ended in %q with %q series drawn, want 5; the panel says: %s", base, answer.State, answer.Series, answer.Text)
	}
	browse(t, ctx, "storage at "+base, chromedp.Click(chromedp.CSS(`nav a[href="storage"]`)), chromedp.WaitVisible(chromedp.CSS(".requests-table")))
	loc = result(t, ctx, "location", chromedp.Location())
	if loc != base+"/storage" {
		t.Fatalf("storage link led to %s", loc)
	}
}

// TestUIBasicAuthTLS serves the UI with the web config's TLS and basic
// auth: the browser gets 401 without the password, and every page and
// API call works with it.
func TestUIBasicAuthTLS(t *testing.T) {
	skipEndToEnd(t)
	ctx := browser(t)
	dir := t.TempDir()
	certFile, keyFile := selfSignedCert(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  admin: %s\n", certFile, keyFile, hash)), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", e2e.FreePort(t))
	p := e2e.StartProcess(t, exec.Command(tsdbBinary, "--web.listen-address="+addr, "--web.config.file="+cfg, "--storage.path="+filepath.Join(dir, "data")))
	defer p.Stop()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(path string, auth bool) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+path, nil)
		if auth {
			req.SetBasicAuth("admin", "s3cret")
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	e2e.Eventually(t, 30*time.Second, func() bool {
		if exited, _ := p.Exited(); exited {
			t.Fatalf("tsdb exited:\n%s", p.Output())
		}
		code, _ := get("/-/ready", true)
		return code == 200
	}, "tsdb with TLS and basic auth to be ready")
	for _, path := range []string{"/query", "/static/app.js", "/api/v1/status/storage"} {
		if code, _ := get(path, false); code != http.StatusUnauthorized {
			t.Fatalf("GET %s without credentials: %d, want 401", path, code)
		}
	}
	// Headless Chromium turns the 401's challenge into a load error.
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse("https://"+addr+"/query"))
	if (err == nil || !strings.Contains(err.Error(), "ERR_INVALID_AUTH_CREDENTIALS")) && (resp == nil || resp.Status != http.StatusUnauthorized) {
		t.Fatalf("browser without credentials got %v, %v; want 401", resp, err)
	}
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:s3cret"))
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": auth}}); err != nil {
		t.Fatal(err)
	}
	browse(t, ctx, "with credentials", chromedp.Navigate("https://"+addr+"/query?g0.tab=table&g0.expr=vector(42)"))
	waitPanel(t, ctx, "")
	v := result(t, ctx, "read value", chromedp.Text(chromedp.CSS("td.value")))
	if v != "42" {
		t.Fatalf("query over TLS with basic auth shows %q, want 42", v)
	}
	browse(t, ctx, "storage over TLS", chromedp.Navigate("https://"+addr+"/storage"), chromedp.WaitVisible(chromedp.CSS(".requests-table")))
}

func selfSignedCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
