package promql

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gogo/protobuf/proto"
	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/route"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/scrape"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/util/features"
	"github.com/prometheus/prometheus/util/notifications"
	v1 "github.com/prometheus/prometheus/web/api/v1"
	"github.com/stretchr/testify/require"
)

// newUpstreamAPI serves the API as Prometheus' own web/api/v1 handlers do,
// over the same engine settings, storage and limits as NewAPI: the reference
// the handlers of this package are compared with byte for byte.
func newUpstreamAPI(t testing.TB, opts Options, comps Components) http.Handler {
	t.Helper()
	reg := prometheus.NewRegistry()
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "refused"}, []string{"reason"})
	p := newParser(opts, refused)
	fr := features.NewRegistry()
	ng, err := newEngine(opts, p, nil, reg, fr)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ng.Close()) })
	budget, err := newMemoryBudget(opts.MaxMemory, opts.MaxConcurrentQueries, refused, reg)
	require.NoError(t, err)
	cors, err := CompileCORS(opts.CORSOrigin)
	require.NoError(t, err)
	sq, ok := comps.Queryable.(storage.SampleAndChunkQueryable)
	if !ok {
		sq = sampleAndChunkQueryable{comps.Queryable}
	}
	ready := func(f http.HandlerFunc) http.HandlerFunc { return f }
	up := v1.NewAPI(
		&limitedEngine{ng: ng, maxSubquerySteps: opts.MaxSubquerySteps, budget: budget, refused: refused},
		sq, nil, comps.ExemplarQueryable,
		func(context.Context) v1.ScrapePoolsRetriever { return noScrape{} },
		func(context.Context) v1.TargetRetriever { return noScrape{} },
		func(context.Context) v1.AlertmanagerRetriever { return noAlertmanagers{} },
		func() config.Config { return config.DefaultConfig },
		comps.Flags, v1.GlobalURLOptions{Scheme: "http"}, ready,
		adminStats{deleter: comps.Deleter}, "", opts.EnableAdmin, false, 0, slog.New(slog.DiscardHandler),
		func(context.Context) v1.RulesRetriever { return noRules{} },
		opts.RemoteReadSampleLimit, opts.RemoteReadConcurrencyLimit, opts.RemoteReadMaxBytesInFrame,
		false, cors, func() (v1.RuntimeInfo, error) { return v1.RuntimeInfo{}, nil },
		&v1.PrometheusVersion{},
		func() []notifications.Notification { return []notifications.Notification{} },
		func() (<-chan notifications.Notification, func(), bool) { return nil, func() {}, false },
		reg, reg, nil, false, nil, false, false, false, opts.LookbackDelta, false, false,
		budgetErrorCode[v1.OverrideErrorCode](),
		fr, v1.OpenAPIOptions{IncludePaths: openAPIPaths}, p, false, opts.QueryTimeout,
	)
	r := route.New()
	up.Register(r)
	mux := http.NewServeMux()
	mux.Handle(APIPrefix+"/", http.StripPrefix(APIPrefix, r))
	return mux
}

// budgetErrorCode answers a query refused by the memory budget with 503.
// F is v1.OverrideErrorCode, whose first parameter has an unexported type
// that only inference can name.
func budgetErrorCode[F ~func(N, error) (int, bool), N any]() F {
	return func(_ N, err error) (int, bool) {
		return http.StatusServiceUnavailable, errors.Is(err, ErrMemoryBudget)
	}
}

type noScrape struct{}

func (noScrape) ScrapePools() []string                       { return []string{} }
func (noScrape) TargetsActive() map[string][]*scrape.Target  { return map[string][]*scrape.Target{} }
func (noScrape) TargetsDropped() map[string][]*scrape.Target { return map[string][]*scrape.Target{} }
func (noScrape) TargetsDroppedCounts() map[string]int        { return map[string]int{} }
func (noScrape) ScrapePoolConfig(string) (*config.ScrapeConfig, error) {
	return nil, errors.New("scrape pool not found")
}

