package promql

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/util/teststorage"
	"github.com/stretchr/testify/require"
)

func TestOptionsValidate(t *testing.T) {
	require.NoError(t, DefaultOptions().Validate())
	cases := []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"timeout", func(o *Options) { o.QueryTimeout = 0 }, "query_timeout"},
		{"samples", func(o *Options) { o.MaxSamples = -1 }, "max_samples"},
		{"concurrency", func(o *Options) { o.MaxConcurrentQueries = 0 }, "max_concurrent_queries"},
		{"lookback", func(o *Options) { o.LookbackDelta = 0 }, "lookback_delta"},
		{"cors", func(o *Options) { o.CORSOrigin = "(" }, "cors_origin"},
		{"remote read", func(o *Options) { o.RemoteReadConcurrencyLimit = 0 }, "remote_read_concurrency_limit"},
		{"query length", func(o *Options) { o.MaxQueryLength = -1 }, "max_query_length"},
		{"query depth", func(o *Options) { o.MaxQueryDepth = -1 }, "max_query_depth"},
		{"subquery steps", func(o *Options) { o.MaxSubquerySteps = -1 }, "max_subquery_steps"},
		{"memory", func(o *Options) { o.MaxMemory = -1 }, "max_memory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := DefaultOptions()
			c.edit(&o)
			require.ErrorContains(t, o.Validate(), c.want)
			_, err := NewAPI(o, Components{Queryable: newTestStorage(t)})
			require.ErrorContains(t, err, c.want)
		})
	}
	_, err := NewAPI(DefaultOptions(), Components{})
	require.ErrorContains(t, err, "Queryable")
}

func TestPrometheusRelease(t *testing.T) {
	cases := []struct{ in, want string }{
		{"v0.316.0", "3.16.0"},
		{"v0.54.1", ""},
		{"v0.300.2-rc.0", "3.0.2"},
		{"v0.1210.3", "12.10.3"},
		{"v1.2.3", ""},
	}
	for _, c := range cases {
		got, ok := prometheusRelease(c.in)
		require.Equal(t, c.want != "", ok, c.in)
		require.Equal(t, c.want, got, c.in)
	}
}

// TestQueryGate checks that a query beyond the limit waits for a slot and
// gives up when its context ends.
func TestQueryGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := newQueryGate(1, nil)
		require.NoError(t, err)
		_, err = g.Insert(context.Background(), "q1")
		require.NoError(t, err)

		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = g.Insert(ctx, "canceled")
		require.ErrorIs(t, err, context.Canceled)

		admitted := make(chan struct{})
		go func() {
			_, err := g.Insert(context.Background(), "q2")
			require.NoError(t, err)
			close(admitted)
		}()
		synctest.Wait()
		select {
		case <-admitted:
			t.Fatal("second query admitted while the only slot was taken")
		default:
		}
		require.Equal(t, 1.0, testutil.ToFloat64(g.waiting))
		g.Delete(0)
		<-admitted
		require.Equal(t, 0.0, testutil.ToFloat64(g.waiting))
		require.Equal(t, 1.0, testutil.ToFloat64(g.active))
		g.Delete(0)
	})
}

func appendSeries(t testing.TB, ts *testServer, tm time.Time, kv ...string) {
	t.Helper()
	app := ts.db.Appender(context.Background())
	for i := range 10 {
		_, err := app.Append(0, labels.FromStrings(kv...), tm.Add(time.Duration(i)*15*time.Second).UnixMilli(), float64(i))
		require.NoError(t, err)
	}
	require.NoError(t, app.Commit())
}

