package main

// The cold and warm query benchmark (-mode=coldwarm). For each series count
// it writes -coldwarm-span of data (N series of node_cpu_seconds_total, a
// counter, at -interval) through the server binary into a bucket of a real
// S3-compatible server (versitygw) reached through the fault proxy, which adds
// -store-latency to every request from the first restart on. Then, -coldwarm-colds
// times: the server is stopped, its disk cache folder emptied, started again
// (RAM and disk caches empty, cache warming off), and the range query
// -coldwarm-query over the whole span is asked once (cold) and then
// -coldwarm-warms times more (warm). The proxy's trace of each cold query
// gives its object-store requests, bytes and sequential waves.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"

	"github.com/shaledb/shale/internal/versitygw"
)

// coldwarmConfig holds the settings of -mode=coldwarm.
type coldwarmConfig struct {
	Series    []int         // series counts, one measurement each
	PerTarget int           // series per target (node_cpu_seconds_total of 10 CPU modes)
	Span      time.Duration // data time written and queried
	Colds     int           // restarts (cold queries) per series count
	Warms     int           // warm queries after each cold one
	Query     string        // the range query
	Step      time.Duration // its step: about 240 points over the span, as a dashboard panel asks
	Replot    string        // a coldwarm.json to draw the report and chart of again, measuring nothing
}

func addColdWarmFlags(fs *flag.FlagSet, c *coldwarmConfig, series *string) {
	fs.StringVar(series, "coldwarm-series", "10,100,500,1000,10000", "coldwarm: series counts to measure, comma-separated")
	fs.DurationVar(&c.Span, "coldwarm-span", 6*time.Hour, "coldwarm: data time written, and the range of the query")
	fs.IntVar(&c.Colds, "coldwarm-colds", 5, "coldwarm: restarts with empty caches (cold queries) per series count")
	fs.IntVar(&c.Warms, "coldwarm-warms", 5, "coldwarm: warm queries after each cold one")
	fs.StringVar(&c.Replot, "coldwarm-replot", "", "coldwarm: write the report and chart of this coldwarm.json (of an earlier run) under -out again, measuring nothing")
	fs.StringVar(&c.Query, "coldwarm-query", `sum by (mode) (rate(node_cpu_seconds_total[5m]))`, "coldwarm: the range query (it must select every series written)")
}

// finishColdWarmFlags checks the coldwarm settings.
func finishColdWarmFlags(o *options, series string) error {
	c := &o.coldwarm
	c.Series = nil
	for f := range strings.SplitSeq(series, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return fmt.Errorf("-coldwarm-series: %q is not a positive count", f)
		}
		c.Series = append(c.Series, n)
	}
	if len(c.Series) == 0 {
		return errors.New("-coldwarm-series: no series count")
	}
	if c.Colds < 1 || c.Warms < 1 {
		return errors.New("-coldwarm-colds and -coldwarm-warms must be at least 1")
	}
	if o.load.Interval < time.Second || c.Span < 10*o.load.Interval {
		return errors.New("-interval must be at least 1s and -coldwarm-span at least 10 intervals")
	}
	c.Step = queryStep(c.Span, o.load.Interval)
	c.PerTarget = 10
	return nil
}

// coldwarmResult is what one series count measured.
type coldwarmResult struct {
	Series  int   // series written (and selected by the query)
	Samples int64 // samples written
	Tables  int   // SSTs in the bucket when the queries ran
	// One value per restart.
	StartupMs  []float64 // start to ready
	ColdMs     []float64
	ColdReqs   []float64 // object-store reads (GET, HEAD) during the cold query
	ColdBytes  []float64 // bytes of their answers
	ColdReadMs []float64 // from the query's start until the last of them was answered
	ColdWaves  []float64 // sequential waves of requests (traceWaves)
	ColdCPUMs  []float64 // the server's CPU time over the cold query
	WarmMs     []float64 // every warm query
	WarmCPUMs  []float64
	WarmReqs   []float64 // reads, as ColdReqs
	WarmBytes  []float64
	ResultSize int // series in the query's answer
	Trace      []proxyEvent
	TraceStart time.Time // when the traced cold query was sent
}