type noAlertmanagers struct{}

func (noAlertmanagers) Alertmanagers() []*url.URL        { return nil }
func (noAlertmanagers) DroppedAlertmanagers() []*url.URL { return nil }

type noRules struct{}

func (noRules) RuleGroups() []*rules.Group           { return nil }
func (noRules) AlertingRules() []*rules.AlertingRule { return nil }

type adminStats struct{ deleter SeriesDeleter }

func (s adminStats) CleanTombstones() error {
	if c, ok := s.deleter.(TombstoneCleaner); ok {
		return c.CleanTombstones(context.Background())
	}
	return nil
}

func (s adminStats) Delete(ctx context.Context, mint, maxt int64, ms ...*labels.Matcher) error {
	if s.deleter == nil {
		return fmt.Errorf("delete series: %w", errUnsupported)
	}
	return s.deleter.Delete(ctx, mint, maxt, ms...)
}

func (adminStats) Snapshot(string, bool) error                    { return errUnsupported }
func (adminStats) Stats(string, int) (*tsdb.Stats, error)         { return nil, errUnsupported }
func (adminStats) WALReplayStatus() (tsdb.WALReplayStatus, error) { return tsdb.WALReplayStatus{}, nil }
func (adminStats) BlockMetas() ([]tsdb.BlockMeta, error)          { return []tsdb.BlockMeta{}, nil }

// newServerPair serves the fixture through this package's API and through
// the upstream handlers, both built with the same settings.
func newServerPair(t *testing.T, fx *fixture, edit func(*Options, *Components)) (*testServer, *httptest.Server) {
	t.Helper()
	ts := newTestServer(t, edit)
	fx.appendTo(t, ts.db)
	opts, comps := DefaultOptions(), Components{Queryable: ts.db, ExemplarQueryable: ts.db}
	edit(&opts, &comps)
	ref := httptest.NewServer(newUpstreamAPI(t, opts, comps))
	t.Cleanup(ref.Close)
	return ts, ref
}

// timings are the fields of stats that differ from run to run.
var timings = regexp.MustCompile(`"(evalTotalTime|resultSortTime|queryPreparationTime|innerEvalTime|execQueueTime|execTotalTime)":[-0-9.e]+`)

// TestSameAsUpstream sends each request to this package's API and to
// Prometheus' own handlers over the same storage, and wants the same status,
// headers and bytes: success and error shapes of every endpoint the two
// share.
func TestSameAsUpstream(t *testing.T) {
	t.Parallel()
	fx := newFixture(time.Unix(1_700_003_600, 0))
	edit := func(o *Options, c *Components) {
		o.EnableAdmin = true
		o.MaxSamples = 200_000
		c.Flags = map[string]string{"a": "<b>"}
	}
	ts, ref := newServerPair(t, fx, edit)

	at := fx.at(50 * time.Minute)
	window := url.Values{"start": {fx.at(0)}, "end": {fx.at(61 * time.Minute)}}
	for _, c := range sameAsUpstreamCases(fx, at, window) {
		t.Run(c.name, func(t *testing.T) {
			wantCode, wantHdr, want := doRequest(t, ts.client, ref.URL, c.method, c.path, c.form, c.header)
			gotCode, gotHdr, got := ts.do(t, c.method, c.path, c.form, c.header)
			require.Equal(t, wantCode, gotCode, "upstream: %s\nshale: %s", want, got)
			for _, h := range []string{"Content-Type", "Content-Encoding", "Access-Control-Allow-Origin", "Vary", "Allow"} {
				require.Equal(t, wantHdr.Values(h), gotHdr.Values(h), h)
			}
			want, got = decodeBody(t, wantHdr, want), decodeBody(t, gotHdr, got)
			require.Equal(t, timings.ReplaceAllString(want, "T"), timings.ReplaceAllString(got, "T"))
		})
	}
}

