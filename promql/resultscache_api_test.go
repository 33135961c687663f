package promql

import (
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"
)

// TestRangeQueryThroughCache asks the same dashboard queries of two APIs
// over one storage, one with the results cache and one without, as a window
// moves forward and samples arrive (late ones too), and requires the same
// bytes from both; the cache must serve most steps.
func TestRangeQueryThroughCache(t *testing.T) {
	cached := newShaleServer(t, nil)
	plain := newTestServerOn(t, cached.db, func(o *Options, _ *Components) { o.ResultsCacheSize, o.RangeShards = 0, 1 })
	require.NotNil(t, cached.api.cache)
	require.Nil(t, plain.api.cache)

	now := time.Now().Truncate(time.Minute)
	t0 := now.Add(-3 * time.Hour)
	write := func(lset labels.Labels, ts time.Time, v float64) {
		app := cached.db.Appender(t.Context())
		_, err := app.Append(0, lset, ts.UnixMilli(), v)
		require.NoError(t, err)
		require.NoError(t, app.Commit())
	}
	for i := range 4 {
		lset := labels.FromStrings("__name__", "req_total", "pod", strconv.Itoa(i))
		for ts := t0; !ts.After(now); ts = ts.Add(15 * time.Second) {
			write(lset, ts, float64(ts.Unix()-t0.Unix())*float64(i+1))
		}
	}
	queries := []string{`sum(rate(req_total[5m]))`, `req_total`, `bad(`, `rate(req_total[1m]) > 1`}
	for round := range 6 {
		end := now.Add(time.Duration(round) * 30 * time.Second)
		for _, q := range queries {
			form := url.Values{"query": {q}, "start": {strconv.FormatInt(end.Add(-time.Hour).Unix(), 10)}, "end": {strconv.FormatInt(end.Unix(), 10)}, "step": {"15"}}
			c1, _, b1 := cached.do(t, "POST", "/api/v1/query_range", form, nil)
			c2, _, b2 := plain.do(t, "POST", "/api/v1/query_range", form, nil)
			require.Equal(t, c2, c1, q)
			require.Equal(t, b2, b1, q)
		}
		// Thirty seconds of samples, and one late sample 20 minutes back.
		for i := range 4 {
			lset := labels.FromStrings("__name__", "req_total", "pod", strconv.Itoa(i))
			write(lset, end.Add(15*time.Second), float64(end.Unix()-t0.Unix()+15)*float64(i+1))
			write(lset, end.Add(30*time.Second), float64(end.Unix()-t0.Unix()+30)*float64(i+1))
		}
		write(labels.FromStrings("__name__", "req_total", "pod", "late"), end.Add(-20*time.Minute), float64(round))
	}
	hits := testutil.ToFloat64(cached.api.cache.steps.WithLabelValues("hit"))
	misses := testutil.ToFloat64(cached.api.cache.steps.WithLabelValues("miss"))
	require.Greater(t, hits, misses)
}
