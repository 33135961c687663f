package promql

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"
	upstream "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/util/annotations"
	"github.com/stretchr/testify/require"

	shalestorage "github.com/shaledb/shale/storage"
)

// cacheRig is a results cache over Shale's storage, with the engine to
// compare it with and a clock the test moves.
type cacheRig struct {
	t     *testing.T
	db    *shalestorage.DB
	ng    *upstream.Engine
	cache *resultsCache
	reg   *prometheus.Registry
	now   time.Time
}

func newCacheRig(t *testing.T, maxBytes int64) *cacheRig {
	r := &cacheRig{t: t, db: newTestStorage(t).(*shalestorage.DB), reg: prometheus.NewRegistry()}
	var err error
	r.ng, err = NewEngine(testEngineOptions(), nil, nil, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.ng.Close()) })
	r.cache, err = newResultsCache(ResultsCacheOptions{MaxBytes: maxBytes, Freshness: 5 * time.Minute}, func() time.Time { return r.now }, r.reg)
	require.NoError(t, err)
	r.db.OnChange(r.cache.Changed)
	return r
}

func (r *cacheRig) write(lset labels.Labels, t int64, v float64) {
	app := r.db.Appender(context.Background())
	_, err := app.Append(0, lset, t, v)
	require.NoError(r.t, err)
	require.NoError(r.t, app.Commit())
}

func (r *cacheRig) run(qs string, step time.Duration) rangeRun {
	return func(ctx context.Context, start, end int64) (upstream.Matrix, annotations.Annotations, func(), error) {
		q, err := r.ng.NewRangeQuery(ctx, r.db, nil, qs, time.UnixMilli(start), time.UnixMilli(end), step)
		if err != nil {
			return nil, nil, nil, err
		}
		res := q.Exec(ctx)
		if res.Err != nil {
			q.Close()
			return nil, res.Warnings, nil, res.Err
		}
		m, err := res.Matrix()
		return m, res.Warnings, q.Close, err
	}
}

// check runs qs over [start, end] through the cache and straight through
// the engine, and requires the same result.
func (r *cacheRig) check(qs string, start, end int64, step time.Duration) {
	r.t.Helper()
	expr, err := NewParser(testEngineOptions()).ParseExpr(qs)
	require.NoError(r.t, err)
	got, _, err := r.cache.query(context.Background(), expr, qs, start, end, step.Milliseconds(), 5*time.Minute, r.run(qs, step))
	require.NoError(r.t, err)
	want, _, release, err := r.run(qs, step)(context.Background(), start, end)
	require.NoError(r.t, err)
	defer release()
	require.Equal(r.t, want.String(), got.String(), "%s over [%d, %d] step %s", qs, start, end, step)
}

func (r *cacheRig) steps(result string) float64 {
	return testutil.ToFloat64(r.cache.steps.WithLabelValues(result))
}

// TestResultsCacheMatchesEngine moves a dashboard's window forward over
// data that keeps arriving, with late samples, backfill and deletes in
// between, and requires every answer to equal the engine's own.
func TestResultsCacheMatchesEngine(t *testing.T) {
	r := newCacheRig(t, 64<<20)
	rng := rand.New(rand.NewPCG(7, 8))
	t0 := time.Now().Add(-6 * time.Hour).Truncate(time.Hour)
	series := func(name string, i int) labels.Labels {
		return labels.FromStrings("__name__", name, "instance", fmt.Sprintf("i%d", i), "job", []string{"api", "web"}[i%2])
	}
	counters := make([]float64, 6)
	scrape := func(ts time.Time) {
		for i := range counters {
			counters[i] += float64(1 + rng.IntN(10))
			r.write(series("requests_total", i), ts.UnixMilli(), counters[i])
			r.write(series("temperature", i), ts.UnixMilli(), 20+rng.NormFloat64())
		}
	}
	for ts := t0; ts.Before(t0.Add(2 * time.Hour)); ts = ts.Add(15 * time.Second) {
		scrape(ts)
	}
	queries := []string{
		`rate(requests_total[5m])`,
		`sum by (job) (rate(requests_total[1m]))`,
		`temperature offset 10m`,
		`max_over_time(temperature[10m:1m])`,
		`avg(temperature) + on() group_left count(requests_total)`,
		`absent(nonexistent)`,
		`time() - timestamp(temperature)`,
		`temperature @ ` + fmt.Sprint(t0.Add(time.Hour).Unix()), // not cached
		`topk(2, temperature)`,
	}
	r.now = t0.Add(2 * time.Hour)
	next := r.now
	var hits, misses, quietHits, quietMisses float64
	for i := range 40 {
		// Thirty seconds of scrapes.
		for ; !next.After(r.now); next = next.Add(15 * time.Second) {
			scrape(next)
		}
		end := r.now.Truncate(time.Minute).UnixMilli()
		for _, qs := range queries {
			r.check(qs, end-time.Hour.Milliseconds(), end, time.Minute)
			r.check(qs, end-time.Hour.Milliseconds()+7_000, end+7_000, 30*time.Second) // another phase and step
		}
		switch i % 8 {
		case 2: // a late sample in the middle of the cached range
			r.write(series("temperature", 9), r.now.Add(-40*time.Minute).UnixMilli(), 99)
		case 4: // backfill of a whole new series
			for ts := r.now.Add(-50 * time.Minute); ts.Before(r.now.Add(-20 * time.Minute)); ts = ts.Add(time.Minute) {
				r.write(series("requests_total", 10+i), ts.UnixMilli(), float64(ts.Unix()%1000))
			}
		case 6: // a delete
			require.NoError(t, r.db.Delete(context.Background(), r.now.Add(-30*time.Minute).UnixMilli(), r.now.Add(-25*time.Minute).UnixMilli(),
				labels.MustNewMatcher(labels.MatchEqual, "instance", fmt.Sprintf("i%d", i%6))))
		}
		r.now = r.now.Add(30 * time.Second)
		if i > 0 && (i-1)%8 != 2 && (i-1)%8 != 4 && (i-1)%8 != 6 { // nothing changed since the last refresh
			quietHits += r.steps("hit") - hits
			quietMisses += r.steps("miss") - misses
		}
		hits, misses = r.steps("hit"), r.steps("miss")
	}
	// The @ query is never cached: 182 steps a refresh.
	require.Greater(t, quietHits, 3*quietMisses, "a moving window is mostly served from the cache")
	require.Positive(t, testutil.ToFloat64(r.cache.invalidations))
}

