package promql

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/stretchr/testify/require"
)

// federateNow is the clock of the federation tests.
var federateNow = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// newFederateServer is a server over Shale's storage holding:
//
//	up{job="a",instance="x"}                        1 at now-30s; 0 at now-10m (too old); 99 at now+10s (too new)
//	up{job="b",instance="y"}                        0 at now-20s
//	http_requests_total{job="a",method="GET"}       5 at now-60s, 7 at now-15s (no instance label)
//	gone_total{job="a",instance="x"}                3 at now-60s, then a stale marker at now-30s
//	old_total{job="a",instance="x"}                 1 at now-6m (out of the 5m lookback)
//	rpc_seconds{job="a",instance="x"}               a native histogram at now-10s
//	lat_seconds{job="a",instance="x"}               a histogram with custom buckets at now-10s
func newFederateServer(t *testing.T) *testServer {
	t.Helper()
	ts := newShaleServer(t, nil)
	ts.api.now = func() time.Time { return federateNow }
	at := func(d time.Duration) int64 { return federateNow.Add(d).UnixMilli() }
	app := ts.db.Appender(context.Background())
	add := func(lset labels.Labels, d time.Duration, v float64) {
		t.Helper()
		_, err := app.Append(0, lset, at(d), v)
		require.NoError(t, err)
	}
	upA := labels.FromStrings("__name__", "up", "job", "a", "instance", "x")
	add(upA, -10*time.Minute, 0)
	add(upA, -30*time.Second, 1)
	add(upA, 10*time.Second, 99)
	add(labels.FromStrings("__name__", "up", "job", "b", "instance", "y"), -20*time.Second, 0)
	req := labels.FromStrings("__name__", "http_requests_total", "job", "a", "method", "GET")
	add(req, -60*time.Second, 5)
	add(req, -15*time.Second, 7)
	gone := labels.FromStrings("__name__", "gone_total", "job", "a", "instance", "x")
	add(gone, -60*time.Second, 3)
	add(gone, -30*time.Second, math.Float64frombits(value.StaleNaN))
	add(labels.FromStrings("__name__", "old_total", "job", "a", "instance", "x"), -6*time.Minute, 1)
	_, err := app.AppendHistogram(0, labels.FromStrings("__name__", "rpc_seconds", "job", "a", "instance", "x"), at(-10*time.Second), &histogram.Histogram{
		Count: 5, Sum: 12.5, Schema: 1, ZeroThreshold: 0.001, ZeroCount: 1,
		PositiveSpans: []histogram.Span{{Offset: 0, Length: 2}}, PositiveBuckets: []int64{1, 2}, // 1, 3
	}, nil)
	require.NoError(t, err)
	_, err = app.AppendHistogram(0, labels.FromStrings("__name__", "lat_seconds", "job", "a", "instance", "x"), at(-10*time.Second), &histogram.Histogram{
		Count: 6, Sum: 3, Schema: histogram.CustomBucketsSchema, CustomValues: []float64{0.1, 1},
		PositiveSpans: []histogram.Span{{Offset: 0, Length: 3}}, PositiveBuckets: []int64{2, 1, -2}, // 2, 3, 1
	}, nil)
	require.NoError(t, err)
	require.NoError(t, app.Commit())
	return ts
}

func federateGet(t *testing.T, ts *testServer, query string, header http.Header) (int, http.Header, string) {
	t.Helper()
	return ts.do(t, http.MethodGet, "/federate?"+query, nil, header)
}

func matchQuery(selectors ...string) string {
	return url.Values{"match[]": selectors}.Encode()
}

// fedSample is one sample of a parsed exposition: family type, labels
// (name included) and timestamp.
type fedSample struct {
	typ    dto.MetricType
	labels string
	value  string
	ms     int64
}

