// Command tsdb-bench is the end-to-end benchmark: it starts Shale,
// Prometheus and VictoriaMetrics one after another on 127.0.0.1 with fresh
// data folders, sends each the same node_exporter-like remote-write load,
// runs dashboard and alerting queries warm and cold (after a restart), and
// writes a table of the figures with Shale's ratio to each peer, plus an SVG
// of throughput and latency over time.
//
//	make bench-e2e BENCH_ARGS='-series=10000 -duration=30s'
//
// With -refreshes=N it measures a dashboard left open instead: history, then
// real-time samples while the dashboard's range queries are refreshed every
// -refresh-interval with their end at now (refresh.go).
//
// With -mode=soak it runs the fault soak instead (soak.go):
//
//	make soak-short   # 15 min; make soak: 2 h
//
// With -mode=coldwarm it measures cold and warm query latency by series
// count with the data in versitygw behind a latency proxy (coldwarm.go).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// options are the command-line settings.
type options struct {
	load      loadConfig
	span      time.Duration
	systems   []string
	out       string
	runs      int
	rounds    int
	shaleBin  string
	promBin   string
	vmBin     string
	shaleArgs string
	promArgs  string
	vmArgs    string
	keepData  bool
	noQueries bool
	s3Latency time.Duration
	mode      string
	soak      soakConfig
	coldwarm  coldwarmConfig

	// The dashboard refresh pattern (refresh.go); off when refreshes is 0.
	refreshes     int
	refreshEvery  time.Duration
	refreshRanges []time.Duration

	// dataEnd is where compressed-time data ends, in ms: set at the first
	// system's run and kept for every system and run of the invocation.
	dataEnd int64
}

