package main

import (
	"context"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestScheduleRefreshes: the dashboard is evaluated at once, then every
// interval from the first; a round that overruns delays only the next one,
// which starts as soon as it ends, and the ones after keep the schedule.
func TestScheduleRefreshes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		takes := []time.Duration{time.Second, 45 * time.Second, time.Second, time.Second, time.Second}
		var calls []time.Time
		rounds := scheduleRefreshes(t.Context(), 4, 30*time.Second, func(now time.Time) []queryResult {
			calls = append(calls, now)
			time.Sleep(takes[len(calls)-1])
			return []queryResult{{Latency: takes[len(calls)-1]}}
		})
		wantStart := []time.Duration{0, 30 * time.Second, 75 * time.Second, 90 * time.Second, 120 * time.Second}
		wantLate := []bool{false, false, true, false, false}
		if len(rounds) != len(wantStart) {
			t.Fatalf("%d rounds, want %d", len(rounds), len(wantStart))
		}
		for i, r := range rounds {
			if got := r.Start.Sub(t0); got != wantStart[i] || !calls[i].Equal(r.Start) {
				t.Errorf("round %d started at +%s (eval got +%s), want +%s", i, got, calls[i].Sub(t0), wantStart[i])
			}
			if r.Due.Sub(t0) != time.Duration(i)*30*time.Second || r.Late != wantLate[i] {
				t.Errorf("round %d due +%s late %v, want +%s late %v", i, r.Due.Sub(t0), r.Late, time.Duration(i)*30*time.Second, wantLate[i])
			}
			if r.total() != takes[i] {
				t.Errorf("round %d total %s, want %s", i, r.total(), takes[i])
			}
		}

		// Cancelled while waiting: the rounds so far, and no more.
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(40*time.Second, cancel)
		n := 0
		rounds = scheduleRefreshes(ctx, 10, 30*time.Second, func(time.Time) []queryResult { n++; return nil })
		if len(rounds) != 2 || n != 2 {
			t.Errorf("cancelled after 40 s: %d rounds, %d evaluations; want 2", len(rounds), n)
		}
	})
}