// decodeBody is a response's body decompressed as its Content-Encoding
// says: compressed at another level than upstream's, the bytes on the wire
// differ, the body they carry must not.
func decodeBody(t *testing.T, hdr http.Header, body string) string {
	t.Helper()
	if hdr.Get("Content-Encoding") == "" || body == "" {
		return body
	}
	require.Equal(t, "gzip", hdr.Get("Content-Encoding"))
	zr, err := gzip.NewReader(strings.NewReader(body))
	require.NoError(t, err)
	b, err := io.ReadAll(zr)
	require.NoError(t, err)
	return string(b)
}

// TestRemoteReadSameAsUpstream reads through POST /api/v1/read from both
// APIs, samples and streamed chunks, with and without a sample limit.
func TestRemoteReadSameAsUpstream(t *testing.T) {
	t.Parallel()
	fx := newFixture(time.Unix(1_700_003_600, 0))
	for _, limit := range []int{0, 100} {
		edit := func(o *Options, c *Components) {
			o.RemoteReadSampleLimit = limit
			o.RemoteReadMaxBytesInFrame = 256 // several frames per series
			c.Queryable = queryableOnly{c.Queryable}
		}
		ts, ref := newServerPair(t, fx, edit)
		for name, body := range remoteReadBodies(t, fx) {
			t.Run(fmt.Sprintf("limit=%d/%s", limit, name), func(t *testing.T) {
				wantCode, wantHdr, want := postRaw(t, ts.client, ref.URL+"/api/v1/read", body)
				gotCode, gotHdr, got := postRaw(t, ts.client, ts.srv.URL+"/api/v1/read", body)
				require.Equal(t, wantCode, gotCode, got)
				require.Equal(t, wantHdr.Get("Content-Type"), gotHdr.Get("Content-Type"))
				require.Equal(t, wantHdr.Get("Content-Encoding"), gotHdr.Get("Content-Encoding"))
				require.Equal(t, want, got)
			})
		}
	}
}

func remoteReadBodies(t *testing.T, fx *fixture) map[string][]byte {
	t.Helper()
	from, to := fx.start.UnixMilli(), fx.start.Add(fixtureHistory).UnixMilli()
	query := func(ms ...*prompb.LabelMatcher) *prompb.Query {
		return &prompb.Query{StartTimestampMs: from, EndTimestampMs: to, Matchers: ms}
	}
	eq := func(n, v string) *prompb.LabelMatcher {
		return &prompb.LabelMatcher{Type: prompb.LabelMatcher_EQ, Name: n, Value: v}
	}
	re := &prompb.LabelMatcher{Type: prompb.LabelMatcher_RE, Name: "__name__", Value: "http_.*|rpc_.*"}
	enc := func(req *prompb.ReadRequest) []byte {
		raw, err := proto.Marshal(req)
		require.NoError(t, err)
		return snappy.Encode(nil, raw)
	}
	samples := []prompb.ReadRequest_ResponseType{prompb.ReadRequest_SAMPLES}
	chunked := []prompb.ReadRequest_ResponseType{prompb.ReadRequest_STREAMED_XOR_CHUNKS}
	return map[string][]byte{
		"samples":            enc(&prompb.ReadRequest{Queries: []*prompb.Query{query(eq("__name__", "up")), query(re)}, AcceptedResponseTypes: samples}),
		"samples by default": enc(&prompb.ReadRequest{Queries: []*prompb.Query{query(eq("job", "api"))}}),
		"chunks":             enc(&prompb.ReadRequest{Queries: []*prompb.Query{query(re), query(eq("__name__", "up"))}, AcceptedResponseTypes: chunked}),
		"unknown type":       enc(&prompb.ReadRequest{Queries: []*prompb.Query{query(re)}, AcceptedResponseTypes: []prompb.ReadRequest_ResponseType{7}}),
		"bad matcher":        enc(&prompb.ReadRequest{Queries: []*prompb.Query{query(&prompb.LabelMatcher{Type: 9, Name: "a"})}}),
		"bad regexp":         enc(&prompb.ReadRequest{Queries: []*prompb.Query{query(&prompb.LabelMatcher{Type: prompb.LabelMatcher_RE, Name: "a", Value: "("})}}),
		"not snappy":         []byte("garbage"),
		"not protobuf":       snappy.Encode(nil, []byte{0xff, 0xff}),
	}
}