// window returns the compressed-time data window [start, end] in ms, the
// same for every system and run: with data ending at each run's own wall
// clock, a short run's few minutes of data fell on different sides of a 24 h
// panel's step-aligned end for different systems, which then answered
// different queries (one empty, one not).
func (o *options) window(interval time.Duration) (start, end int64) {
	if o.dataEnd == 0 {
		o.dataEnd = time.Now().Truncate(interval).UnixMilli()
	}
	return o.dataEnd - o.span.Milliseconds(), o.dataEnd
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("tsdb-bench", flag.ContinueOnError)
	fs.IntVar(&o.load.Series, "series", 10000, "active series (rounded up to whole targets)")
	fs.IntVar(&o.load.PerTarget, "series-per-target", 500, "series per node_exporter-like target")
	fs.IntVar(&o.load.Batch, "batch", 500, "series per remote-write request (rounded to whole targets)")
	fs.IntVar(&o.load.PerSeries, "samples-per-series", 1, "compressed time: consecutive scrapes of each series in one request")
	fs.DurationVar(&o.load.Interval, "interval", 15*time.Second, "scrape interval of the generated data")
	fs.DurationVar(&o.span, "span", 24*time.Hour, "compressed time: data time to send, ending when the first system starts (so 24 h queries have data); every system and run gets the same timestamps")
	fs.BoolVar(&o.load.RealTime, "realtime", false, "real time: one step per -interval with the wall clock's timestamps, for -duration")
	fs.DurationVar(&o.load.Duration, "duration", 0, "wall-clock limit of each system's ingest; 0: until -span is sent (compressed time) or 5m (real time); soak: the run's length, 0: 2h")
	fs.Float64Var(&o.load.Rate, "rate", 0, "samples/s to send; 0 sends as fast as the receiver accepts")
	fs.IntVar(&o.load.Concurrency, "concurrency", 32, "remote-write requests in flight; soak: the most in flight (Prometheus' max_shards), 0: no bound")
	fs.IntVar(&o.load.Window, "window", 8, "most steps one sender may run ahead of the slowest")
	fs.Float64Var(&o.load.Churn, "churn", 0, "fraction of targets replaced by a new instance every -churn-every of data time")
	fs.DurationVar(&o.load.ChurnEvery, "churn-every", time.Hour, "data-time period of churn")
	fs.DurationVar(&o.load.Progress, "progress", 5*time.Second, "period of the progress line; 0 disables it")
	fs.Uint64Var(&o.load.Seed, "seed", 1, "seed of the generated values")
	sys := fs.String("systems", "null,shale,shale-rw2,prometheus,victoria-metrics",
		"systems in the order they run: null (the generator alone), shale (remote write 1.0), shale-rw2 (2.0), shale-otlp (OTLP/HTTP protobuf, a gauge data point per sample), shale-nowal (acknowledged once in memory), shale-nocache (results cache off), shale-s3 (on versitygw behind a proxy adding -s3-latency), prometheus, victoria-metrics, and prometheus-otlp and victoria-metrics-otlp (their OTLP receivers)")
	fs.StringVar(&o.out, "out", "bench-out", "folder for the report, the SVG, the results JSON and the systems' data")
	fs.IntVar(&o.runs, "runs", 1, "repeat the whole benchmark; the table shows medians")
	fs.IntVar(&o.rounds, "query-rounds", 3, "warm rounds of the query set (after one warm-up round)")
	fs.StringVar(&o.shaleBin, "shale-bin", "bin/tsdb", "Shale server binary (make build)")
	fs.StringVar(&o.promBin, "prometheus-bin", "prometheus", "Prometheus binary (apt-get install prometheus)")
	fs.StringVar(&o.vmBin, "victoria-metrics-bin", "/usr/bin/victoria-metrics", "VictoriaMetrics binary (apt-get install victoria-metrics)")
	fs.StringVar(&o.shaleArgs, "shale-args", "", "further Shale flags, space-separated")
	fs.StringVar(&o.promArgs, "prometheus-args", "", "further Prometheus flags, space-separated")
	fs.StringVar(&o.vmArgs, "victoria-metrics-args", "", "further VictoriaMetrics flags, space-separated")
	fs.DurationVar(&o.s3Latency, "s3-latency", 50*time.Millisecond, "shale-s3: latency the proxy in front of versitygw (-versitygw-bin) adds to every object-store request")
	fs.BoolVar(&o.keepData, "keep-data", false, "keep the systems' data folders under -out")
	fs.BoolVar(&o.noQueries, "skip-queries", false, "measure the ingest and the stored bytes only (no queries, no restarts)")
	fs.StringVar(&o.mode, "mode", "bench", "bench: the side-by-side benchmark; soak: the fault soak of Shale on S3 (soak.go); coldwarm: cold and warm query latency by series count on S3 (coldwarm.go)")
	fs.IntVar(&o.refreshes, "refreshes", 0, "dashboard refresh pattern (refresh.go): backfill -span ending now, ingest in real time, open the dashboard's range queries with their end at now, then refresh them this many times; 0: the usual benchmark")
	fs.DurationVar(&o.refreshEvery, "refresh-interval", 30*time.Second, "the dashboard's refresh interval (with -refreshes)")
	ranges := fs.String("refresh-ranges", "1h,6h", "the dashboard's time ranges, comma-separated: each panel is queried over each (with -refreshes)")
	addSoakFlags(fs, &o.soak)
	var cwSeries string
	addColdWarmFlags(fs, &o.coldwarm, &cwSeries)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch o.mode {
	case "bench":
	case "soak":
		if o.load.Interval < time.Second || o.load.PerTarget < 1 || o.load.Series < 1 {
			return nil, errors.New("-interval must be at least 1s; -series and -series-per-target at least 1")
		}
		if err := finishSoakFlags(o); err != nil {
			return nil, err
		}
		return o, nil
	case "coldwarm":
		if err := finishColdWarmFlags(o, cwSeries); err != nil {
			return nil, err
		}
		return o, nil
	default:
		return nil, fmt.Errorf("-mode %q: want bench, soak or coldwarm", o.mode)
	}
	o.systems = strings.Split(*sys, ",")
	if o.load.Interval < time.Second || o.load.PerTarget < 1 || o.load.Series < 1 || o.runs < 1 {
		return nil, errors.New("-interval must be at least 1s; -series, -series-per-target and -runs at least 1")
	}
	if o.refreshes < 0 || (o.refreshes > 0 && o.refreshEvery <= 0) {
		return nil, errors.New("-refreshes must not be negative, -refresh-interval positive")
	}
	var err error
	if o.refreshRanges, err = parseRanges(*ranges); err != nil {
		return nil, err
	}
	if o.load.RealTime && o.load.Duration == 0 {
		o.load.Duration = 5 * time.Minute
	}
	if o.load.Duration == 0 {
		o.load.Duration = 100 * 24 * time.Hour
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "tsdb-bench:", err)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	switch o.mode {
	case "soak":
		err = runSoak(ctx, o, os.Stdout)
	case "coldwarm":
		err = runColdWarm(ctx, o, os.Stdout)
	default:
		err = run(ctx, o, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tsdb-bench:", err)
		os.Exit(1)
	}
}

// newSystem resolves a system name to what starts it.
func (o *options) newSystem(name string) (*system, error) {
	s := &system{name: name, version: 1}
	var hint string
	switch name {
	case "null":
		s.kind = "null"
		return s, nil
	case "shale", "shale-rw2", "shale-otlp", "shale-nowal", "shale-nocache", "shale-s3":
		s.kind, s.bin, hint = "shale", o.shaleBin, "make build"
		s.extra = strings.Fields(o.shaleArgs)
		switch name {
		case "shale-rw2":
			s.version = 2
		case "shale-otlp":
			s.version = versionOTLP
		case "shale-nowal":
			s.extra = append(s.extra, "--storage.wal=false")
		case "shale-nocache":
			s.extra = append(s.extra, "--query.results-cache.size=0")
		case "shale-s3":
			s.startS3 = func(ctx context.Context, dir string) (*s3Backend, error) { return startS3Backend(ctx, o, dir) }
		}
	case "prometheus", "prometheus-otlp":
		s.kind, s.bin, hint = "prometheus", o.promBin, "apt-get install prometheus"
		s.extra = strings.Fields(o.promArgs)
		if name == "prometheus-otlp" {
			s.version = versionOTLP
			s.extra = append(s.extra, "--web.enable-otlp-receiver")
		}
	case "victoria-metrics", "victoria-metrics-otlp":
		s.kind, s.bin, hint = "victoria-metrics", o.vmBin, "apt-get install victoria-metrics"
		s.extra = strings.Fields(o.vmArgs)
		if name == "victoria-metrics-otlp" {
			s.version = versionOTLP
		}
	default:
		return nil, fmt.Errorf("unknown system %q", name)
	}
	p, err := exec.LookPath(s.bin)
	if err != nil {
		return nil, fmt.Errorf("%s: %s not found (%s): %w", name, s.bin, hint, err)
	}
	s.bin, _ = filepath.Abs(p)
	return s, nil
}

// run runs every system o.runs times and writes the report.
func run(ctx context.Context, o *options, stdout *os.File) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	var runs [][]*sysResult
	var skipped []string
	for i := range o.runs {
		var results []*sysResult
		for _, name := range o.systems {
			s, err := o.newSystem(name)
			if err != nil {
				fmt.Fprintln(os.Stderr, "tsdb-bench: skipping", err)
				if i == 0 {
					skipped = append(skipped, err.Error())
				}
				continue
			}
			if o.refreshes > 0 && s.kind == "null" {
				continue // nothing to query
			}
			fmt.Fprintf(os.Stderr, "== run %d/%d: %s\n", i+1, o.runs, name)
			bench := o.benchSystem
			if o.refreshes > 0 {
				bench = o.refreshSystem
			}
			r, err := bench(ctx, s)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			results = append(results, r)
		}
		runs = append(runs, results)
		if err := writeOutputs(o, runs, skipped); err != nil {
			return err
		}
	}
	report, _ := os.ReadFile(filepath.Join(o.out, "report.md"))
	_, _ = stdout.Write(report)
	return nil
}

