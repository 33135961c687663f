package promql

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	upstream "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/util/annotations"
	"github.com/stretchr/testify/require"
)

// TestShardedRunMatchesEngine splits range queries into parts evaluated at
// once and requires the joined answer to equal the engine's over the whole
// range: series that exist in only some parts, histograms, subqueries,
// offsets, and every number of parts.
func TestShardedRunMatchesEngine(t *testing.T) {
	r := newCacheRig(t, 0)
	rng := rand.New(rand.NewPCG(3, 4))
	t0 := time.Now().Add(-8 * time.Hour).Truncate(time.Hour)
	for i := range 8 {
		lset := labels.FromStrings("__name__", "requests_total", "instance", fmt.Sprintf("i%d", 7-i), "job", []string{"api", "web"}[i%2]) // later series sort first
		// Series i lives in [i*45m, i*45m+3h): each part of a 6 h range
		// query sees a different set.
		from, to := t0.Add(time.Duration(i)*45*time.Minute), t0.Add(time.Duration(i)*45*time.Minute+3*time.Hour)
		v := 0.0
		app := r.db.Appender(context.Background())
		for ts := from; ts.Before(to); ts = ts.Add(30 * time.Second) {
			v += float64(rng.IntN(10))
			_, err := app.Append(0, lset, ts.UnixMilli(), v)
			require.NoError(t, err)
		}
		require.NoError(t, app.Commit())
	}
	app := r.db.Appender(context.Background())
	hl := labels.FromStrings("__name__", "latency", "job", "api")
	for ts, n := t0, 0; ts.Before(t0.Add(6 * time.Hour)); ts, n = ts.Add(time.Minute), n+1 {
		h := &histogram.Histogram{
			Count: uint64(2*n + 12), Sum: float64(n), Schema: 0, ZeroThreshold: 0.001, ZeroCount: 2,
			PositiveSpans:   []histogram.Span{{Offset: 0, Length: 2}},
			PositiveBuckets: []int64{int64(n + 4), 2}, // n+4 and n+6, as deltas
		}
		_, err := app.AppendHistogram(0, hl, ts.UnixMilli(), h, nil)
		require.NoError(t, err)
	}
	require.NoError(t, app.Commit())

	queries := []string{
		`requests_total`,
		`sum by (job) (rate(requests_total[5m]))`,
		`requests_total offset 20m`,
		`max_over_time(requests_total[10m:1m])`,
		`count(requests_total) or vector(0)`,
		`absent(requests_total{instance="i3"})`,
		`histogram_quantile(0.9, rate(latency[5m]))`,
		`rate(latency[5m])`,
		`topk(2, requests_total)`,
		`timestamp(requests_total)`,
	}
	start, end := t0.UnixMilli(), t0.Add(7*time.Hour).UnixMilli()
	for _, qs := range queries {
		for _, step := range []time.Duration{time.Minute, 37 * time.Second} {
			want, wantAnnos, release, err := r.run(qs, step)(context.Background(), start, end)
			require.NoError(t, err, qs)
			for _, parts := range []int{2, 3, 4, 7} {
				got, gotAnnos, rel, err := shardedRun(r.run(qs, step), step.Milliseconds(), parts)(context.Background(), start, end)
				require.NoError(t, err, qs)
				require.Equal(t, want.String(), got.String(), "%s step %s in %d parts", qs, step, parts)
				require.Equal(t, len(wantAnnos), len(gotAnnos), "%s: annotations", qs)
				if rel != nil {
					rel()
				}
			}
			release()
		}
	}
}