// coldwarmEnv is what every series count shares: the S3 server, the proxy in
// front of it and the server binary.
type coldwarmEnv struct {
	o        *options
	s3       *versitygw.Server
	proxy    *faultProxy
	proxyURL string
	shaleBin string
	dir      string
	latency  time.Duration
}

// runColdWarm runs the coldwarm benchmark and writes coldwarm.md,
// coldwarm.json, coldwarm.svg and a trace of a cold query per series count
// under o.out.
func runColdWarm(ctx context.Context, o *options, stdout *os.File) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	if o.coldwarm.Replot != "" {
		js, err := os.ReadFile(o.coldwarm.Replot)
		if err != nil {
			return err
		}
		var rs []*coldwarmResult
		if err := json.Unmarshal(js, &rs); err != nil {
			return fmt.Errorf("%s: %w", o.coldwarm.Replot, err)
		}
		return writeColdWarm(o, o.soak.Faults.Latency, rs)
	}
	vgw, err := findVersityGW(o.soak.VersityGW)
	if err != nil {
		return err
	}
	s, err := o.newSystem("shale")
	if err != nil {
		return err
	}
	env := &coldwarmEnv{o: o, shaleBin: s.bin, dir: filepath.Join(o.out, "data"), latency: o.soak.Faults.Latency}
	if err := os.RemoveAll(env.dir); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "[coldwarm] starting versitygw\n")
	env.s3, err = versitygw.Start(ctx, vgw, filepath.Join(env.dir, "versitygw"))
	if err != nil {
		return err
	}
	defer func() {
		env.s3.Stop()
		if !o.keepData {
			_ = os.RemoveAll(env.dir)
		}
	}()
	env.proxy, err = newFaultProxy(env.s3.Endpoint, faultConfig{}, nil)
	if err != nil {
		return err
	}
	var stopProxy func()
	env.proxyURL, stopProxy, err = serveProxy(env.proxy)
	if err != nil {
		return err
	}
	defer stopProxy()

	var results []*coldwarmResult
	for _, n := range o.coldwarm.Series {
		r, err := env.measure(ctx, n)
		if err != nil {
			return fmt.Errorf("%d series: %w", n, err)
		}
		results = append(results, r)
		if err := writeColdWarm(o, env.latency, results); err != nil {
			return err
		}
	}
	rep, _ := os.ReadFile(filepath.Join(o.out, "coldwarm.md"))
	_, _ = stdout.Write(rep)
	return nil
}

