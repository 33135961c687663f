package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The dashboard refresh pattern: a dashboard left open in a browser asks its
// range queries again every refresh interval with the window's end moved to
// now. With -refreshes=N each system gets -span of history ending at its own
// start (compressed time, as fast as it accepts), then real-time samples at
// the scrape interval while the dashboard is evaluated once (opened) and N
// times more, one every -refresh-interval.

// dashboardSet returns the dashboard's panels (dashboardExprs) over each of
// ranges.
func dashboardSet(ranges []time.Duration) []benchQuery {
	var qs []benchQuery
	for _, r := range ranges {
		for _, d := range dashboardExprs {
			qs = append(qs, benchQuery{Name: d.name + "/" + fmtRange(r), Expr: d.expr, Range: r})
		}
	}
	return qs
}

// parseRanges parses a comma-separated list of panel ranges.
func parseRanges(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("-refresh-ranges: %w", err)
		}
		if d < time.Minute {
			return nil, fmt.Errorf("-refresh-ranges: %s is shorter than a minute", d)
		}
		out = append(out, d)
	}
	return out, nil
}

// refreshRound is one evaluation of the whole dashboard.
type refreshRound struct {
	Due, Start time.Time
	Late       bool // the round before was still running when this one was due
	Results    []queryResult
}

// total is the panels' latencies summed.
func (r refreshRound) total() time.Duration {
	var t time.Duration
	for _, q := range r.Results {
		t += q.Latency
	}
	return t
}

// scheduleRefreshes evaluates the dashboard at once (it is opened) and then
// n times, the k-th due k*every after the first; a round still running when
// the next is due delays it, which then starts as soon as it ends (a
// browser's refresh timer does not stack requests either). eval gets the
// time the round starts, the end of its panels' window.
func scheduleRefreshes(ctx context.Context, n int, every time.Duration, eval func(now time.Time) []queryResult) []refreshRound {
	t0 := time.Now()
	rounds := make([]refreshRound, 0, n+1)
	for k := 0; k <= n; k++ {
		due := t0.Add(time.Duration(k) * every)
		d := time.Until(due)
		if d > 0 && !sleepCtx(ctx, d) {
			return rounds
		}
		if ctx.Err() != nil {
			return rounds
		}
		start := time.Now()
		rounds = append(rounds, refreshRound{Due: due, Start: start, Late: k > 0 && d <= 0, Results: eval(start)})
	}
	return rounds
}

// summariseRefreshes fills the refresh figures of r from the rounds: the
// first is the dashboard opened, the others its refreshes.
func summariseRefreshes(r *sysResult, rounds []refreshRound) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	r.RefreshByRange = map[string][2]float64{}
	if len(rounds) == 0 {
		return
	}
	r.RefreshFirst = ms(rounds[0].total())
	var tot []float64
	byRange := map[string][]float64{}
	for i, rd := range rounds {
		perRange := map[string]time.Duration{}
		for _, q := range rd.Results {
			k := fmtRange(q.Query.Range)
			perRange[k] += q.Latency
			if q.Err != "" {
				r.RefreshErrors++
				if r.FirstQueryError == "" {
					r.FirstQueryError = q.Query.Name + ": " + q.Err
				}
			} else if q.Series == 0 && !slices.Contains(r.RefreshEmpty, q.Query.Name) {
				r.RefreshEmpty = append(r.RefreshEmpty, q.Query.Name)
			}
		}
		for k, d := range perRange {
			if i == 0 {
				v := r.RefreshByRange[k]
				v[0] = ms(d)
				r.RefreshByRange[k] = v
			} else {
				byRange[k] = append(byRange[k], ms(d))
			}
		}
		if i == 0 {
			continue
		}
		r.RefreshRounds++
		if rd.Late {
			r.RefreshLate++
		}
		tot = append(tot, ms(rd.total()))
	}
	r.RefreshP50, r.RefreshP90 = percentile(tot, 50), percentile(tot, 90)
	for k, xs := range byRange {
		v := r.RefreshByRange[k]
		v[1] = percentile(xs, 50)
		r.RefreshByRange[k] = v
	}
}

// cacheSteps reads Shale's results-cache step counters from /metrics; ok is
// false for other systems and for Shale with the cache off.
func (s *system) cacheSteps() (hit, miss float64, ok bool) {
	if s.kind != "shale" {
		return 0, 0, false
	}
	get := func(pair string) (float64, bool) {
		resp, err := http.Get(s.base() + "/metrics")
		if err != nil {
			return 0, false
		}
		defer resp.Body.Close()
		return sumMetricWith(resp.Body, "shale_query_results_cache_steps_total", pair)
	}
	hit, ok1 := get(`result="hit"`)
	miss, ok2 := get(`result="miss"`)
	return hit, miss, ok1 && ok2
}

