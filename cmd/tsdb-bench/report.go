package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// percentile returns the p-th percentile (0..100) of xs by the nearest-rank
// method (the smallest value with at least p% of the values at or below
// it); NaN for no values. xs is not modified.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// median is the middle value (mean of the two middle ones for an even
// count) of the values that are not NaN; NaN when there are none.
func median(xs []float64) float64 {
	var s []float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return math.NaN()
	}
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// sysResult is everything measured of one system in one run. NaN marks a
// figure that does not apply (object-store requests of Prometheus) or was
// not measured.
type sysResult struct {
	Name          string
	Version       int
	ActiveSeries  int
	SeriesCreated int64
	Samples       int64
	Failed        int64
	FirstError    string
	DataSpan      time.Duration
	Elapsed       time.Duration

	SamplesPerSec  float64
	RWP50, RWP99   float64 // ms
	CPUPerMSamples float64 // server CPU seconds per million samples
	GenCPUPerM     float64 // generator (this process) CPU seconds per million samples
	PeakRSS        float64 // bytes, VmHWM after ingest
	RSS            float64 // bytes, VmRSS after ingest
	RSSPerSeries   float64 // bytes
	StoredBytes    float64
	BytesPerSample float64
	// BytesPerSampleNoWAL leaves out the write-ahead log.
	BytesPerSampleNoWAL float64
	// BytesPerSampleEnd is measured again after the restarts of the query
	// phase.
	BytesPerSampleEnd float64
	ObjOpsPerMin      float64 // during ingest
	ObjOpsQueryMin    float64 // during the warm queries
	ShutdownSec       float64

	WarmP50, WarmP99 float64 // ms
	ColdP50, ColdP99 float64 // ms
	DiskP50, DiskP99 float64 // ms, after a restart that kept the on-disk cache
	QueryErrors      int
	EmptyDashboards  int
	EmptyNames       []string
	FirstQueryError  string
	PerRange         map[string][2]float64 // range ("1h", "instant") -> warm p50, cold p50 in ms

	// The dashboard refresh pattern (refresh.go): latencies of a whole
	// dashboard, its panels' summed, in ms.
	RefreshFirst, RefreshP50, RefreshP90 float64
	RefreshRounds                        int                   // refreshes after the first evaluation
	RefreshLate                          int                   // refreshes that started late: the one before overran the interval
	RefreshErrors                        int                   // failed panel queries
	RefreshEmpty                         []string              // panels with no series in some evaluation
	RefreshCPU                           float64               // server CPU seconds per refresh interval, ingest and background work included
	RefreshFirstCPU                      float64               // server CPU ms during the first evaluation, live ingest included
	CacheHitRatio                        float64               // Shale's results cache: hit steps / steps over the refreshes
	RefreshByRange                       map[string][2]float64 // range -> first, refresh p50 in ms

	timeline []timePoint
	firstTS  int64 // ms, the first sample sent (refresh.go: over several ingest passes)
}

// timePoint is one bucket of the ingest timeline.
type timePoint struct {
	T             float64 // seconds since the start of the ingest, end of the bucket
	SamplesPerSec float64
	P50, P99      float64 // ms
}

// buildTimeline cuts request records into about n buckets.
func buildTimeline(recs []reqRecord, elapsed time.Duration, n int) []timePoint {
	if len(recs) == 0 || elapsed <= 0 {
		return nil
	}
	width := max(time.Second, (elapsed / time.Duration(n)).Round(time.Second))
	buckets := int(elapsed/width) + 1
	samples := make([]float64, buckets)
	lats := make([][]float64, buckets)
	for _, r := range recs {
		b := min(int(r.done/width), buckets-1)
		if r.ok {
			samples[b] += float64(r.samples)
		}
		lats[b] = append(lats[b], float64(r.latency)/float64(time.Millisecond))
	}
	var out []timePoint
	for b := range buckets {
		end := time.Duration(b+1) * width
		w := width
		if end > elapsed {
			w = elapsed - time.Duration(b)*width
			end = elapsed
		}
		if w < width/4 { // a sliver at the end says little
			continue
		}
		out = append(out, timePoint{
			T:             end.Seconds(),
			SamplesPerSec: samples[b] / w.Seconds(),
			P50:           percentile(lats[b], 50),
			P99:           percentile(lats[b], 99),
		})
	}
	return out
}

// row is one line of the report table.
type row struct {
	label string
	value func(r *sysResult) float64
	unit  string
	lower bool // lower is better (ratios are always shale / peer)
}