// TestResponses checks exact bodies and status codes of answers that do not
// depend on a clock.
func TestResponses(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, func(o *Options, c *Components) {
		c.StorageRetention = "15d"
		c.Metadata = testMetadata
		c.Flags = map[string]string{"storage.bucket": "file:///data"}
		c.ConfigYAML = func() string { return "storage:\n  bucket: file:///data\n" }
		c.BuildInfo = BuildInfo{Version: "0.1.0", Revision: "abc", Branch: "main", BuildUser: "ci", BuildDate: "20260101", GoVersion: "go1.26"}
	})
	base := time.Unix(1_700_000_000, 0)
	appendSeries(t, ts, base, "__name__", "up", "job", "api")
	appendSeries(t, ts, base, "__name__", "temperature", "job", "api")
	appendSeries(t, ts, base, "__name__", "http.server.duration", "http.method", "GET")
	at := "1700000120"

	cases := []struct {
		name   string
		method string
		path   string
		form   url.Values
		code   int
		body   string
	}{
		{"instant", "GET", "/api/v1/query?query=up&time=" + at, nil, 200,
			`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"up","job":"api"},"value":[1700000120,"8"]}]}}`},
		{"POST form", "POST", "/api/v1/query", url.Values{"query": {"up * 2"}, "time": {at}}, 200,
			`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"job":"api"},"value":[1700000120,"16"]}]}}`},
		{"range", "GET", "/api/v1/query_range?query=up&start=1700000100&end=1700000130&step=15", nil, 200,
			`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"up","job":"api"},"values":[[1700000100,"6"],[1700000115,"7"],[1700000130,"8"]]}]}}`},
		{"info annotation", "GET", "/api/v1/query?query=rate(temperature[1m])&time=" + at, nil, 200,
			`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"job":"api"},"value":[1700000120,"0.06666666666666665"]}]},"infos":["PromQL info: metric might not be a counter, name does not end in _total/_sum/_count/_bucket: \"temperature\" (1:6)"]}`},
		{"warning annotation", "GET", "/api/v1/query?query=histogram_quantile(0.5,up)&time=" + at, nil, 200,
			`{"status":"success","data":{"resultType":"vector","result":[]},"warnings":["PromQL warning: bucket label \"le\" is missing or has a malformed value of \"\" (1:24)"]}`},
		{"parse error", "GET", "/api/v1/query?query=up{", nil, 400,
			`{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": 1:4: parse error: unexpected end of input inside braces"}`},
		{"experimental function off", "GET", "/api/v1/query?query=sort_by_label(up,\"job\")", nil, 400,
			`{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": 1:1: parse error: function \"sort_by_label\" is not enabled"}`},
		{"utf8 escaped label name", "GET", "/api/v1/label/U__http_2e_method/values?start=1700000000&end=" + at, nil, 200,
			`{"status":"success","data":["GET"]}`},
		{"utf8 label names", "GET", "/api/v1/labels?match[]={\"http.server.duration\"}&start=1700000000&end=" + at, nil, 200,
			`{"status":"success","data":["__name__","http.method"]}`},
		{"format_query", "GET", "/api/v1/format_query?query=sum(rate(up[5m]))by(job)", nil, 200,
			`{"status":"success","data":"sum by (job) (rate(up[5m]))"}`},
		{"parse_query", "POST", "/api/v1/parse_query", url.Values{"query": {"up"}}, 200,
			`{"status":"success","data":{"anchored":false,"matchers":[{"name":"__name__","type":"=","value":"up"}],"name":"up","offset":0,"offsetExpr":null,"smoothed":false,"startOrEnd":null,"timestamp":null,"type":"vectorSelector"}}`},
		{"buildinfo", "GET", "/api/v1/status/buildinfo", nil, 200,
			`{"status":"success","data":{"version":"0.1.0","revision":"abc","branch":"main","buildUser":"ci","buildDate":"20260101","goVersion":"go1.26"}}`},
		{"flags", "GET", "/api/v1/status/flags", nil, 200,
			`{"status":"success","data":{"storage.bucket":"file:///data"}}`},
		{"config", "GET", "/api/v1/status/config", nil, 200,
			`{"status":"success","data":{"yaml":"storage:\n  bucket: file:///data\n"}}`},
		{"targets", "GET", "/api/v1/targets", nil, 200,
			`{"status":"success","data":{"activeTargets":[],"droppedTargets":[],"droppedTargetCounts":{}}}`},
		{"rules", "GET", "/api/v1/rules", nil, 200, `{"status":"success","data":{"groups":[]}}`},
		{"alerts", "GET", "/api/v1/alerts", nil, 200, `{"status":"success","data":{"alerts":[]}}`},
		{"alertmanagers", "GET", "/api/v1/alertmanagers", nil, 200,
			`{"status":"success","data":{"activeAlertmanagers":[],"droppedAlertmanagers":[]}}`},
		{"exemplars none", "GET", "/api/v1/query_exemplars?query=up&start=1700000000&end=" + at, nil, 200,
			`{"status":"success","data":[]}`},
		{"tsdb status bad limit", "GET", "/api/v1/status/tsdb?limit=0", nil, 400,
			`{"status":"error","errorType":"bad_data","error":"limit must be a positive number"}`},
		{"tsdb status limit too big", "GET", "/api/v1/status/tsdb?limit=10001", nil, 400,
			`{"status":"error","errorType":"bad_data","error":"limit must not exceed 10000"}`},
		{"tsdb status", "GET", "/api/v1/status/tsdb", nil, 200,
			`{"status":"success","data":{"headStats":{"numSeries":3,"numLabelPairs":5,"chunkCount":0,"minTime":1700000000000,"maxTime":1700000135000},` +
				`"seriesCountByMetricName":[{"name":"http.server.duration","value":1},{"name":"temperature","value":1},{"name":"up","value":1}],` +
				`"labelValueCountByLabelName":[{"name":"__name__","value":3},{"name":"http.method","value":1},{"name":"job","value":1}],` +
				`"memoryInBytesByLabelName":[{"name":"__name__","value":63},{"name":"http.method","value":16},{"name":"job","value":16}],` +
				`"seriesCountByLabelValuePair":[{"name":"job=api","value":2},{"name":"__name__=http.server.duration","value":1},{"name":"__name__=temperature","value":1},{"name":"__name__=up","value":1},{"name":"http.method=GET","value":1}]}}`},
		{"metadata bad limit", "GET", "/api/v1/metadata?limit=x", nil, 400,
			`{"status":"error","errorType":"bad_data","error":"limit must be a number"}`},
		{"admin off", "POST", "/api/v1/admin/tsdb/delete_series", url.Values{"match[]": {"up"}}, 500,
			`{"status":"error","errorType":"unavailable","error":"admin APIs disabled"}`},
		{"snapshot admin off", "POST", "/api/v1/admin/tsdb/snapshot", nil, 500,
			`{"status":"error","errorType":"unavailable","error":"admin APIs disabled"}`},
		{"clean tombstones admin off", "PUT", "/api/v1/admin/tsdb/clean_tombstones", nil, 500,
			`{"status":"error","errorType":"unavailable","error":"admin APIs disabled"}`},
		{"remote write not mounted", "POST", "/api/v1/write", nil, 404,
			"remote write receiver needs to be enabled with --web.enable-remote-write-receiver\n"},
		{"wal replay", "GET", "/api/v1/status/walreplay", nil, 200,
			`{"status":"success","data":{"min":0,"max":0,"current":0}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, body := ts.do(t, c.method, c.path, c.form, nil)
			require.Equal(t, c.code, code, body)
			require.Equal(t, c.body, body)
		})
	}

	t.Run("runtimeinfo", func(t *testing.T) {
		code, _, body := ts.do(t, "GET", "/api/v1/status/runtimeinfo", nil, nil)
		require.Equal(t, 200, code)
		for _, field := range []string{`"startTime":`, `"CWD":`, `"hostname":`, `"serverTime":`, `"reloadConfigSuccess":true`,
			`"lastConfigTime":`, `"corruptionCount":0`, `"goroutineCount":`, `"GOMAXPROCS":`, `"GOMEMLIMIT":`, `"GOGC":`, `"GODEBUG":`, `"storageRetention":"15d"`} {
			require.Contains(t, body, field)
		}
	})
	testMetadataAnswers(t, ts)
	t.Run("stats", func(t *testing.T) {
		code, _, body := ts.do(t, "GET", "/api/v1/query_range?query=up&start=1700000100&end=1700000130&step=15&stats=all", nil, nil)
		require.Equal(t, 200, code, body)
		require.Contains(t, body, `"stats":{"timings":{"evalTotalTime":`)
		require.Contains(t, body, `"samples":{"totalQueryableSamples":3,"samplesRead":3,"seriesTouched":1,"peakSamples":3}`)
	})

	// Requests are counted by handler.
	n := testutil.ToFloat64(ts.api.requests.WithLabelValues("/query", "200"))
	require.GreaterOrEqual(t, n, 4.0)
	require.Equal(t, 1.0, testutil.ToFloat64(ts.api.requests.WithLabelValues("/status/config", "200")))
}

func TestLimits(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(*Options)
		query url.Values
		code  int
		body  string
	}{
		{"max samples", nil, url.Values{"query": {"up[10m]"}, "time": {"1700000140"}}, 422,
			`{"status":"error","errorType":"execution","error":"query processing would load too many samples into memory in query execution"}`},
		{"query timeout", func(o *Options) { o.QueryTimeout = time.Nanosecond }, url.Values{"query": {"up"}, "time": {"1700000140"}}, 503,
			`{"status":"error","errorType":"timeout","error":"query timed out in query execution"}`},
		{"bad timeout", nil, url.Values{"query": {"up"}, "timeout": {"soon"}}, 400,
			`{"status":"error","errorType":"bad_data","error":"invalid parameter \"timeout\": cannot parse \"soon\" to a valid duration"}`},
		{"max series", func(o *Options) { o.MaxSeries = 1 }, url.Values{"query": {`count({job="api"})`}, "time": {"1700000140"}}, 422,
			`{"status":"error","errorType":"cost_limit","error":"query would load too many series into memory in query execution"}`},
		{"max series not reached", func(o *Options) { o.MaxSeries = 2 }, url.Values{"query": {`count({job="api"})`}, "time": {"1700000140"}}, 200,
			`{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000140,"2"]}]}}`},
		{"max samples read", func(o *Options) { o.MaxSamplesRead = 15 }, url.Values{"query": {`sum(count_over_time({job="api"}[10m]))`}, "time": {"1700000140"}}, 422,
			`{"status":"error","errorType":"cost_limit","error":"query would read too many samples in query execution"}`},
		{"experimental function on", nil,
			url.Values{"query": {`sort_by_label(up, "job")`}, "time": {"1700000140"}}, 200,
			`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"up","job":"api"},"value":[1700000140,"9"]}]}}`},
	}
	t.Parallel()
	db := teststorage.New(t)
	appendSeries(t, &testServer{db: db}, time.Unix(1_700_000_000, 0), "__name__", "up", "job", "api")
	appendSeries(t, &testServer{db: db}, time.Unix(1_700_000_000, 0), "__name__", "down", "job", "api")
	shared := newTestServerOn(t, db, func(o *Options, _ *Components) {
		o.MaxSamples = 5
		o.EnableExperimentalFunctions = true
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts := shared
			if c.edit != nil {
				ts = newTestServerOn(t, db, func(o *Options, _ *Components) { c.edit(o) })
			}
			code, _, body := ts.do(t, "POST", "/api/v1/query", c.query, nil)
			require.Equal(t, c.code, code, body)
			require.Equal(t, c.body, body)
		})
	}
}

func TestAdmin(t *testing.T) {
	t.Parallel()
	t.Run("without deleter", func(t *testing.T) {
		ts := newTestServer(t, func(o *Options, _ *Components) { o.EnableAdmin = true })
		cases := []struct {
			method, path string
			form         url.Values
			code         int
			body         string
		}{
			{"POST", "/api/v1/admin/tsdb/delete_series", url.Values{"match[]": {"up"}}, 500,
				`{"status":"error","errorType":"internal","error":"delete series: not supported by this storage"}`},
			{"POST", "/api/v1/admin/tsdb/delete_series", url.Values{}, 400,
				`{"status":"error","errorType":"bad_data","error":"no match[] parameter provided"}`},
			{"POST", "/api/v1/admin/tsdb/clean_tombstones", nil, 204, ""},
			{"POST", "/api/v1/admin/tsdb/snapshot", nil, 500,
				`{"status":"error","errorType":"internal","error":"create snapshot: not supported by this storage"}`},
			{"PUT", "/api/v1/admin/tsdb/snapshot?skip_head=maybe", nil, 400,
				`{"status":"error","errorType":"bad_data","error":"invalid parameter \"skip_head\": unable to parse boolean: strconv.ParseBool: parsing \"maybe\": invalid syntax"}`},
		}
		for _, c := range cases {
			code, _, body := ts.do(t, c.method, c.path, c.form, nil)
			require.Equal(t, c.code, code, c.path)
			require.Equal(t, c.body, body, c.path)
		}
	})

	t.Run("with deleter", func(t *testing.T) {
		deleter := &recordingDeleter{}
		ts := newTestServer(t, func(o *Options, c *Components) {
			o.EnableAdmin = true
			deleter.db = c.Queryable.(*teststorage.TestStorage)
			c.Deleter = deleter
		})
		base := time.Unix(1_700_000_000, 0)
		appendSeries(t, ts, base, "__name__", "up", "job", "api")
		appendSeries(t, ts, base, "__name__", "temperature", "job", "api")

		code, _, body := ts.do(t, "POST", "/api/v1/admin/tsdb/delete_series",
			url.Values{"match[]": {`up{job="api"}`}, "start": {"1700000000"}, "end": {"1700000200"}}, nil)
		require.Equal(t, http.StatusNoContent, code, body)
		require.Equal(t, []string{`job="api"__name__="up"`}, deleter.calls)

		_, _, body = ts.do(t, "GET", "/api/v1/query?query=count({job=\"api\"})&time=1700000140", nil, nil)
		require.Equal(t, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000140,"1"]}]}}`, body)

		code, _, _ = ts.do(t, "POST", "/api/v1/admin/tsdb/clean_tombstones", nil, nil)
		require.Equal(t, http.StatusNoContent, code)
		require.Equal(t, 1, deleter.cleaned)
	})

	t.Run("with snapshotter", func(t *testing.T) {
		snap := &recordingSnapshotter{}
		ts := newTestServer(t, func(o *Options, c *Components) {
			o.EnableAdmin = true
			c.Snapshotter = snap
		})
		// Named as Prometheus names them: UTC time, then 16 hex digits.
		name := regexp.MustCompile(`^\{"status":"success","data":\{"name":"(\d{8}T\d{6}Z-[0-9a-f]{16})"\}\}$`)
		for _, c := range []struct {
			method, path string
			withHead     bool
		}{
			{"POST", "/api/v1/admin/tsdb/snapshot", true},
			{"PUT", "/api/v1/admin/tsdb/snapshot?skip_head=true", false},
			{"POST", "/api/v1/admin/tsdb/snapshot?skip_head=0", true},
		} {
			code, _, body := ts.do(t, c.method, c.path, nil, nil)
			require.Equal(t, http.StatusOK, code, body)
			m := name.FindStringSubmatch(body)
			require.NotNil(t, m, body)
			require.Equal(t, m[1], snap.names[len(snap.names)-1])
			require.Equal(t, c.withHead, snap.withHead[len(snap.withHead)-1], c.path)
		}
		require.NotEqual(t, snap.names[0], snap.names[1])

		snap.err = errors.New("object store down")
		code, _, body := ts.do(t, "POST", "/api/v1/admin/tsdb/snapshot", nil, nil)
		require.Equal(t, http.StatusInternalServerError, code)
		require.Equal(t, `{"status":"error","errorType":"internal","error":"create snapshot: object store down"}`, body)

		// The storage asks to be retried later: 503, as for a query.
		snap.err = unavailableErr{}
		code, _, body = ts.do(t, "POST", "/api/v1/admin/tsdb/snapshot", nil, nil)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, `{"status":"error","errorType":"unavailable","error":"create snapshot: storage unavailable: the object store has been failing for 42s"}`, body)
	})
}