func postRaw(t *testing.T, client *http.Client, url string, body []byte) (int, http.Header, []byte) {
	t.Helper()
	resp, err := client.Post(url, "application/x-protobuf", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, b
}

type diffCase struct {
	name, method, path string
	form               url.Values
	header             http.Header
}

func sameAsUpstreamCases(fx *fixture, at string, window url.Values) []diffCase {
	q := func(kv ...string) url.Values {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Add(kv[i], kv[i+1])
		}
		return v
	}
	with := func(base url.Values, kv ...string) url.Values {
		v := q(kv...)
		for k, vs := range base {
			v[k] = append(v[k], vs...)
		}
		return v
	}
	rng := func(query, step string, kv ...string) url.Values {
		return with(q("query", query, "start", fx.at(10*time.Minute), "end", fx.at(55*time.Minute), "step", step), kv...)
	}
	get := func(name, path string, form url.Values) diffCase {
		if form != nil {
			path += "?" + form.Encode()
		}
		return diffCase{name: name, method: "GET", path: path}
	}
	post := func(name, path string, form url.Values) diffCase {
		return diffCase{name: name, method: "POST", path: path, form: form}
	}
	return []diffCase{
		get("scalar", "/api/v1/query", q("query", "1+1", "time", at)),
		get("string", "/api/v1/query", q("query", `"a<b>&"`, "time", at)),
		get("vector", "/api/v1/query", q("query", "rate(http_requests_total[5m])", "time", at)),
		get("special values", "/api/v1/query", q("query", "special_value", "time", at)),
		get("native histogram", "/api/v1/query", q("query", "rpc_duration_seconds", "time", at)),
		get("native histogram rate", "/api/v1/query", q("query", "rate(rpc_duration_seconds[5m])", "time", at)),
		get("range vector", "/api/v1/query", q("query", "up[2m]", "time", at)),
		get("limit", "/api/v1/query", q("query", "http_requests_total", "time", at, "limit", "2")),
		get("bad limit", "/api/v1/query", q("query", "up", "limit", "-1")),
		get("stats", "/api/v1/query", q("query", "sum(up)", "time", at, "stats", "true")),
		get("stats all", "/api/v1/query", q("query", "sum(up)", "time", at, "stats", "all")),
		get("stats deprecated", "/api/v1/query", q("query", "sum(up)", "time", at, "stats", "yes")),
		get("lookback", "/api/v1/query", q("query", "short_lived", "time", at, "lookback_delta", "1h")),
		get("bad lookback", "/api/v1/query", q("query", "up", "time", at, "lookback_delta", "x")),
		get("bad timeout", "/api/v1/query", q("query", "up", "timeout", "-1s")),
		get("annotations", "/api/v1/query", q("query", "rate(temperature_celsius[5m])", "time", at)),
		get("parse error", "/api/v1/query", q("query", "up{", "time", at)),
		get("type error", "/api/v1/query", q("query", "rate(up)", "time", at)),
		get("missing query", "/api/v1/query", q("time", at)),
		get("bad time", "/api/v1/query", q("query", "up", "time", "yesterday")),
		get("too many samples", "/api/v1/query", q("query", "http_requests_total[1h]", "time", at)),
		get("too deep", "/api/v1/query", q("query", strings.Repeat("(", 300)+"1"+strings.Repeat(")", 300))),
		post("POST instant", "/api/v1/query", q("query", "sum by (job) (up)", "time", at)),
		get("range", "/api/v1/query_range", rng("sum by (job) (rate(http_requests_total[5m]))", "60")),
		post("range POST histograms", "/api/v1/query_range", rng("rate(rpc_duration_seconds[5m])", "600")),
		get("range stale", "/api/v1/query_range", rng("short_lived", "5m")),
		get("range limit", "/api/v1/query_range", rng("http_requests_total", "300", "limit", "1")),
		get("range stats", "/api/v1/query_range", rng("up", "300", "stats", "all")),
		get("range zero step", "/api/v1/query_range", rng("up", "0")),
		get("range bad step", "/api/v1/query_range", rng("up", "x")),
		get("range too many points", "/api/v1/query_range", rng("up", "0.001")),
		get("range bad start", "/api/v1/query_range", q("query", "up", "start", "x", "end", at, "step", "60")),
		get("range end before start", "/api/v1/query_range", q("query", "up", "start", at, "end", fx.at(0), "step", "60")),
		get("exemplars", "/api/v1/query_exemplars", with(window, "query", "up")),
		get("exemplars no selector", "/api/v1/query_exemplars", with(window, "query", "1")),
		get("exemplars bad query", "/api/v1/query_exemplars", with(window, "query", "up{")),
		get("exemplars reversed", "/api/v1/query_exemplars", q("query", "up", "start", at, "end", fx.at(0))),
		get("format_query", "/api/v1/format_query", q("query", "sum(rate(x[5m]))by(job)")),
		get("format_query error", "/api/v1/format_query", q("query", "sum(")),
		post("parse_query", "/api/v1/parse_query", q("query", `sum by (job) (rate(x{a=~"b"}[5m] offset 1m)) / on(job) group_left y @ 100`)),
		get("parse_query error", "/api/v1/parse_query", q("query", ")")),
		get("series", "/api/v1/series", with(window, "match[]", `http_requests_total{job="api"}`)),
		post("series two matchers", "/api/v1/series", with(window, "match[]", "up", "match[]", `{__name__=~"request_.*",job="web"}`)),
		get("series limit", "/api/v1/series", with(window, "match[]", "http_requests_total", "limit", "3")),
		get("series without match", "/api/v1/series", window),
		get("series empty matcher", "/api/v1/series", with(window, "match[]", `{a=""}`)),
		get("series bad match", "/api/v1/series", with(window, "match[]", "up{")),
		get("series bad start", "/api/v1/series", q("match[]", "up", "start", "x")),
		get("labels", "/api/v1/labels", window),
		get("labels no range", "/api/v1/labels", nil),
		post("labels match", "/api/v1/labels", with(window, "match[]", "special_value")),
		get("labels two matchers", "/api/v1/labels", with(window, "match[]", "up", "match[]", "rpc_duration_seconds")),
		get("labels limit", "/api/v1/labels", with(window, "limit", "2")),
		get("labels bad match", "/api/v1/labels", with(window, "match[]", "{")),
		get("label values", "/api/v1/label/job/values", window),
		get("label values name", "/api/v1/label/__name__/values", with(window, "limit", "3")),
		get("label values match", "/api/v1/label/instance/values", with(window, "match[]", `up{job="web"}`, "match[]", "special_value")),
		get("label values unknown", "/api/v1/label/nope/values", window),
		get("label values escaped", "/api/v1/label/U__j_6f_b/values", window),
		get("label values invalid", "/api/v1/label/U__%ff/values", window),
		get("label values bad end", "/api/v1/label/job/values", q("end", "x")),
		get("targets", "/api/v1/targets", nil),
		get("targets active", "/api/v1/targets", q("state", "active")),
		get("targets dropped", "/api/v1/targets", q("state", "Dropped")),
		get("targets metadata", "/api/v1/targets/metadata", nil),
		get("targets metadata bad limit", "/api/v1/targets/metadata", q("limit", "x")),
		get("targets metadata bad match", "/api/v1/targets/metadata", q("match_target", "{")),
		get("scrape pools", "/api/v1/scrape_pools", nil),
		get("scrape pool config", "/api/v1/scrape_pools/config", q("scrapePool", "x")),
		get("scrape pool config missing", "/api/v1/scrape_pools/config", nil),
		get("relabel steps", "/api/v1/targets/relabel_steps", q("scrapePool", "x", "labels", `{"a":"b"}`)),
		get("relabel steps no pool", "/api/v1/targets/relabel_steps", q("labels", `{"a":"b"}`)),
		get("relabel steps no labels", "/api/v1/targets/relabel_steps", q("scrapePool", "x")),
		get("relabel steps bad labels", "/api/v1/targets/relabel_steps", q("scrapePool", "x", "labels", "{")),
		get("search", "/api/v1/search/metric_names", nil),
		post("search POST", "/api/v1/search/label_values", q("label", "job")),
		get("notifications live", "/api/v1/notifications/live", nil),
		get("rules", "/api/v1/rules", nil),
		get("rules type", "/api/v1/rules", q("type", "ALERT", "exclude_alerts", "true", "match[]", "up")),
		get("rules bad type", "/api/v1/rules", q("type", "x")),
		get("rules bad match", "/api/v1/rules", q("match[]", "{")),
		get("rules bad exclude", "/api/v1/rules", q("exclude_alerts", "x")),
		get("rules token without limit", "/api/v1/rules", q("group_next_token", "x")),
		get("rules bad limit", "/api/v1/rules", q("group_limit", "0")),
		get("rules unknown token", "/api/v1/rules", q("group_limit", "1", "group_next_token", "x")),
		get("alerts", "/api/v1/alerts", nil),
		get("alertmanagers", "/api/v1/alertmanagers", nil),
		get("flags", "/api/v1/status/flags", nil),
		get("walreplay", "/api/v1/status/walreplay", nil),
		get("tsdb blocks", "/api/v1/status/tsdb/blocks", nil),
		get("features", "/api/v1/features", nil),
		get("self metrics", "/api/v1/status/self_metrics", q("metric_name_pattern", "prometheus_engine_queries_concurrent_max|shale_promql_queries_(waiting|active)")),
		get("self metrics bad pattern", "/api/v1/status/self_metrics", q("metric_name_pattern", "(")),
		get("notifications", "/api/v1/notifications", nil),
		post("delete series", "/api/v1/admin/tsdb/delete_series", with(window, "match[]", "nothing_here")),
		post("delete series no match", "/api/v1/admin/tsdb/delete_series", nil),
		{name: "delete series bad match", method: "PUT", path: "/api/v1/admin/tsdb/delete_series?match[]={"},
		post("delete series bad start", "/api/v1/admin/tsdb/delete_series", q("match[]", "up", "start", "x")),
		post("clean tombstones", "/api/v1/admin/tsdb/clean_tombstones", nil),
		post("remote write not mounted", "/api/v1/write", nil),
		post("otlp not mounted", "/api/v1/otlp/v1/metrics", nil),
		get("openapi", "/api/v1/openapi.yaml", nil),
		get("unknown path", "/api/v1/nope", nil),
		{name: "method not allowed", method: "DELETE", path: "/api/v1/query"},
		{name: "preflight", method: "OPTIONS", path: "/api/v1/query", header: http.Header{"Origin": {"http://grafana"}}},
		{name: "cors", method: "GET", path: "/api/v1/query?query=1&time=1", header: http.Header{"Origin": {"http://grafana"}}},
		{name: "gzip", method: "GET", path: "/api/v1/query?query=up&time=" + at, header: http.Header{"Accept-Encoding": {"gzip"}}},
	}
}