func flatten(fams []*dto.MetricFamily) []fedSample {
	var out []fedSample
	for _, f := range fams {
		for _, m := range f.Metric {
			ls := []string{"__name__=" + f.GetName()}
			for _, l := range m.Label {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			var v string
			switch {
			case m.Untyped != nil:
				v = fmt.Sprint(m.Untyped.GetValue())
			case m.Histogram != nil:
				h := m.Histogram
				v = fmt.Sprintf("count=%v sum=%v", h.GetSampleCountFloat()+float64(h.GetSampleCount()), h.GetSampleSum())
				for _, b := range h.Bucket {
					v += fmt.Sprintf(" le%v=%v", b.GetUpperBound(), b.GetCumulativeCountFloat()+float64(b.GetCumulativeCount()))
				}
				if h.Schema != nil {
					v += fmt.Sprintf(" schema=%d zero=%v/%v pos=", h.GetSchema(), h.GetZeroThreshold(), h.GetZeroCountFloat())
					for _, sp := range h.PositiveSpan {
						v += fmt.Sprintf("%d:%d", sp.GetOffset(), sp.GetLength())
					}
					v += fmt.Sprint(h.PositiveCount)
				}
			}
			out = append(out, fedSample{f.GetType(), strings.Join(ls, ","), v, m.GetTimestampMs()})
		}
	}
	return out
}

func TestFederateText(t *testing.T) {
	ts := newFederateServer(t)
	ms := func(d time.Duration) int64 { return federateNow.Add(d).UnixMilli() }

	// The two selectors overlap on up{job="a"}: it must come once.
	code, hdr, body := federateGet(t, ts, matchQuery(`up`, `{job="a"}`), nil)
	require.Equal(t, http.StatusOK, code, body)
	require.True(t, strings.HasPrefix(hdr.Get("Content-Type"), "text/plain; version=0.0.4"), hdr.Get("Content-Type"))

	// Sorted by metric name, one family each, untyped for floats; the
	// series without an instance label carries instance="" as Prometheus
	// sends it; the native histogram is left out of the text format and the
	// custom-bucket one is a classic histogram.
	want := fmt.Sprintf(`# TYPE http_requests_total untyped
http_requests_total{job="a",method="GET",instance=""} 7 %d
# TYPE lat_seconds histogram
lat_seconds_bucket{instance="x",job="a",le="0.1"} 2 %[2]d
lat_seconds_bucket{instance="x",job="a",le="1"} 5 %[2]d
lat_seconds_bucket{instance="x",job="a",le="+Inf"} 6 %[2]d
lat_seconds_sum{instance="x",job="a"} 3 %[2]d
lat_seconds_count{instance="x",job="a"} 6 %[2]d
# TYPE up untyped
up{instance="x",job="a"} 1 %d
up{instance="y",job="b"} 0 %d
`, ms(-15*time.Second), ms(-10*time.Second), ms(-30*time.Second), ms(-20*time.Second))
	require.Equal(t, want, body)

	p := expfmt.NewTextParser(model.UTF8Validation)
	parsed, err := p.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err)
	var fams []*dto.MetricFamily
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range parsed {
			if !yield(k) {
				return
			}
		}
	}) {
		fams = append(fams, parsed[name])
	}
	require.Equal(t, []fedSample{
		{dto.MetricType_UNTYPED, "__name__=http_requests_total,instance=,job=a,method=GET", "7", ms(-15 * time.Second)},
		{dto.MetricType_HISTOGRAM, "__name__=lat_seconds,instance=x,job=a", "count=6 sum=3 le0.1=2 le1=5 le+Inf=6", ms(-10 * time.Second)},
		{dto.MetricType_UNTYPED, "__name__=up,instance=x,job=a", "1", ms(-30 * time.Second)},
		{dto.MetricType_UNTYPED, "__name__=up,instance=y,job=b", "0", ms(-20 * time.Second)},
	}, flatten(fams))
}

func TestFederateProtobuf(t *testing.T) {
	ts := newFederateServer(t)
	ms := func(d time.Duration) int64 { return federateNow.Add(d).UnixMilli() }
	// What Prometheus' scraper sends when native histograms are on.
	accept := http.Header{"Accept": {"application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"}}
	code, hdr, body := federateGet(t, ts, matchQuery(`{job="a"}`), accept)
	require.Equal(t, http.StatusOK, code, body)
	format := expfmt.Format(hdr.Get("Content-Type"))
	require.Equal(t, expfmt.TypeProtoDelim, format.FormatType(), hdr.Get("Content-Type"))

	dec := expfmt.NewDecoder(strings.NewReader(body), format)
	var fams []*dto.MetricFamily
	for {
		var f dto.MetricFamily
		if err := dec.Decode(&f); err == io.EOF {
			break
		} else {
			require.NoError(t, err)
		}
		fams = append(fams, &f)
	}
	require.Equal(t, []fedSample{
		{dto.MetricType_UNTYPED, "__name__=http_requests_total,instance=,job=a,method=GET", "7", ms(-15 * time.Second)},
		{dto.MetricType_HISTOGRAM, "__name__=lat_seconds,instance=x,job=a", "count=6 sum=3 le0.1=2 le1=5", ms(-10 * time.Second)},
		{dto.MetricType_HISTOGRAM, "__name__=rpc_seconds,instance=x,job=a", "count=5 sum=12.5 schema=1 zero=0.001/1 pos=0:2[1 3]", ms(-10 * time.Second)},
		{dto.MetricType_UNTYPED, "__name__=up,instance=x,job=a", "1", ms(-30 * time.Second)},
	}, flatten(fams))
}

func TestFederateErrors(t *testing.T) {
	ts := newFederateServer(t)
	for _, tc := range []struct {
		name, method, query string
		code                int
		body                string
	}{
		{"no match[]", http.MethodGet, "", http.StatusBadRequest, "no match[] parameter"},
		{"empty match[]", http.MethodGet, "match[]=", http.StatusBadRequest, "parse error"},
		{"bad selector", http.MethodGet, matchQuery("up", "not-a-valid-metric-name"), http.StatusBadRequest, "1:4: parse error: unexpected <op:->"},
		{"bad form", http.MethodGet, "match[]=%zz", http.StatusBadRequest, "error parsing form values"},
		{"POST", http.MethodPost, matchQuery("up"), http.StatusMethodNotAllowed, ""},
		{"no series", http.MethodGet, matchQuery("does_not_exist"), http.StatusOK, ""},
		{"only stale and old series", http.MethodGet, matchQuery("gone_total", "old_total"), http.StatusOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body := ts.do(t, tc.method, "/federate?"+tc.query, nil, nil)
			require.Equal(t, tc.code, code, body)
			if tc.body == "" {
				if tc.code == http.StatusOK {
					require.Empty(t, body)
				}
				return
			}
			require.Contains(t, body, tc.body)
		})
	}
}

func TestFederateNotReady(t *testing.T) {
	ts := newShaleServer(t, func(_ *Options, c *Components) { c.Ready = func() bool { return false } })
	code, _, body := federateGet(t, ts, matchQuery("up"), nil)
	require.Equal(t, http.StatusServiceUnavailable, code, body)
}