// measure writes n series and measures the cold and warm queries over them.
func (e *coldwarmEnv) measure(ctx context.Context, n int) (*coldwarmResult, error) {
	o, c := e.o, &e.o.coldwarm
	bucket := fmt.Sprintf("coldwarm-%d", n)
	if err := e.s3.MakeBucket(ctx, bucket); err != nil {
		return nil, err
	}
	s := &system{name: bucket, kind: "shale", bin: e.shaleBin, version: 1}
	if err := s.prepare(e.dir); err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(s.dir, "objstore.yml")
	if err := os.WriteFile(cfgPath, []byte(versitygw.ObjstoreYAML(e.s3.S3Config(bucket, e.proxyURL), "")), 0o600); err != nil {
		return nil, err
	}
	// Cache warming would load the data at start; the results cache would
	// answer a repeated query without reading it.
	s.extra = append([]string{"--objstore.config-file=" + cfgPath, "--cache.warm-age=0", "--query.results-cache.size=0"},
		strings.Fields(o.shaleArgs)...)
	defer s.stop()

	// The data ends 3 h before now and one sample of another series is
	// written at now, so that every partition of the data is closed (written
	// out and no longer in the head) as it is once time has moved on.
	now := time.Now().Truncate(o.load.Interval)
	dataEnd := now.Add(-3 * time.Hour)
	cfg := o.load
	cfg.Series, cfg.PerTarget, cfg.Batch = n, min(n, c.PerTarget), 500
	cfg.Version, cfg.Name, cfg.RealTime, cfg.Churn = 1, bucket, false, 0
	// Requests of 5 minutes of data each and senders in step, so that no
	// sample lands behind the out-of-order window.
	cfg.PerSeries = max(1, int(5*time.Minute/cfg.Interval))
	cfg.Window = 1
	cfg.Start, cfg.End = dataEnd.Add(-c.Span).UnixMilli(), dataEnd.UnixMilli()
	cfg.Duration = 100 * 24 * time.Hour
	gen, err := newGenerator(cfg)
	if err != nil {
		return nil, err
	}
	r := &coldwarmResult{Series: gen.activeSeries()}

	e.proxy.setFaults(faultConfig{}) // the ingest is not what is measured
	fmt.Fprintf(os.Stderr, "[coldwarm] %d series: writing %s of data\n", r.Series, c.Span)
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	lr, err := gen.run(ctx, s.writeURL())
	if err != nil {
		return nil, err
	}
	if lr.Failed > 0 {
		return nil, fmt.Errorf("%d remote-write requests failed: %s", lr.Failed, lr.FirstError)
	}
	r.Samples = lr.Samples
	if err := sendMarker(ctx, s.writeURL(), now); err != nil {
		return nil, err
	}
	s.stop()
	e.proxy.setFaults(faultConfig{Latency: e.latency})
	if r.Tables, err = e.countTables(ctx, bucket); err != nil {
		return nil, err
	}

	q := benchQuery{Name: "coldwarm", Expr: c.Query, Range: c.Span}
	client := &http.Client{Timeout: 5 * time.Minute}
	defer client.CloseIdleConnections()
	for i := range c.Colds {
		if err := s.dropCaches(); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := s.start(ctx); err != nil {
			return nil, fmt.Errorf("restart: %w", err)
		}
		r.StartupMs = append(r.StartupMs, ms(time.Since(t0)))
		client.CloseIdleConnections()
		e.proxy.startTrace()
		cpu0, _ := procCPUSeconds(s.pid())
		sent := time.Now()
		qr := runRangeQuery(ctx, client, s.base(), q, dataEnd, c.Step)
		tr := e.proxy.takeTrace()
		cpu1, _ := procCPUSeconds(s.pid())
		if qr.Err != "" {
			return nil, fmt.Errorf("cold query: %s", qr.Err)
		}
		if qr.Series == 0 {
			return nil, errors.New("cold query: empty answer")
		}
		r.ResultSize = qr.Series
		r.ColdMs = append(r.ColdMs, ms(qr.Latency))
		reads := traceReads(tr)
		r.ColdReqs = append(r.ColdReqs, float64(len(reads)))
		r.ColdBytes = append(r.ColdBytes, float64(traceBytes(reads)))
		r.ColdReadMs = append(r.ColdReadMs, ms(lastEnd(reads).Sub(sent)))
		r.ColdWaves = append(r.ColdWaves, float64(traceWaves(tr)))
		r.ColdCPUMs = append(r.ColdCPUMs, 1000*(cpu1-cpu0))
		if i == 0 {
			r.Trace, r.TraceStart = tr, sent
		}
		for range c.Warms {
			e.proxy.startTrace()
			cpu0, _ := procCPUSeconds(s.pid())
			wr := runRangeQuery(ctx, client, s.base(), q, dataEnd, c.Step)
			tr := e.proxy.takeTrace()
			cpu1, _ := procCPUSeconds(s.pid())
			r.WarmCPUMs = append(r.WarmCPUMs, 1000*(cpu1-cpu0))
			if wr.Err != "" {
				return nil, fmt.Errorf("warm query: %s", wr.Err)
			}
			if wr.Series != qr.Series {
				return nil, fmt.Errorf("warm query: %d series in the answer, the cold one had %d", wr.Series, qr.Series)
			}
			r.WarmMs = append(r.WarmMs, ms(wr.Latency))
			r.WarmReqs = append(r.WarmReqs, float64(len(traceReads(tr))))
			r.WarmBytes = append(r.WarmBytes, float64(traceBytes(traceReads(tr))))
		}
		fmt.Fprintf(os.Stderr, "[coldwarm] %d series: start %.0f ms, cold %.0f ms (%d reads, %s bytes, %d waves, last answered at %.0f ms), warm %.0f ms\n",
			r.Series, r.StartupMs[i], r.ColdMs[i], len(reads), fmtNum(r.ColdBytes[i]), int(r.ColdWaves[i]), r.ColdReadMs[i], median(r.WarmMs[len(r.WarmMs)-c.Warms:]))
		if i == c.Colds-1 {
			// The query must have read every series written.
			got, err := countSeries(ctx, client, s.base(), c.Query, dataEnd)
			if err != nil {
				return nil, err
			}
			if got != r.Series {
				return nil, fmt.Errorf("the query selects %d series, %d were written", got, r.Series)
			}
		}
		s.stop()
	}
	return r, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// runRangeQuery asks q over [end-q.Range, end] at step (queryStep of the
// range), end aligned down to the step.
func runRangeQuery(ctx context.Context, client *http.Client, base string, q benchQuery, end time.Time, step time.Duration) queryResult {
	return runQuery(ctx, client, base, q, end.Truncate(step), step)
}

// countSeries returns how many series the selectors of expr select over the
// 6 h before end: count(last_over_time(sel[range])) of its first selector.
func countSeries(ctx context.Context, client *http.Client, base, expr string, end time.Time) (int, error) {
	sel := expr
	if i := strings.Index(sel, "rate("); i >= 0 {
		sel = sel[i+len("rate("):]
		if j := strings.Index(sel, "["); j >= 0 {
			sel = sel[:j]
		}
	}
	q := benchQuery{Name: "count", Expr: "count(last_over_time(" + sel + "[6h]))"}
	path, v := queryParams(q, end, time.Minute)
	var body struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := fetchJSON(ctx, client, http.MethodPost, base+path+"?"+v.Encode(), &body); err != nil {
		return 0, fmt.Errorf("count query: %w", err)
	}
	if body.Status != "success" || len(body.Data.Result) != 1 {
		return 0, fmt.Errorf("count query %s: status %s, %d results", q.Expr, body.Status, len(body.Data.Result))
	}
	s, _ := body.Data.Result[0].Value[1].(string)
	n, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("count query: value %q", s)
	}
	return int(n), nil
}