// benchSystem runs the ingest, the warm queries, a restart and the cold
// queries against one system.
func (o *options) benchSystem(ctx context.Context, s *system) (*sysResult, error) {
	if err := s.prepare(filepath.Join(o.out, "data")); err != nil {
		return nil, err
	}
	if !o.keepData {
		defer o.removeKeepingLog(s)
	}
	defer s.closeBackend()
	cfg := o.load
	cfg.Version, cfg.Name = s.version, s.name
	if !cfg.RealTime {
		cfg.Start, cfg.End = o.window(cfg.Interval)
	}
	gen, err := newGenerator(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	defer s.stop()

	pid := s.pid()
	self := os.Getpid()
	cpu0, err := procCPUSeconds(pid)
	if err != nil {
		return nil, err
	}
	self0, _ := procCPUSeconds(self)
	ops0 := s.objstoreOps()
	lr, err := gen.run(ctx, s.writeURL())
	if err != nil {
		return nil, err
	}
	cpu1, err := procCPUSeconds(pid)
	if err != nil {
		return nil, fmt.Errorf("read CPU time (did the server exit? see %s): %w", filepath.Join(s.dir, "log.txt"), err)
	}
	self1, _ := procCPUSeconds(self)
	ops1 := s.objstoreOps()
	rss, hwm, err := procMemory(pid)
	if err != nil {
		return nil, err
	}

	r := &sysResult{
		Name: s.name, Version: s.version, ActiveSeries: lr.ActiveSeries, SeriesCreated: lr.SeriesCreated,
		Samples: lr.Samples, Failed: lr.Failed, FirstError: lr.FirstError, Elapsed: lr.Elapsed,
		DataSpan: time.Duration(lr.LastTS-lr.FirstTS) * time.Millisecond,
	}
	r.SamplesPerSec = float64(lr.Samples) / lr.Elapsed.Seconds()
	lats := make([]float64, 0, len(lr.records))
	for _, rec := range lr.records {
		lats = append(lats, float64(rec.latency)/float64(time.Millisecond))
	}
	mSamples := float64(lr.Samples) / 1e6
	r.timeline = buildTimeline(lr.records, lr.Elapsed, 120)
	r.unmeasured()
	r.RWP50, r.RWP99 = percentile(lats, 50), percentile(lats, 99)
	r.GenCPUPerM = (self1 - self0) / mSamples
	if ops0 >= 0 && ops1 >= 0 {
		r.ObjOpsPerMin = (ops1 - ops0) / lr.Elapsed.Minutes()
	}
	if s.kind == "null" {
		return r, nil
	}
	r.CPUPerMSamples = (cpu1 - cpu0) / mSamples
	r.PeakRSS, r.RSS = float64(hwm), float64(rss)
	r.RSSPerSeries = float64(rss) / float64(lr.ActiveSeries)

	if o.noQueries {
		r.ShutdownSec = s.stop().Seconds()
		r.setStored(s, lr.Samples)
		return r, nil
	}

	// Warm queries: one warm-up round, then o.rounds measured rounds.
	end := time.UnixMilli(lr.LastTS)
	qs := querySet()
	s.flush(ctx)
	fmt.Fprintf(os.Stderr, "[%s] queries, warm (%d rounds of %d)\n", s.name, o.rounds, len(qs))
	first := runQueries(ctx, s.base(), qs, end, cfg.Interval)
	var warm []queryResult
	qops0, qt0 := s.objstoreOps(), time.Now()
	for range o.rounds {
		warm = append(warm, runQueries(ctx, s.base(), qs, end, cfg.Interval)...)
	}
	if qops1 := s.objstoreOps(); qops0 >= 0 && qops1 >= 0 {
		r.ObjOpsQueryMin = (qops1 - qops0) / time.Since(qt0).Minutes()
	}
	r.ShutdownSec = s.stop().Seconds()
	r.setStored(s, lr.Samples)

	// Cold queries: the first round after a restart with on-disk caches
	// emptied.
	if err := s.dropCaches(); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "[%s] restart, queries cold\n", s.name)
	if err := s.start(ctx); err != nil {
		return nil, fmt.Errorf("restart: %w", err)
	}
	s.flush(ctx)
	cold := runQueries(ctx, s.base(), qs, end, cfg.Interval)
	s.stop()
	summariseQueries(r, first, warm, cold)

	// Systems with an on-disk cache: once more after a restart that keeps it.
	if s.kind == "shale" || s.kind == "victoria-metrics" {
		fmt.Fprintf(os.Stderr, "[%s] restart keeping the on-disk cache, queries\n", s.name)
		if err := s.start(ctx); err != nil {
			return nil, fmt.Errorf("restart: %w", err)
		}
		kept := runQueries(ctx, s.base(), qs, end, cfg.Interval)
		s.stop()
		var xs []float64
		for _, q := range kept {
			if q.Err == "" {
				xs = append(xs, float64(q.Latency)/float64(time.Millisecond))
			} else {
				r.QueryErrors++
			}
		}
		r.DiskP50, r.DiskP99 = percentile(xs, 50), percentile(xs, 99)
	}
	// Background work (compaction, garbage collection) may have shrunk the
	// data while the restarted system served the queries.
	if b, _, err := s.storedBytes(); err == nil {
		r.BytesPerSampleEnd = float64(b) / float64(lr.Samples)
	}
	return r, nil
}