// TestRefreshReport: the figures of the rounds (first, refresh p50 and p90
// with the panels summed, per range) and their rows in the report, with
// Shale's ratio to each peer and shale-nocache as a column without one.
func TestRefreshReport(t *testing.T) {
	ranges := []time.Duration{time.Hour, 6 * time.Hour}
	qs := dashboardSet(ranges)
	if len(qs) != 2*len(dashboardExprs) {
		t.Fatalf("%d panels, want %d", len(qs), 2*len(dashboardExprs))
	}
	// Round i: every 1 h panel takes (i+1) ms, every 6 h panel 10*(i+1) ms.
	mkRounds := func(scale float64) []refreshRound {
		var rounds []refreshRound
		t0 := time.Unix(1_700_000_000, 0)
		for i := range 11 {
			due := t0.Add(time.Duration(i) * 30 * time.Second)
			rd := refreshRound{Due: due, Start: due}
			if i == 3 {
				rd.Start, rd.Late = due.Add(time.Second), true
			}
			for _, q := range qs {
				ms := float64(i + 1)
				if q.Range == 6*time.Hour {
					ms *= 10
				}
				qr := queryResult{Query: q, Latency: time.Duration(ms * scale * float64(time.Millisecond)), Series: 1}
				if (i == 0 && q.Name == "host-mem/1h") || (i == 7 && q.Name == "net-topk-irate/6h") {
					qr.Series = 0
				}
				if i == 5 && q.Name == "http-p99/6h" {
					qr.Err = "HTTP 503: busy"
				}
				rd.Results = append(rd.Results, qr)
			}
			rounds = append(rounds, rd)
		}
		return rounds
	}
	res := func(name string, scale, hit float64) *sysResult {
		r := &sysResult{Name: name}
		r.unmeasured()
		r.SamplesPerSec = 1000
		summariseRefreshes(r, mkRounds(scale))
		r.CacheHitRatio = hit
		r.RefreshFirstCPU = 40 * scale
		return r
	}
	r := res("shale", 1, 0.9)
	panels := float64(len(dashboardExprs))
	// Panels summed: round i takes 11*(i+1)*panels ms; refreshes are rounds
	// 1..10, their p50 (nearest rank) the 5th, p90 the 9th.
	if want := 11 * panels; r.RefreshFirst != want {
		t.Errorf("first %v, want %v", r.RefreshFirst, want)
	}
	if p50, p90 := 11*6*panels, 11*10*panels; r.RefreshP50 != p50 || r.RefreshP90 != p90 {
		t.Errorf("refresh p50 %v p90 %v, want %v %v", r.RefreshP50, r.RefreshP90, p50, p90)
	}
	if r.RefreshRounds != 10 || r.RefreshLate != 1 || r.RefreshErrors != 1 || !strings.HasPrefix(r.FirstQueryError, "http-p99/6h: HTTP 503") {
		t.Errorf("rounds %d late %d errors %d (%s); want 10, 1, 1", r.RefreshRounds, r.RefreshLate, r.RefreshErrors, r.FirstQueryError)
	}
	if want := []string{"host-mem/1h", "net-topk-irate/6h"}; !slices.Equal(r.RefreshEmpty, want) {
		t.Errorf("empty panels %v, want %v", r.RefreshEmpty, want)
	}
	if got, want := r.RefreshByRange["1h"], [2]float64{panels, 6 * panels}; got != want {
		t.Errorf("1h: %v, want %v", got, want)
	}
	if got, want := r.RefreshByRange["6h"], [2]float64{10 * panels, 60 * panels}; got != want {
		t.Errorf("6h: %v, want %v", got, want)
	}

	runs := [][]*sysResult{{r, res("shale-nocache", 2, math.NaN()), res("prometheus", 4, math.NaN()), res("victoria-metrics", 0.5, math.NaN())}}
	_, find := renderReport(t, runs, "| figure | unit | shale | shale-nocache | prometheus | victoria-metrics | shale / prometheus | shale / victoria-metrics |")
	for label, want := range map[string]string{
		"dashboard first evaluation, panels summed":                     "| ms | 66 | 132 | 264 | 33 | 0.25x | 2x |",
		"dashboard refresh p50, panels summed":                          "| ms | 396 | 792 | 1584 | 198 | 0.25x | 2x |",
		"dashboard refresh p90, panels summed":                          "| ms | 660 | 1320 | 2640 | 330 | 0.25x | 2x |",
		"results-cache hit ratio over the refreshes":                    "| ratio | 0.9 | — | — | — | — | — |",
		"server CPU during the first evaluation (live ingest included)": "| CPU-ms | 40 | 80 | 160 | 20 | 0.25x | 2x |",
		"dashboard refreshes started late":                              "| count | 1 | 1 | 1 | 1 | 1x | 1x |",
	} {
		if got := find(label); got != "| "+label+" "+want {
			t.Errorf("got  %s\nwant | %s %s", got, label, want)
		}
	}
	if find("query p50, warm") != "" || find("query errors") != "" {
		t.Error("rows of the usual query phase in a refresh report")
	}
	rt := refreshTable(runs, ranges)
	for _, want := range []string{"| shale | 1h | 6 | 36 |", "| shale | 6h | 60 | 360 |", "| victoria-metrics | 6h | 30 | 180 |"} {
		if !strings.Contains(rt, want) {
			t.Errorf("refresh table lacks %q:\n%s", want, rt)
		}
	}
}