// sendMarker writes one sample of coldwarm_marker at t.
func sendMarker(ctx context.Context, url string, t time.Time) error {
	wr := prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
		Labels:  []prompb.Label{{Name: "__name__", Value: "coldwarm_marker"}, {Name: "job", Value: "tsdb-bench"}},
		Samples: []prompb.Sample{{Value: 1, Timestamp: t.UnixMilli()}},
	}}}
	raw, err := wr.Marshal()
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(snappy.Encode(nil, raw)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType(1))
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("X-Prometheus-Remote-Write-Version", protoVersionHeader(1))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("marker sample: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("marker sample: HTTP %d", resp.StatusCode)
	}
	return nil
}

// countTables counts the SSTs in the bucket's folder on the S3 server's
// disk (the posix backend keeps one file per object).
func (e *coldwarmEnv) countTables(_ context.Context, bucket string) (int, error) {
	n := 0
	err := filepath.WalkDir(filepath.Join(e.dir, "versitygw", "data", bucket), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".sst") {
			n++
		}
		return nil
	})
	return n, err
}

// traceReads returns the reads (GET, HEAD) of a trace: what a query asks
// of the store. The writer's own requests (a list of new manifests every few
// seconds, a lease renewal) are left out.
func traceReads(tr []proxyEvent) []proxyEvent {
	var out []proxyEvent
	for _, ev := range tr {
		if ev.Op == opGET || ev.Op == opHEAD {
			out = append(out, ev)
		}
	}
	return out
}

// lastEnd is when the last request of a trace was answered.
func lastEnd(tr []proxyEvent) time.Time {
	var t time.Time
	for _, ev := range tr {
		if ev.End.After(t) {
			t = ev.End
		}
	}
	return t
}

// traceBytes sums the answers' bytes of a trace.
func traceBytes(tr []proxyEvent) int64 {
	var n int64
	for _, ev := range tr {
		n += ev.Bytes
	}
	return n
}

