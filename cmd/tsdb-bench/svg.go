package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// plotSeries is one system's line on a chart.
type plotSeries struct {
	Name   string
	Points [][2]float64 // x, y
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}

// timelineSVG draws two stacked charts sharing the time axis: ingest
// throughput (samples/s) and remote-write latency p99 (ms), one line per
// system.
func timelineSVG(title string, results []*sysResult) string {
	var thr, lat []plotSeries
	var shown []*sysResult
	for _, r := range results {
		if r.Name != "null" { // the generator's ceiling would flatten every other line
			shown = append(shown, r)
		}
	}
	results = shown
	for _, r := range results {
		var a, b [][2]float64
		for _, p := range r.timeline {
			a = append(a, [2]float64{p.T, p.SamplesPerSec})
			if !math.IsNaN(p.P99) {
				b = append(b, [2]float64{p.T, p.P99})
			}
		}
		thr = append(thr, plotSeries{Name: r.Name, Points: a})
		lat = append(lat, plotSeries{Name: r.Name, Points: b})
	}
	const w, h, chartH = 900, 640, 250
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&sb, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&sb, `<text x="%d" y="22" text-anchor="middle" font-size="15">%s</text>`+"\n", w/2, html.EscapeString(title))
	chart(&sb, thr, 70, 45, w-250, chartH, "ingest throughput (samples/s)", "", false)
	chart(&sb, lat, 70, 45+chartH+60, w-250, chartH, "remote-write latency p99 (ms, log scale)", "seconds since the start of the ingest", true)
	// Legend.
	for i, r := range results {
		y := 60 + i*20
		c := palette[i%len(palette)]
		fmt.Fprintf(&sb, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.5"/>`+"\n", w-160, y, w-135, y, c)
		fmt.Fprintf(&sb, `<text x="%d" y="%d">%s</text>`+"\n", w-128, y+4, html.EscapeString(r.Name))
	}
	sb.WriteString("</svg>\n")
	return sb.String()
}

// chart draws one set of axes with lines at (x0, y0), size cw x ch; logY
// puts the y axis on a log scale with a tick per power of ten.
func chart(sb *strings.Builder, series []plotSeries, x0, y0, cw, ch int, ylabel, xlabel string, logY bool) {
	maxX, maxY, minY := 0.0, 0.0, math.Inf(1)
	for _, s := range series {
		for _, p := range s.Points {
			maxX = math.Max(maxX, p[0])
			maxY = math.Max(maxY, p[1])
			if p[1] > 0 {
				minY = math.Min(minY, p[1])
			}
		}
	}
	if maxX == 0 {
		maxX = 1
	}
	maxY = niceCeil(maxY)
	// yFrac maps a value to 0..1 of the chart height.
	yFrac := func(v float64) float64 { return math.Min(v, maxY) / maxY }
	ticks := []float64{0, maxY / 4, maxY / 2, maxY * 3 / 4, maxY}
	if logY {
		lo := math.Floor(math.Log10(math.Min(minY, maxY/10)))
		hi := math.Ceil(math.Log10(maxY))
		if math.IsInf(lo, 0) || lo >= hi {
			lo = hi - 1
		}
		yFrac = func(v float64) float64 {
			if v <= 0 {
				return 0
			}
			return math.Max(0, math.Min(1, (math.Log10(v)-lo)/(hi-lo)))
		}
		ticks = ticks[:0]
		for e := lo; e <= hi; e++ {
			ticks = append(ticks, math.Pow(10, e))
		}
	}
	fmt.Fprintf(sb, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", x0, y0, cw, ch)
	fmt.Fprintf(sb, `<text x="%d" y="%d" font-size="13">%s</text>`+"\n", x0, y0-8, html.EscapeString(ylabel))
	for _, v := range ticks {
		y := float64(y0+ch) - float64(ch)*yFrac(v)
		fmt.Fprintf(sb, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", x0, y, x0+cw, y)
		fmt.Fprintf(sb, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-5, y+4, fmtNum(v))
	}
	for i := 0; i <= 5; i++ {
		v := maxX * float64(i) / 5
		x := float64(x0) + float64(cw)*float64(i)/5
		fmt.Fprintf(sb, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, y0+ch+15, fmtNum(math.Round(v)))
	}
	if xlabel != "" {
		fmt.Fprintf(sb, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", x0+cw/2, y0+ch+32, html.EscapeString(xlabel))
	}
	for i, s := range series {
		if len(s.Points) == 0 {
			continue
		}
		var pts []string
		for _, p := range s.Points {
			x := float64(x0) + float64(cw)*p[0]/maxX
			y := float64(y0+ch) - float64(ch)*yFrac(p[1])
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
		}
		fmt.Fprintf(sb, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`+"\n",
			palette[i%len(palette)], strings.Join(pts, " "))
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}