// TestRefreshFlags: -refreshes turns the mode on, the ranges parse, and a
// dashboard panel's window ends at the first step boundary at or after now.
func TestRefreshFlags(t *testing.T) {
	o, err := parseFlags([]string{"-refreshes=4", "-refresh-interval=10s", "-refresh-ranges=30m,6h"})
	if err != nil {
		t.Fatal(err)
	}
	if o.refreshes != 4 || o.refreshEvery != 10*time.Second || len(o.refreshRanges) != 2 || o.refreshRanges[0] != 30*time.Minute {
		t.Errorf("options %d %s %v", o.refreshes, o.refreshEvery, o.refreshRanges)
	}
	if got := fmtRange(30 * time.Minute); got != "30m0s" {
		t.Errorf("fmtRange(30m) = %q", got)
	}
	for _, bad := range [][]string{{"-refresh-ranges=1h,x"}, {"-refresh-ranges=10s"}, {"-refreshes=-1"}, {"-refreshes=2", "-refresh-interval=0s"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	if s, err := o.newSystem("shale-nocache"); err == nil {
		if !strings.Contains(strings.Join(s.extra, " "), "--query.results-cache.size=0") {
			t.Errorf("shale-nocache flags %v", s.extra)
		}
	} else if !strings.Contains(err.Error(), "make build") {
		t.Error(err)
	}
	now := time.Unix(1_700_000_007, 0)
	for _, q := range dashboardSet(o.refreshRanges) {
		_, v := queryParams(q, now, 15*time.Second)
		end, _ := strconv.ParseInt(v.Get("end"), 10, 64)
		step, _ := strconv.ParseFloat(v.Get("step"), 64)
		if end < now.Unix() || float64(end-now.Unix()) >= step {
			t.Errorf("%s at %d: end %d step %v", q.Name, now.Unix(), end, step)
		}
	}
}

func TestSumMetricWith(t *testing.T) {
	text := `# TYPE shale_query_results_cache_steps_total counter
shale_query_results_cache_steps_total{result="hit"} 120
shale_query_results_cache_steps_total{result="miss"} 30
shale_query_results_cache_steps_total{a="b",result="hit"} 5
shale_query_results_cache_steps_total_x{result="hit"} 1000
shale_query_results_cache_steps_total 7
`
	if v, ok := sumMetricWith(strings.NewReader(text), "shale_query_results_cache_steps_total", `result="hit"`); !ok || v != 125 {
		t.Errorf("hit = %v, %v; want 125", v, ok)
	}
	if v, ok := sumMetricWith(strings.NewReader(text), "shale_query_results_cache_steps_total", `result="miss"`); !ok || v != 30 {
		t.Errorf("miss = %v, %v; want 30", v, ok)
	}
	if _, ok := sumMetricWith(strings.NewReader(text), "shale_query_results_cache_steps_total", `result="other"`); ok {
		t.Error("found a label value that is not there")
	}
}

// TestSmokeRefreshShale runs the refresh pattern against bin/tsdb at a tiny
// scale, with the results cache on and off.
func TestSmokeRefreshShale(t *testing.T) {
	bin := smokeBinary(t)
	o, err := parseFlags([]string{"-series=400", "-series-per-target=200", "-batch=200", "-span=30m", "-interval=5s", "-concurrency=4",
		"-refreshes=2", "-refresh-interval=2s", "-progress=0", "-shale-bin=" + bin, "-out=" + t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"shale", "shale-nocache"} {
		s, err := o.newSystem(name)
		if err != nil {
			t.Fatal(err)
		}
		r, err := o.refreshSystem(t.Context(), s)
		if err != nil {
			t.Fatal(err)
		}
		if r.Failed != 0 || r.Samples < 400*361 || r.DataSpan < 30*time.Minute {
			t.Errorf("%s: samples %d failed %d (%s), data span %s; want at least %d samples over 30m", name, r.Samples, r.Failed, r.FirstError, r.DataSpan, 400*361)
		}
		if r.RefreshRounds != 2 || r.RefreshErrors != 0 || len(r.RefreshEmpty) != 0 {
			t.Errorf("%s: %d refreshes, errors %d (%s), empty panels %v", name, r.RefreshRounds, r.RefreshErrors, r.FirstQueryError, r.RefreshEmpty)
		}
		if math.IsNaN(r.RefreshFirst) || math.IsNaN(r.RefreshP50) || r.RefreshP90 < r.RefreshP50 {
			t.Errorf("%s: first %v p50 %v p90 %v", name, r.RefreshFirst, r.RefreshP50, r.RefreshP90)
		}
		// Measured, and at most both cores for as long as the evaluation
		// took, give or take a clock tick (10 ms) at either end.
		if c := r.RefreshFirstCPU; !(c >= 0 && c <= 2*r.RefreshFirst+20) {
			t.Errorf("%s: server CPU during the first evaluation %v ms, over %v ms of panels", name, c, r.RefreshFirst)
		}
		if hit := r.CacheHitRatio; name == "shale" && !(hit > 0.5 && hit <= 1) {
			t.Errorf("shale: results-cache hit ratio %v over the refreshes, want most steps from the cache", hit)
		} else if name == "shale-nocache" && !math.IsNaN(hit) {
			t.Errorf("shale-nocache: hit ratio %v, want none", hit)
		}
	}
}