// unavailableErr is an error of a storage whose object store is failing.
type unavailableErr struct{}

func (unavailableErr) Error() string {
	return "storage unavailable: the object store has been failing for 42s"
}
func (unavailableErr) Unavailable() bool { return true }

type recordingSnapshotter struct {
	names    []string
	withHead []bool
	err      error
}

func (s *recordingSnapshotter) Snapshot(_ context.Context, name string, withHead bool) error {
	s.names, s.withHead = append(s.names, name), append(s.withHead, withHead)
	return s.err
}

type recordingDeleter struct {
	db interface {
		Delete(ctx context.Context, mint, maxt int64, ms ...*labels.Matcher) error
	}
	calls   []string
	cleaned int
}

func (d *recordingDeleter) Delete(ctx context.Context, mint, maxt int64, ms ...*labels.Matcher) error {
	var sb strings.Builder
	for _, m := range ms {
		sb.WriteString(m.String())
	}
	d.calls = append(d.calls, sb.String())
	return d.db.Delete(ctx, mint, maxt, ms...)
}

func (d *recordingDeleter) CleanTombstones(context.Context) error {
	d.cleaned++
	return nil
}

type staticMetadata map[string][]metadata.Metadata

func (s staticMetadata) MetricMetadata(_ context.Context, metric string) (map[string][]metadata.Metadata, error) {
	if metric == "" {
		return s, nil
	}
	out := map[string][]metadata.Metadata{}
	if m, ok := s[metric]; ok {
		out[metric] = m
	}
	return out, nil
}