var reportRows = []row{
	{"active series", func(r *sysResult) float64 { return float64(r.ActiveSeries) }, "count", false},
	{"series created (churn included)", func(r *sysResult) float64 { return float64(r.SeriesCreated) }, "count", false},
	{"samples written", func(r *sysResult) float64 { return float64(r.Samples) }, "count", false},
	{"data time covered", func(r *sysResult) float64 { return r.DataSpan.Hours() }, "h", false},
	{"sustained ingest", func(r *sysResult) float64 { return r.SamplesPerSec }, "samples/s", false},
	{"remote-write latency p50", func(r *sysResult) float64 { return r.RWP50 }, "ms", true},
	{"remote-write latency p99", func(r *sysResult) float64 { return r.RWP99 }, "ms", true},
	{"server CPU per million samples", func(r *sysResult) float64 { return r.CPUPerMSamples }, "CPU-s", true},
	{"generator CPU per million samples", func(r *sysResult) float64 { return r.GenCPUPerM }, "CPU-s", true},
	{"peak RSS (VmHWM)", func(r *sysResult) float64 { return r.PeakRSS / (1 << 20) }, "MiB", true},
	{"RSS per active series", func(r *sysResult) float64 { return r.RSSPerSeries }, "bytes", true},
	{"stored bytes per sample", func(r *sysResult) float64 { return r.BytesPerSample }, "bytes", true},
	{"stored bytes per sample, WAL left out", func(r *sysResult) float64 { return r.BytesPerSampleNoWAL }, "bytes", true},
	{"stored bytes per sample, after the restarts", func(r *sysResult) float64 { return r.BytesPerSampleEnd }, "bytes", true},
	{"object-store requests, ingest", func(r *sysResult) float64 { return r.ObjOpsPerMin }, "per min", true},
	{"object-store requests, warm queries", func(r *sysResult) float64 { return r.ObjOpsQueryMin }, "per min", true},
	{"query p50, warm", func(r *sysResult) float64 { return r.WarmP50 }, "ms", true},
	{"query p99, warm", func(r *sysResult) float64 { return r.WarmP99 }, "ms", true},
	{"query p50, cold (after restart)", func(r *sysResult) float64 { return r.ColdP50 }, "ms", true},
	{"query p99, cold (after restart)", func(r *sysResult) float64 { return r.ColdP99 }, "ms", true},
	{"query p50, restart keeping the disk cache", func(r *sysResult) float64 { return r.DiskP50 }, "ms", true},
	{"query p99, restart keeping the disk cache", func(r *sysResult) float64 { return r.DiskP99 }, "ms", true},
	{"query errors", func(r *sysResult) float64 { return ifQueried(r, r.QueryErrors) }, "count", true},
	{"empty dashboard results", func(r *sysResult) float64 { return ifQueried(r, r.EmptyDashboards) }, "count", true},
	{"shutdown time", func(r *sysResult) float64 { return r.ShutdownSec }, "s", true},
	{"dashboard first evaluation, panels summed", func(r *sysResult) float64 { return r.RefreshFirst }, "ms", true},
	{"server CPU during the first evaluation (live ingest included)", func(r *sysResult) float64 { return r.RefreshFirstCPU }, "CPU-ms", true},
	{"dashboard refresh p50, panels summed", func(r *sysResult) float64 { return r.RefreshP50 }, "ms", true},
	{"dashboard refresh p90, panels summed", func(r *sysResult) float64 { return r.RefreshP90 }, "ms", true},
	{"server CPU per refresh interval (ingest, background work included)", func(r *sysResult) float64 { return r.RefreshCPU }, "CPU-s", true},
	{"results-cache hit ratio over the refreshes", func(r *sysResult) float64 { return r.CacheHitRatio }, "ratio", false},
	{"dashboard refreshes", func(r *sysResult) float64 { return ifRefreshed(r, r.RefreshRounds) }, "count", false},
	{"dashboard refreshes started late", func(r *sysResult) float64 { return ifRefreshed(r, r.RefreshLate) }, "count", true},
	{"dashboard query errors", func(r *sysResult) float64 { return ifRefreshed(r, r.RefreshErrors) }, "count", true},
}

// ifRefreshed returns n, or NaN when the run had no dashboard refreshes.
func ifRefreshed(r *sysResult, n int) float64 {
	if r.RefreshByRange == nil {
		return math.NaN()
	}
	return float64(n)
}

// ifQueried returns n, or NaN when the system was not queried.
func ifQueried(r *sysResult, n int) float64 {
	if r.PerRange == nil {
		return math.NaN()
	}
	return float64(n)
}

