package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// openDataPoint is a figure OpenData Timeseries published for its own
// benchmark (not measured here): a query over 497 series, warm and cold.
type openDataPoint struct {
	Label  string
	Series float64
	Ms     float64
}

var openDataPublished = []openDataPoint{
	{"OpenData, published: cold 13 s", 497, 13000},
	{"OpenData, published: warm 2.1 s", 497, 2100},
}

// coldwarmSVG draws query latency (log scale) against the series count (log
// scale): Shale's cold and warm medians with the cold minimum and maximum as
// a bar, OpenData's published points marked as such, and the 300 ms cold
// goal at 500 series.
func coldwarmSVG(title string, rs []*coldwarmResult) string {
	const w, h = 1000, 520
	const x0, y0, cw, ch = 80, 50, 520, 400
	minX, maxX := 10.0, 10000.0
	minY, maxY := 1.0, 100000.0
	for _, r := range rs {
		minX = math.Min(minX, float64(r.Series))
		maxX = math.Max(maxX, float64(r.Series))
		for _, v := range append(append([]float64{}, r.ColdMs...), r.WarmMs...) {
			if v > 0 {
				minY = math.Min(minY, v)
				maxY = math.Max(maxY, v)
			}
		}
	}
	lx0, lx1 := math.Floor(math.Log10(minX)), math.Ceil(math.Log10(maxX))
	ly0, ly1 := math.Floor(math.Log10(minY)), math.Ceil(math.Log10(maxY))
	px := func(v float64) float64 { return x0 + cw*(math.Log10(v)-lx0)/(lx1-lx0) }
	py := func(v float64) float64 {
		v = math.Max(v, math.Pow(10, ly0))
		return y0 + ch - ch*(math.Log10(v)-ly0)/(ly1-ly0)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&sb, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&sb, `<text x="%d" y="24" text-anchor="middle" font-size="14">%s</text>`+"\n", w/2, html.EscapeString(title))
	fmt.Fprintf(&sb, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", x0, y0, cw, ch)
	for e := ly0; e <= ly1; e++ {
		v := math.Pow(10, e)
		y := py(v)
		fmt.Fprintf(&sb, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", x0, y, x0+cw, y)
		fmt.Fprintf(&sb, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-5, y+4, fmtMs(v))
	}
	for e := lx0; e <= lx1; e++ {
		v := math.Pow(10, e)
		x := px(v)
		fmt.Fprintf(&sb, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x, y0, x, y0+ch)
		fmt.Fprintf(&sb, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, y0+ch+16, fmtNum(v))
	}
	fmt.Fprintf(&sb, `<text x="%d" y="%d" text-anchor="middle">series selected by the query (log scale)</text>`+"\n", x0+cw/2, y0+ch+36)
	fmt.Fprintf(&sb, `<text transform="translate(18 %d) rotate(-90)" text-anchor="middle">query latency (log scale)</text>`+"\n", y0+ch/2)

	// The goal: 500 series cold within 300 ms.
	gx, gy := px(500), py(300)
	fmt.Fprintf(&sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#2ca02c" stroke-dasharray="4 3"/>`+"\n", gx-30, gy, gx+30, gy)

	line := func(color string, val func(*coldwarmResult) float64) {
		var pts []string
		for _, r := range rs {
			if v := val(r); !math.IsNaN(v) && v > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(float64(r.Series)), py(v)))
			}
		}
		if len(pts) > 0 {
			fmt.Fprintf(&sb, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(pts, " "))
		}
		for _, p := range pts {
			x, y, _ := strings.Cut(p, ",")
			fmt.Fprintf(&sb, `<circle cx="%s" cy="%s" r="3.5" fill="%s"/>`+"\n", x, y, color)
		}
	}
	cold, warm := palette[0], palette[1]
	for _, r := range rs {
		lo, hi := minMax(r.ColdMs)
		if lo > 0 {
			x := px(float64(r.Series))
			fmt.Fprintf(&sb, `<line class="spread" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1"/>`+"\n", x, py(lo), x, py(hi), cold)
		}
	}
	line(cold, func(r *coldwarmResult) float64 { return median(r.ColdMs) })
	line(warm, func(r *coldwarmResult) float64 { return median(r.WarmMs) })
	for _, p := range openDataPublished {
		x, y := px(p.Series), py(p.Ms)
		fmt.Fprintf(&sb, `<rect class="opendata" x="%.1f" y="%.1f" width="9" height="9" fill="none" stroke="#555" stroke-width="1.5"/>`+"\n", x-4.5, y-4.5)
		fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" fill="#555">%s</text>`+"\n", x+9, y+4, html.EscapeString(p.Label))
	}

	// Legend and the figures at 500 series.
	lx := x0 + cw + 25
	items := []struct{ color, text string }{
		{cold, "Shale cold (median; bar: min–max)"},
		{warm, "Shale warm (median)"},
	}
	for i, it := range items {
		y := y0 + 10 + i*20
		fmt.Fprintf(&sb, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", lx, y, lx+20, y, it.color)
		fmt.Fprintf(&sb, `<text x="%d" y="%d">%s</text>`+"\n", lx+26, y+4, html.EscapeString(it.text))
	}
	y := y0 + 50
	fmt.Fprintf(&sb, `<rect x="%d" y="%d" width="9" height="9" fill="none" stroke="#555" stroke-width="1.5"/>`+"\n", lx+6, y-4)
	fmt.Fprintf(&sb, `<text x="%d" y="%d">OpenData Timeseries, its published</text>`+"\n", lx+26, y+4)
	fmt.Fprintf(&sb, `<text x="%d" y="%d">figures (not measured here)</text>`+"\n", lx+26, y+20)
	y += 40
	fmt.Fprintf(&sb, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#2ca02c" stroke-dasharray="4 3"/>`+"\n", lx, y, lx+20, y)
	fmt.Fprintf(&sb, `<text x="%d" y="%d">goal: 500 series cold ≤ 300 ms</text>`+"\n", lx+26, y+4)
	y += 30
	for _, r := range rs {
		fmt.Fprintf(&sb, `<text x="%d" y="%d">%s series: cold %s, warm %s</text>`+"\n", lx, y, fmtNum(float64(r.Series)),
			fmtMs(median(r.ColdMs)), fmtMs(median(r.WarmMs)))
		y += 18
	}
	sb.WriteString("</svg>\n")
	return sb.String()
}

// fmtMs formats milliseconds as "350 ms" or "2.1 s".
func fmtMs(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	if v >= 1000 {
		return trimZeros(fmt.Sprintf("%.3g", v/1000)) + " s"
	}
	return fmtNum(v) + " ms"
}