// unmeasured sets every figure of r that a run may leave unmeasured to NaN
// ("—" in the report) but the samples per second.
func (r *sysResult) unmeasured() {
	nan := math.NaN()
	r.RWP50, r.RWP99, r.GenCPUPerM = nan, nan, nan
	r.PeakRSS, r.RSS, r.RSSPerSeries = nan, nan, nan
	r.CPUPerMSamples, r.StoredBytes, r.BytesPerSample, r.BytesPerSampleNoWAL = nan, nan, nan, nan
	r.ObjOpsPerMin, r.ObjOpsQueryMin = nan, nan
	r.WarmP50, r.WarmP99, r.ColdP50, r.ColdP99, r.ShutdownSec = nan, nan, nan, nan, nan
	r.DiskP50, r.DiskP99, r.BytesPerSampleEnd = nan, nan, nan
	r.RefreshFirst, r.RefreshP50, r.RefreshP90, r.RefreshCPU, r.RefreshFirstCPU, r.CacheHitRatio = nan, nan, nan, nan, nan, nan
}

// setStored measures the stored bytes of a stopped system.
func (r *sysResult) setStored(s *system, samples int64) {
	if b, wal, err := s.storedBytes(); err == nil {
		r.StoredBytes = float64(b)
		r.BytesPerSample = float64(b) / float64(samples)
		r.BytesPerSampleNoWAL = float64(b-wal) / float64(samples)
	}
}