// fmtNum formats a figure with three significant digits and k/M suffixes.
func fmtNum(v float64) string {
	switch {
	case math.IsNaN(v):
		return "—"
	case v == 0:
		return "0"
	case math.Abs(v) >= 1e6:
		return trimZeros(fmt.Sprintf("%.3g", v/1e6)) + "M"
	case math.Abs(v) >= 1e4:
		return trimZeros(fmt.Sprintf("%.3g", v/1e3)) + "k"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return trimZeros(fmt.Sprintf("%.3g", v))
	}
}

func trimZeros(s string) string {
	if strings.ContainsAny(s, "e") || !strings.Contains(s, ".") {
		return s
	}
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// si formats a rate or count for the progress line.
func si(v float64) string { return fmtNum(v) }

// reportTable renders the medians of runs (runs[i] holds one result per
// system, in the same order) as a Markdown table with a column per system
// and a ratio column "shale / <peer>" for each peer that is not Shale: an
// OTLP peer (name ending in -otlp) is compared with shale-otlp, the others
// with shale.
func reportTable(runs [][]*sysResult) string {
	if len(runs) == 0 || len(runs[0]) == 0 {
		return ""
	}
	names := make([]string, len(runs[0]))
	for i, r := range runs[0] {
		names[i] = r.Name
	}
	type pair struct{ shale, peer int }
	var pairs []pair
	for i, n := range names {
		if n == "null" || strings.HasPrefix(n, "shale") {
			continue
		}
		own := "shale"
		if strings.HasSuffix(n, "-otlp") {
			own = "shale-otlp"
		}
		if s := slices.Index(names, own); s >= 0 {
			pairs = append(pairs, pair{s, i})
		}
	}
	var b strings.Builder
	b.WriteString("| figure | unit |")
	for _, n := range names {
		b.WriteString(" " + n + " |")
	}
	for _, p := range pairs {
		b.WriteString(" " + names[p.shale] + " / " + names[p.peer] + " |")
	}
	b.WriteString("\n|---|---|")
	for range len(names) + len(pairs) {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, rw := range reportRows {
		med := make([]float64, len(names))
		for i := range names {
			var xs []float64
			for _, run := range runs {
				if i < len(run) && run[i] != nil {
					xs = append(xs, rw.value(run[i]))
				}
			}
			med[i] = median(xs)
		}
		allNaN := true
		for _, m := range med {
			allNaN = allNaN && math.IsNaN(m)
		}
		if allNaN {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s |", rw.label, rw.unit)
		for _, m := range med {
			b.WriteString(" " + fmtNum(m) + " |")
		}
		for _, p := range pairs {
			b.WriteString(" " + ratio(med[p.shale], med[p.peer]) + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ratio formats a/b as "1.23x", or "—" when either is missing or b is 0.
func ratio(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return "—"
	}
	return trimZeros(fmt.Sprintf("%.3g", a/b)) + "x"
}

// perQueryTable renders warm and cold p50 by query range (medians of runs).
func perQueryTable(runs [][]*sysResult) string {
	return pairTable(runs, "| system | range | warm p50 ms | cold p50 ms |\n|---|---|---:|---:|\n",
		[]string{"1h", "6h", "24h", "instant"}, func(r *sysResult) map[string][2]float64 { return r.PerRange })
}

// refreshTable renders the first evaluation and the refresh p50 of the
// dashboard by panel range (medians of runs).
func refreshTable(runs [][]*sysResult, ranges []time.Duration) string {
	keys := make([]string, len(ranges))
	for i, rg := range ranges {
		keys[i] = fmtRange(rg)
	}
	return pairTable(runs, "| system | range | first evaluation ms | refresh p50 ms |\n|---|---|---:|---:|\n",
		keys, func(r *sysResult) map[string][2]float64 { return r.RefreshByRange })
}

// pairTable renders below header a row for each system and key of the
// systems whose figures (by) were measured: the medians over runs of the
// two figures by holds under the key. A key no run measured has no row.
func pairTable(runs [][]*sysResult, header string, keys []string, by func(*sysResult) map[string][2]float64) string {
	if len(runs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(header)
	for i, r0 := range runs[0] {
		if by(r0) == nil {
			continue
		}
		for _, k := range keys {
			var first, second []float64
			for _, run := range runs {
				if i < len(run) && run[i] != nil {
					if v, ok := by(run[i])[k]; ok {
						first = append(first, v[0])
						second = append(second, v[1])
					}
				}
			}
			if len(first) > 0 {
				fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r0.Name, k, fmtNum(median(first)), fmtNum(median(second)))
			}
		}
	}
	return b.String()
}