// refreshSystem backfills -span of history into one system, then ingests in
// real time while it evaluates the dashboard and its refreshes.
func (o *options) refreshSystem(ctx context.Context, s *system) (*sysResult, error) {
	defer s.closeBackend() // shale-s3's versitygw and proxy
	if err := s.prepare(filepath.Join(o.out, "data")); err != nil {
		return nil, err
	}
	if !o.keepData {
		defer o.removeKeepingLog(s)
	}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	defer s.stop()

	cfg := o.load
	cfg.Version, cfg.Name = s.version, s.name
	cfg.PerSeries, cfg.RealTime = 1, false // the same shards serve the backfill and the live samples
	cfg.Duration = 100 * 24 * time.Hour
	iv := cfg.Interval.Milliseconds()
	cfg.End = time.Now().Truncate(cfg.Interval).UnixMilli()
	cfg.Start = cfg.End - o.span.Milliseconds()
	gen, err := newGenerator(cfg)
	if err != nil {
		return nil, err
	}
	r := &sysResult{Name: s.name, Version: s.version, ActiveSeries: gen.activeSeries()}
	r.unmeasured()
	// History, then the time the history took, until the data reaches the
	// last scrape interval: no gap before the live samples.
	fmt.Fprintf(os.Stderr, "[%s] backfill %s\n", s.name, o.span)
	t0 := time.Now()
	for {
		lr, err := gen.run(ctx, s.writeURL())
		if err != nil {
			return nil, err
		}
		r.addLoad(lr)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		next := time.Now().Truncate(cfg.Interval).UnixMilli()
		if next <= lr.LastTS+iv {
			break
		}
		gen.cfg.Start, gen.cfg.End = lr.LastTS+iv, next
	}
	backfill := time.Since(t0)
	r.SamplesPerSec = float64(r.Samples) / backfill.Seconds()
	// The dashboard is opened on history already there: VictoriaMetrics
	// makes its newest rows searchable a second or so after it takes them,
	// and the backfill's last second holds its last hour of data time.
	s.flush(ctx)

	gen.cfg.RealTime = true
	liveCtx, stopLive := context.WithCancel(ctx)
	defer stopLive()
	type liveOut struct {
		lr  *loadResult
		err error
	}
	live := make(chan liveOut, 1)
	go func() {
		lr, err := gen.run(liveCtx, s.writeURL())
		live <- liveOut{lr, err}
	}()

	qs := dashboardSet(o.refreshRanges)
	client := &http.Client{Timeout: 5 * time.Minute}
	defer client.CloseIdleConnections()
	eval := func(now time.Time) []queryResult {
		out := make([]queryResult, 0, len(qs))
		for _, q := range qs {
			if ctx.Err() != nil {
				break
			}
			out = append(out, runQuery(ctx, client, s.base(), q, now, cfg.Interval))
		}
		return out
	}
	fmt.Fprintf(os.Stderr, "[%s] dashboard of %d panels, then %d refreshes every %s\n", s.name, len(qs), o.refreshes, o.refreshEvery)
	var hit0, miss0, cpu0 float64
	var haveCache, opened bool
	var cpuErr error
	rounds := scheduleRefreshes(ctx, o.refreshes, o.refreshEvery, func(now time.Time) []queryResult {
		if opened {
			return eval(now)
		}
		// The refreshes' figures start after the first evaluation, whose
		// own CPU is taken apart: its wall time carries the machine's noise.
		opened = true
		start, serr := procCPUSeconds(s.pid())
		res := eval(now)
		if end, err := procCPUSeconds(s.pid()); serr == nil && err == nil {
			r.RefreshFirstCPU = (end - start) * 1000
		}
		hit0, miss0, haveCache = s.cacheSteps()
		cpu0, cpuErr = procCPUSeconds(s.pid())
		return res
	})
	hit1, miss1, ok := s.cacheSteps()
	cpu1, cerr := procCPUSeconds(s.pid())
	stopLive()
	lo := <-live
	if lo.err != nil {
		return nil, fmt.Errorf("live ingest: %w", lo.err)
	}
	r.addLoad(lo.lr)
	summariseRefreshes(r, rounds)
	if haveCache && ok && hit1+miss1 > hit0+miss0 {
		r.CacheHitRatio = (hit1 - hit0) / (hit1 + miss1 - hit0 - miss0)
	}
	if cerr == nil && cpuErr == nil && r.RefreshRounds > 0 {
		r.RefreshCPU = (cpu1 - cpu0) / float64(r.RefreshRounds)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return r, nil
}

// addLoad adds one ingest pass to r: samples, failures, data time.
func (r *sysResult) addLoad(lr *loadResult) {
	r.Samples += lr.Samples
	r.Failed += lr.Failed
	if r.FirstError == "" {
		r.FirstError = lr.FirstError
	}
	r.Elapsed += lr.Elapsed
	r.SeriesCreated = max(r.SeriesCreated, lr.SeriesCreated) // the generator's count runs on across passes
	if lr.LastTS > 0 {
		if r.firstTS == 0 {
			r.firstTS = lr.FirstTS
		}
		r.DataSpan = time.Duration(lr.LastTS-r.firstTS) * time.Millisecond
	}
}