// summariseQueries fills the query figures of r.
func summariseQueries(r *sysResult, first, warm, cold []queryResult) {
	lat := func(rs []queryResult, key string) []float64 {
		var xs []float64
		for _, q := range rs {
			if q.Err == "" && (key == "" || rangeKey(q.Query) == key) {
				xs = append(xs, float64(q.Latency)/float64(time.Millisecond))
			}
		}
		return xs
	}
	w, c := lat(warm, ""), lat(cold, "")
	r.WarmP50, r.WarmP99 = percentile(w, 50), percentile(w, 99)
	r.ColdP50, r.ColdP99 = percentile(c, 50), percentile(c, 99)
	r.PerRange = map[string][2]float64{}
	for _, k := range []string{"1h", "6h", "24h", "instant"} {
		r.PerRange[k] = [2]float64{percentile(lat(warm, k), 50), percentile(lat(cold, k), 50)}
	}
	for _, rs := range [][]queryResult{first, warm, cold} {
		for _, q := range rs {
			if q.Err != "" {
				r.QueryErrors++
				if r.FirstQueryError == "" {
					r.FirstQueryError = q.Query.Name + ": " + q.Err
				}
			}
		}
	}
	for _, q := range first {
		if q.Err == "" && q.Query.Range > 0 && q.Series == 0 {
			r.EmptyDashboards++
			r.EmptyNames = append(r.EmptyNames, q.Query.Name)
		}
	}
}

func rangeKey(q benchQuery) string {
	if q.Range == 0 {
		return "instant"
	}
	return fmtRange(q.Range)
}