// TestShardedRunSplits checks where the parts fall: every step once, no
// part shorter than minShardSteps, a short range not split at all; and
// that a failing part fails the query with its own error.
func TestShardedRunSplits(t *testing.T) {
	step := int64(1000)
	cases := []struct {
		steps, parts int64
		want         int
	}{
		{10, 4, 1}, {99, 2, 1}, {100, 2, 2}, {240, 4, 4}, {241, 8, 4}, {1000, 3, 3},
	}
	for _, c := range cases {
		ch := make(chan [2]int64, 16) // the parts run at once
		run := func(_ context.Context, s, e int64) (upstream.Matrix, annotations.Annotations, func(), error) {
			ch <- [2]int64{s, e}
			return upstream.Matrix{{Metric: labels.FromStrings("a", "b"), Floats: []upstream.FPoint{{T: s}, {T: e}}}}, nil, nil, nil
		}
		m, _, _, err := shardedRun(run, step, int(c.parts))(context.Background(), 0, (c.steps-1)*step)
		require.NoError(t, err)
		close(ch)
		var parts [][2]int64
		for p := range ch {
			parts = append(parts, p)
		}
		require.Len(t, parts, c.want, "%d steps in up to %d parts", c.steps, c.parts)
		require.Len(t, m, 1)
		require.Len(t, m[0].Floats, 2*c.want, "one series, joined in time order")
		for i := 1; i < len(m[0].Floats); i++ {
			require.Less(t, m[0].Floats[i-1].T, m[0].Floats[i].T)
		}
		seen := map[int64]int{}
		for _, p := range parts {
			if c.want > 1 {
				require.GreaterOrEqual(t, (p[1]-p[0])/step+1, int64(minShardSteps))
			}
			for ts := p[0]; ts <= p[1]; ts += step {
				seen[ts]++
			}
		}
		require.Len(t, seen, int(c.steps))
		for ts, n := range seen {
			require.Equal(t, 1, n, "step %d", ts)
		}
	}

	boom := errors.New("part failed")
	failing := func(ctx context.Context, s, _ int64) (upstream.Matrix, annotations.Annotations, func(), error) {
		if s > 0 {
			return nil, nil, nil, boom
		}
		<-ctx.Done() // cancelled by the other part's failure
		return nil, nil, nil, ctx.Err()
	}
	_, _, _, err := shardedRun(failing, step, 4)(context.Background(), 0, 399*step)
	require.ErrorIs(t, err, boom)
}

// TestRangeQuerySplitSameAnswer compares, over HTTP, a server that splits
// long range queries with one that does not, with the results cache off
// so that every step is evaluated.
func TestRangeQuerySplitSameAnswer(t *testing.T) {
	split := newShaleServer(t, func(o *Options, _ *Components) { o.ResultsCacheSize, o.RangeShards = 0, 4 })
	plain := newTestServerOn(t, split.db, func(o *Options, _ *Components) { o.ResultsCacheSize, o.RangeShards = 0, 1 })
	now := time.Now().Truncate(time.Minute)
	t0 := now.Add(-3 * time.Hour)
	app := split.db.Appender(t.Context())
	for i := range 5 {
		lset := labels.FromStrings("__name__", "req_total", "pod", strconv.Itoa(4-i)) // later series sort first
		for ts := t0.Add(time.Duration(i) * 20 * time.Minute); !ts.After(now); ts = ts.Add(15 * time.Second) {
			_, err := app.Append(0, lset, ts.UnixMilli(), float64(ts.Unix()-t0.Unix())*float64(i+1))
			require.NoError(t, err)
		}
	}
	require.NoError(t, app.Commit())
	queries := []string{`sum(rate(req_total[5m]))`, `req_total`, `bad(`, `rate(req_total[1m]) > 1`, `req_total @ end()`, `count_over_time(req_total[30m:1m])`}
	for _, q := range queries {
		for _, step := range []string{"15", "60", "3600"} {
			form := url.Values{"query": {q}, "start": {strconv.FormatInt(t0.Unix(), 10)}, "end": {strconv.FormatInt(now.Unix(), 10)}, "step": {step}}
			c1, _, b1 := split.do(t, "POST", "/api/v1/query_range", form, nil)
			c2, _, b2 := plain.do(t, "POST", "/api/v1/query_range", form, nil)
			require.Equal(t, c2, c1, q)
			require.Equal(t, string(b2), string(b1), "%s step %s", q, step)
		}
	}
}