// TestResultsCacheSteps checks what a refresh evaluates: only the steps that
// moved into the window, and every step after a change in their data.
func TestResultsCacheSteps(t *testing.T) {
	r := newCacheRig(t, 64<<20)
	t0 := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	lset := labels.FromStrings("__name__", "g")
	for ts := t0; ts.Before(t0.Add(2 * time.Hour)); ts = ts.Add(15 * time.Second) {
		r.write(lset, ts.UnixMilli(), float64(ts.Unix()%100))
	}
	r.now = t0.Add(2 * time.Hour)
	end := r.now.UnixMilli()
	qs := `avg_over_time(g[2m])`
	r.check(qs, end-time.Hour.Milliseconds(), end, time.Minute)
	require.Equal(t, 0.0, r.steps("hit"))
	require.Equal(t, 61.0, r.steps("miss"))

	// Refreshed a minute later: the steps up to 5 m before now were kept
	// (the 2 m range reaches back, not forward), and 55 of them are still in
	// the window; the last 5 and the new step are evaluated.
	r.now = r.now.Add(time.Minute)
	end += time.Minute.Milliseconds()
	r.check(qs, end-time.Hour.Milliseconds(), end, time.Minute)
	require.Equal(t, 55.0, r.steps("hit"))
	require.Equal(t, 61.0+6, r.steps("miss"))

	// A change at t0+90m drops the steps from t0+90m on (their [t-2m, t]
	// window reaches it) and keeps the earlier ones.
	r.write(labels.FromStrings("__name__", "g"), t0.Add(90*time.Minute+time.Second).UnixMilli(), 1000)
	r.check(qs, end-time.Hour.Milliseconds(), end, time.Minute)
	kept := float64((t0.Add(90*time.Minute).UnixMilli()-(end-time.Hour.Milliseconds()))/time.Minute.Milliseconds() + 1)
	require.Equal(t, 55.0+kept, r.steps("hit"))

	// A write newer than anything cached depends on costs nothing.
	before := testutil.ToFloat64(r.cache.invalidations)
	r.write(lset, r.now.UnixMilli(), 5)
	require.Equal(t, before, testutil.ToFloat64(r.cache.invalidations))
}

func TestResultsCacheBudget(t *testing.T) {
	r := newCacheRig(t, 16<<10)
	t0 := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	for i := range 20 {
		lset := labels.FromStrings("__name__", "m", "i", fmt.Sprint(i))
		for ts := t0; ts.Before(t0.Add(2 * time.Hour)); ts = ts.Add(time.Minute) {
			r.write(lset, ts.UnixMilli(), float64(i))
		}
	}
	r.now = t0.Add(2 * time.Hour)
	end := r.now.UnixMilli()
	for i := range 20 {
		r.check(fmt.Sprintf(`m{i="%d"} * %d`, i, i), end-time.Hour.Milliseconds(), end, time.Minute)
	}
	r.cache.mu.Lock()
	bytes, n := r.cache.bytes, len(r.cache.entries)
	r.cache.mu.Unlock()
	require.LessOrEqual(t, bytes, int64(16<<10))
	require.Less(t, n, 20)
	require.Positive(t, testutil.ToFloat64(r.cache.evictions))
}

func TestCacheable(t *testing.T) {
	for qs, want := range map[string]bool{
		`rate(x[5m])`:                        true,
		`sum(x offset 1h) / sum(y)`:          true,
		`max_over_time(x[10m:1m])`:           true,
		`x @ 100`:                            false,
		`x @ end()`:                          false,
		`rate(x[5m] @ start())`:              false,
		`max_over_time(x[10m:1m] @ 100)`:     false,
		`vector(time())`:                     true,
		`scalar(x)`:                          true,
		`absent_over_time(x[1h])`:            true,
		`label_replace(x, "a", "b", "", "")`: true,
	} {
		expr, err := NewParser(testEngineOptions()).ParseExpr(qs)
		require.NoError(t, err, qs)
		require.Equal(t, want, cacheable(expr), qs)
	}
}

func TestWindow(t *testing.T) {
	for qs, want := range map[string][2]int64{
		`x`:                        {-5 * 60_000, 0},
		`rate(x[2m])`:              {-2 * 60_000, 0},
		`x offset 1h`:              {-65 * 60_000, -60 * 60_000},
		`max_over_time(x[10m:1m])`: {-15 * 60_000, 0},
		`vector(1)`:                {0, 0},
	} {
		expr, err := NewParser(testEngineOptions()).ParseExpr(qs)
		require.NoError(t, err)
		lo, hi := window(expr, 5*time.Minute)
		// Ranges are left-open (+1 ms); a subquery's steps are aligned,
		// so it may read a step earlier.
		require.LessOrEqual(t, lo, want[0]+1, qs)
		require.GreaterOrEqual(t, lo, want[0]-2*60_000, qs)
		require.Equal(t, want[1], hi, qs)
	}
	_ = math.MaxInt64
}