// writeOutputs writes report.md, results.json and timeline.svg under o.out.
func writeOutputs(o *options, runs [][]*sysResult, skipped []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# tsdb-bench report\n\nCommand: `tsdb-bench %s`\n\n", strings.Join(os.Args[1:], " "))
	fmt.Fprintf(&b, "Runs: %d (figures are medians over runs). Load: %d active series, %d per target, %d per request, interval %s, ",
		len(runs), o.load.Series, o.load.PerTarget, o.load.Batch, o.load.Interval)
	if o.refreshes > 0 {
		fmt.Fprintf(&b, "%s of history sent as fast as accepted, then real time while a dashboard of %d panels (%s) is opened and refreshed %d times every %s",
			o.span, len(dashboardSet(o.refreshRanges)), rangesText(o.refreshRanges), o.refreshes, o.refreshEvery)
	} else if o.load.RealTime {
		b.WriteString("real time")
	} else {
		fmt.Fprintf(&b, "compressed time over a span of %s", o.span)
	}
	fmt.Fprintf(&b, ", concurrency %d, churn %g per %s, rate %s.\n\n", o.load.Concurrency, o.load.Churn, o.load.ChurnEvery, rateText(o.load.Rate))
	b.WriteString(reportTable(runs))
	if o.refreshes > 0 {
		b.WriteString("\nDashboard latency by panel range (the panels of that range summed):\n\n")
		b.WriteString(refreshTable(runs, o.refreshRanges))
	} else {
		b.WriteString("\nQuery latency by range (p50 over the queries of that range):\n\n")
		b.WriteString(perQueryTable(runs))
	}
	b.WriteString("\nNotes:\n")
	for _, r := range runs[len(runs)-1] {
		if r.Failed > 0 {
			fmt.Fprintf(&b, "- %s: %d requests failed; first error: %s\n", r.Name, r.Failed, r.FirstError)
		}
		if len(r.RefreshEmpty) > 0 {
			fmt.Fprintf(&b, "- %s: dashboard panels with no series in some evaluation: %s\n", r.Name, strings.Join(r.RefreshEmpty, ", "))
		}
		if len(r.EmptyNames) > 0 {
			fmt.Fprintf(&b, "- %s: dashboard queries with no series: %s\n", r.Name, strings.Join(r.EmptyNames, ", "))
		}
		if r.FirstQueryError != "" {
			fmt.Fprintf(&b, "- %s: first query error: %s\n", r.Name, r.FirstQueryError)
		}
	}
	for _, s := range skipped {
		fmt.Fprintf(&b, "- skipped %s\n", s)
	}
	if err := os.WriteFile(filepath.Join(o.out, "report.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	js, err := json.MarshalIndent(jsonSafe(runs), "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "results.json"), js, 0o644); err != nil {
		return err
	}
	last := runs[len(runs)-1]
	title := fmt.Sprintf("tsdb-bench: %d series, remote write, compressed time", o.load.Series)
	if o.load.RealTime {
		title = fmt.Sprintf("tsdb-bench: %d series, remote write, real time", o.load.Series)
	}
	return os.WriteFile(filepath.Join(o.out, "timeline.svg"), []byte(timelineSVG(title, last)), 0o644)
}

func rangesText(rs []time.Duration) string {
	var s []string
	for _, r := range rs {
		s = append(s, fmtRange(r))
	}
	return strings.Join(s, ", ")
}

func rateText(r float64) string {
	if r <= 0 {
		return "as fast as accepted"
	}
	return fmtNum(r) + " samples/s"
}

// jsonSafe turns the results into maps with NaN replaced by nil, which
// encoding/json cannot write.
func jsonSafe(runs [][]*sysResult) any {
	var out [][]map[string]any
	for _, run := range runs {
		var rs []map[string]any
		for _, r := range run {
			b, _ := json.Marshal(struct {
				Name, FirstError, FirstQueryError string
				Version, ActiveSeries             int
				SeriesCreated, Samples, Failed    int64
				DataSpanHours, ElapsedSeconds     float64
			}{r.Name, r.FirstError, r.FirstQueryError, r.Version, r.ActiveSeries, r.SeriesCreated, r.Samples, r.Failed,
				r.DataSpan.Hours(), r.Elapsed.Seconds()})
			m := map[string]any{}
			_ = json.Unmarshal(b, &m)
			for _, rw := range reportRows {
				if v := rw.value(r); !math.IsNaN(v) {
					m[rw.label+" ("+rw.unit+")"] = v
				}
			}
			rs = append(rs, m)
		}
		out = append(out, rs)
	}
	return out
}
