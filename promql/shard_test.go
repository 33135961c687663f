package promql

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
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
	// The last series ends 8h15m after t0: t0 lies far enough back that it
	// ends before now whatever the minute (the storage refuses samples ahead
	// of its clock).
	t0 := time.Now().Add(-9 * time.Hour).Truncate(time.Hour)
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
		switch {
		case s == 0:
			return nil, nil, nil, nil
		case s == 100*step:
			return nil, nil, nil, boom
		}
		<-ctx.Done() // cancelled by the earlier part's failure
		return nil, nil, nil, upstream.ErrQueryCanceled("query execution")
	}
	_, _, _, err := shardedRun(failing, step, 4)(context.Background(), 0, 399*step)
	require.ErrorIs(t, err, boom)
}

// TestShardedRunEarliestError: whichever part fails first, the query fails
// with the error of the earliest part that fails of itself, as the engine
// stops at the earliest failing step of the whole range; the engine's
// cancellation error of a part stopped on the way never stands in for it.
func TestShardedRunEarliestError(t *testing.T) {
	step := int64(1000)
	for _, failing := range [][]int{{1}, {2}, {0, 3}, {1, 2, 3}, {0, 1, 2, 3}} {
		t.Run(fmt.Sprint(failing), func(t *testing.T) {
			// The last failing part fails at once; the others finish (or
			// fail) only once it has, as a part with more to evaluate does.
			last := failing[len(failing)-1]
			lastFailed := make(chan struct{})
			run := func(ctx context.Context, s, _ int64) (upstream.Matrix, annotations.Annotations, func(), error) {
				part := int(s / (100 * step))
				if part == last {
					close(lastFailed)
					return nil, nil, nil, fmt.Errorf("part %d failed", part)
				}
				<-lastFailed
				if ctx.Err() != nil { // what the engine answers once cancelled
					return nil, nil, nil, upstream.ErrQueryCanceled("query execution")
				}
				if slices.Contains(failing, part) {
					return nil, nil, nil, fmt.Errorf("part %d failed", part)
				}
				return upstream.Matrix{{Metric: labels.FromStrings("a", "b"), Floats: []upstream.FPoint{{T: s}}}}, nil, nil, nil
			}
			_, _, _, err := shardedRun(run, step, 4)(context.Background(), 0, 399*step)
			require.EqualError(t, err, fmt.Sprintf("part %d failed", failing[0]))
		})
	}
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

// TestRangeQuerySplitFailsAsPrometheus sends range queries that fail at some
// steps to a server that splits them into four parts and wants Prometheus
// 3.16's answer (recorded from it over the same samples) every time,
// whichever part fails first: the error of the earliest failing step, 422,
// never a cancellation the client did not ask for.
func TestRangeQuerySplitFailsAsPrometheus(t *testing.T) {
	srv := newShaleServer(t, func(o *Options, _ *Components) { o.ResultsCacheSize, o.RangeShards = 0, 4 })
	end := time.Now().Truncate(time.Minute)
	start := end.Add(-30 * time.Minute)
	// one{g="1"} and dup{g="1",i="b"} all along; dup{i="a"} in minutes
	// 5-9 and dup{i="c"} from minute 20: the match group g="1" is
	// duplicated first with a, later with c.
	app := srv.db.Appender(t.Context())
	for _, s := range []struct {
		lset     labels.Labels
		from, to time.Duration
	}{
		{labels.FromStrings("__name__", "one", "g", "1"), 0, 30 * time.Minute},
		{labels.FromStrings("__name__", "dup", "g", "1", "i", "b"), 0, 30 * time.Minute},
		{labels.FromStrings("__name__", "dup", "g", "1", "i", "a"), 5 * time.Minute, 9 * time.Minute},
		{labels.FromStrings("__name__", "dup", "g", "1", "i", "c"), 20 * time.Minute, 30 * time.Minute},
	} {
		for ts := start.Add(s.from); ts.Before(start.Add(s.to)); ts = ts.Add(15 * time.Second) {
			_, err := app.Append(0, s.lset, ts.UnixMilli(), 1)
			require.NoError(t, err)
		}
	}
	require.NoError(t, app.Commit())

	manyToMany := func(first, second string) string {
		return `{"status":"error","errorType":"execution","error":"found duplicate series for the match group {g=\"1\"} on the right hand-side of the operation: ` +
			`[{__name__=\"dup\", g=\"1\", i=\"` + first + `\"}, {__name__=\"dup\", g=\"1\", i=\"` + second + `\"}];` +
			`many-to-many matching not allowed: matching labels must be unique on one side"}`
	}
	cases := []struct {
		query string
		code  int
		body  string
	}{
		{`one * on(g) dup`, 422, manyToMany("a", "b")},            // fails in the first part and later ones
		{`one * on(g) dup{i!="a"}`, 422, manyToMany("b", "c")},    // fails in the third part only
		{`one * on(g) group_left dup`, 422, manyToMany("a", "b")}, // as the first
	}
	form := func(q string) url.Values {
		return url.Values{"query": {q}, "start": {strconv.FormatInt(start.Unix(), 10)}, "end": {strconv.FormatInt(end.Unix(), 10)}, "step": {"5"}}
	}
	for _, c := range cases {
		for range 20 { // which part fails first varies from run to run
			code, _, body := srv.do(t, "GET", "/api/v1/query_range?"+form(c.query).Encode(), nil, nil)
			require.Equal(t, c.code, code, c.query)
			require.Equal(t, c.body, body, c.query)
		}
	}
}