var testMetadata = staticMetadata{
	"http_requests_total": {
		{Type: model.MetricTypeCounter, Help: "Requests served."},
		{Type: model.MetricTypeCounter, Help: "Requests handled."},
	},
	"temperature_celsius": {{Type: model.MetricTypeGauge, Help: "Temperature.", Unit: "celsius"}},
}

// testMetadataAnswers checks /api/v1/metadata over testMetadata.
func testMetadataAnswers(t *testing.T, ts *testServer) {
	t.Helper()
	cases := []struct{ query, body string }{
		{"", `{"status":"success","data":{"http_requests_total":[{"type":"counter","unit":"","help":"Requests served."},{"type":"counter","unit":"","help":"Requests handled."}],"temperature_celsius":[{"type":"gauge","unit":"celsius","help":"Temperature."}]}}`},
		{"?metric=temperature_celsius", `{"status":"success","data":{"temperature_celsius":[{"type":"gauge","unit":"celsius","help":"Temperature."}]}}`},
		{"?metric=nope", `{"status":"success","data":{}}`},
		{"?limit=1", `{"status":"success","data":{"http_requests_total":[{"type":"counter","unit":"","help":"Requests served."},{"type":"counter","unit":"","help":"Requests handled."}]}}`},
		{"?limit_per_metric=1", `{"status":"success","data":{"http_requests_total":[{"type":"counter","unit":"","help":"Requests served."}],"temperature_celsius":[{"type":"gauge","unit":"celsius","help":"Temperature."}]}}`},
		{"?limit=0", `{"status":"success","data":{}}`},
	}
	for _, c := range cases {
		t.Run("metadata"+c.query, func(t *testing.T) {
			code, hdr, body := ts.do(t, "GET", "/api/v1/metadata"+c.query, nil, nil)
			require.Equal(t, 200, code)
			require.Equal(t, "application/json", hdr.Get("Content-Type"))
			require.Equal(t, c.body, body)
		})
	}
}

