package main

import (
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// BenchmarkUIGraph measures how long the query page takes to graph a 6 h
// range of 100 series (15 s apart, 251 steps at the automatic resolution)
// once the API's answer has arrived: parsing it, aligning the series and
// uPlot's first draw. The goal is under 300 ms. It reports the median and
// the largest of the page's own measures.
//
//	go test ./cmd/tsdb -run '^$' -bench BenchmarkUIGraph -benchtime 20x -count 3
func BenchmarkUIGraph(b *testing.B) {
	ctx := browser(b)
	dir := b.TempDir()
	s := startShale(b, "--storage.path="+dir)
	defer s.proc.Stop()
	end := time.Now().Truncate(time.Minute)
	writeUIData(b, s.url, "ui_bench_series", 100, end, 6*time.Hour)
	q := url.Values{"g0.expr": {"ui_bench_series"}, "g0.tab": {"graph"}, "g0.range_input": {"6h"}, "g0.end_input": {strconv.FormatInt(end.Unix(), 10)}}
	browse(b, ctx, "open the query page", chromedp.Navigate(s.url+"/query?"+q.Encode()), chromedp.WaitVisible(chromedp.CSS(`.panel[data-state="done"]`)))
	if n := result(b, ctx, "series", chromedp.AttributeValue(chromedp.CSS("div.graph"), "data-series")).Value; n != "100" {
		b.Fatalf("graph has %s series, want 100", n)
	}
	var ms []float64
	for b.Loop() {
		browse(b, ctx, "run", chromedp.Click(chromedp.CSS("button.execute")), chromedp.WaitVisible(chromedp.CSS(`.panel[data-state="done"]`)))
		v := result(b, ctx, "render time", chromedp.AttributeValue(chromedp.CSS(".panel"), "data-render-ms")).Value
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			b.Fatalf("render time %q: %v", v, err)
		}
		ms = append(ms, x)
	}
	slices.Sort(ms)
	b.ReportMetric(ms[len(ms)/2], "median-ms/graph")
	b.ReportMetric(ms[len(ms)-1], "max-ms/graph")
	b.Logf("render times (ms): %v", ms)
}