// traceWaves counts the sequential waves of the reads (GET, HEAD) of a
// trace: reads sent before any read of the current wave was answered belong
// to it; one sent after starts the next wave (it may have waited for that
// answer). With a fixed latency per request, the waves are the round trips
// a reader paid. Other requests (a writer's lease renewal, a list of new
// manifests) run on their own clock and are left out.
func traceWaves(tr []proxyEvent) int {
	evs := traceReads(tr)
	slices.SortFunc(evs, func(a, b proxyEvent) int { return a.Start.Compare(b.Start) })
	waves := 0
	var firstEnd time.Time
	for _, ev := range evs {
		if waves == 0 || !ev.Start.Before(firstEnd) {
			waves++
			firstEnd = ev.End
			continue
		}
		if ev.End.Before(firstEnd) {
			firstEnd = ev.End
		}
	}
	return waves
}

// traceText renders a trace as a table: each request's start and end since
// the query was sent, operation, object, range and bytes.
func traceText(tr []proxyEvent, t0 time.Time) string {
	evs := slices.Clone(tr)
	slices.SortFunc(evs, func(a, b proxyEvent) int { return a.Start.Compare(b.Start) })
	var b strings.Builder
	fmt.Fprintf(&b, "%9s %9s %-6s %7s %10s  %s %s\n", "start_ms", "end_ms", "op", "status", "bytes", "object", "range")
	for _, ev := range evs {
		fmt.Fprintf(&b, "%9.1f %9.1f %-6s %7d %10d  %s %s\n", ms(ev.Start.Sub(t0)), ms(ev.End.Sub(t0)), ev.Op, ev.Status, ev.Bytes, ev.Path, ev.Range)
	}
	return b.String()
}

// minMax returns the smallest and largest of xs.
func minMax(xs []float64) (lo, hi float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	return slices.Min(xs), slices.Max(xs)
}

// coldwarmTable is the report's table.
func coldwarmTable(rs []*coldwarmResult) string {
	var b strings.Builder
	b.WriteString("| series | samples | SSTs | start to ready | cold (median) | cold (min–max) | cold CPU | reads | bytes read | waves | last read answered | warm (median) | warm CPU | warm reads |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		lo, hi := minMax(r.ColdMs)
		fmt.Fprintf(&b, "| %d | %s | %d | %s ms | **%s ms** | %s–%s ms | %s ms | %s | %sB | %s | %s ms | **%s ms** | %s ms | %s |\n",
			r.Series, fmtNum(float64(r.Samples)), r.Tables, fmtNum(median(r.StartupMs)), fmtNum(median(r.ColdMs)),
			fmtNum(lo), fmtNum(hi), fmtNum(median(r.ColdCPUMs)), fmtNum(median(r.ColdReqs)), fmtNum(median(r.ColdBytes)),
			fmtNum(median(r.ColdWaves)), fmtNum(median(r.ColdReadMs)), fmtNum(median(r.WarmMs)), fmtNum(median(r.WarmCPUMs)), fmtNum(median(r.WarmReqs)))
	}
	return b.String()
}

// writeColdWarm writes the report, the JSON, the chart and the traces.
func writeColdWarm(o *options, latency time.Duration, rs []*coldwarmResult) error {
	c := o.coldwarm
	var b strings.Builder
	fmt.Fprintf(&b, "# tsdb-bench cold and warm queries\n\nCommand: `tsdb-bench %s`\n\n", strings.Join(os.Args[1:], " "))
	fmt.Fprintf(&b, "Query `%s` over %s at a %s step; data at a %s interval; versitygw behind a proxy adding %s to every request. "+
		"Medians of %d restarts (cold) and %d queries (warm).\n\n", c.Query, fmtRange(c.Span), c.Step, o.load.Interval, latency, c.Colds, c.Colds*c.Warms)
	b.WriteString(coldwarmTable(rs))
	if err := os.WriteFile(filepath.Join(o.out, "coldwarm.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	js, err := json.MarshalIndent(rs, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "coldwarm.json"), js, 0o644); err != nil {
		return err
	}
	for _, r := range rs {
		p := filepath.Join(o.out, fmt.Sprintf("trace-cold-%d.txt", r.Series))
		if err := os.WriteFile(p, []byte(traceText(r.Trace, r.TraceStart)), 0o644); err != nil {
			return err
		}
	}
	title := fmt.Sprintf("Query latency over %s of data, %s per object-store request (versitygw)", fmtRange(c.Span), latency)
	return os.WriteFile(filepath.Join(o.out, "coldwarm.svg"), []byte(coldwarmSVG(title, rs)), 0o644)
}