// TestMounting checks readiness and that a write handler mounted by the
// server on the same mux takes /api/v1/write while the API keeps the rest.
func TestMounting(t *testing.T) {
	t.Parallel()
	ready := false
	api, err := NewAPI(DefaultOptions(), Components{Queryable: emptyQueryable, Ready: func() bool { return ready }})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, api.Close()) })
	mux := http.NewServeMux()
	api.Register(mux)
	mux.HandleFunc("POST /api/v1/write", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })

	for _, path := range []string{"/api/v1/query?query=1", "/api/v1/metadata", "/api/v1/status/buildinfo", "/federate?match[]=up"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		require.Equal(t, http.StatusServiceUnavailable, rec.Code, path)
		require.Equal(t, "Service Unavailable", rec.Body.String(), path)
		require.Equal(t, "false", rec.Header().Get("X-Prometheus-Stopping"), path)
	}
	ready = true
	for _, c := range []struct {
		method, path string
		code         int
	}{
		{"POST", "/api/v1/write", http.StatusNoContent},
		{"GET", "/api/v1/query?query=1", http.StatusOK},
		{"GET", "/api/v1/status/buildinfo", http.StatusOK},
		{"GET", "/api/v1/openapi.yaml", http.StatusOK},
		{"GET", "/federate?match[]=up", http.StatusOK},
		{"GET", "/federate/x", http.StatusNotFound},
		{"GET", "/api/v1/nope", http.StatusNotFound},
		{"DELETE", "/api/v1/query", http.StatusMethodNotAllowed},
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
		require.Equal(t, c.code, rec.Code, c.path)
	}
}

// TestCORSAsPrometheus wants the CORS headers Prometheus 3.16 answered with
// its default --web.cors.origin and with
// --web.cors.origin='https?://grafana\.local(:\d+)?': an allowed origin is
// echoed (the default allows every one), another gets no
// Access-Control-Allow-Origin, a request without Origin no CORS header.
func TestCORSAsPrometheus(t *testing.T) {
	const grafana = `https?://grafana\.local(:\d+)?`
	cases := []struct {
		pattern, method, path, origin string
		want                          string // Access-Control-Allow-Origin
	}{
		{".*", "GET", "/api/v1/query?query=1", "http://grafana.local:3000", "http://grafana.local:3000"},
		{".*", "OPTIONS", "/api/v1/query", "http://grafana.local:3000", "http://grafana.local:3000"},
		{".*", "GET", "/api/v1/labels", "http://evil.com", "http://evil.com"},
		{".*", "GET", "/api/v1/query?query=1", "", ""},
		{grafana, "GET", "/api/v1/query?query=1", "http://grafana.local:3000", "http://grafana.local:3000"},
		{grafana, "GET", "/api/v1/labels", "https://grafana.local", "https://grafana.local"},
		{grafana, "OPTIONS", "/api/v1/query", "https://grafana.local", "https://grafana.local"},
		{grafana, "GET", "/api/v1/query?query=1", "http://evil.com", ""},
		{grafana, "GET", "/api/v1/labels", "http://grafana.local:3000.evil.com", ""},
		{grafana, "OPTIONS", "/api/v1/query", "http://evil.com", ""},
	}
	servers := map[string]*testServer{}
	for _, c := range cases {
		srv := servers[c.pattern]
		if srv == nil {
			srv = newTestServer(t, func(o *Options, _ *Components) { o.CORSOrigin = c.pattern })
			servers[c.pattern] = srv
		}
		var header http.Header
		if c.origin != "" {
			header = http.Header{"Origin": {c.origin}}
		}
		code, got, _ := srv.do(t, c.method, c.path, nil, header)
		name := c.pattern + " " + c.method + " " + c.path + " from " + c.origin
		require.Less(t, code, 300, name)
		require.Equal(t, c.want, got.Get("Access-Control-Allow-Origin"), name)
		if c.origin == "" {
			require.Empty(t, got.Get("Access-Control-Allow-Methods"), name)
		} else {
			require.Equal(t, "GET, POST, OPTIONS", got.Get("Access-Control-Allow-Methods"), name)
		}
	}
}
