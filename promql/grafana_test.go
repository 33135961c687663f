package promql

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"
)

// grafanaRequest is one HTTP request as Grafana 10 and 11 send it to a
// Prometheus data source, with what the answer must look like.
type grafanaRequest struct {
	name   string
	method string
	path   string // with the query string of a GET
	body   string // form body of a POST
	// resultType is the data.resultType of a query answer; "" for other answers.
	resultType string
	warnings   []string
	check      func(t *testing.T, data json.RawMessage)
}

// TestGrafanaRequests replays the requests Grafana's Prometheus data source
// makes: save & test, panels, variable and metric pickers, metadata,
// exemplars and build info.
func TestGrafanaRequests(t *testing.T) {
	t.Parallel()
	ts := newShaleServer(t, nil)
	fx := newFixture(time.Now())
	fx.appendTo(t, ts.db)

	exTime := fx.start.Add(30*time.Minute + fixtureOffset)
	app := ts.db.Appender(context.Background())
	_, err := app.AppendExemplar(0, labels.FromStrings("__name__", "request_duration_seconds_bucket", "job", "api", "le", "0.5"), exemplar.Exemplar{
		Labels: labels.FromStrings("trace_id", "4bf92f3577b34da6"), Value: 0.42, Ts: exTime.UnixMilli(), HasTs: true,
	})
	require.NoError(t, err)
	require.NoError(t, app.Commit())

	start, end := fx.at(0), fx.at(time.Hour)
	now := strconv.FormatInt(fx.start.Add(time.Hour).Unix(), 10)
	form := func(kv ...string) string {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Add(kv[i], kv[i+1])
		}
		return v.Encode()
	}
	stringList := func(want ...string) func(*testing.T, json.RawMessage) {
		return func(t *testing.T, data json.RawMessage) {
			var got []string
			require.NoError(t, json.Unmarshal(data, &got))
			for _, w := range want {
				require.Contains(t, got, w)
			}
		}
	}

	reqs := []grafanaRequest{
		{name: "save and test (backend health check)", method: http.MethodPost, path: "/api/v1/query",
			body: form("query", "1+1", "time", now), resultType: "scalar",
			check: func(t *testing.T, data json.RawMessage) {
				require.JSONEq(t, `{"resultType":"scalar","result":[`+now+`,"2"]}`, string(data))
			}},
		{name: "save and test (GET)", method: http.MethodGet, path: "/api/v1/query?query=1%2B1&time=" + now, resultType: "scalar"},
		{name: "build info", method: http.MethodGet, path: "/api/v1/status/buildinfo",
			check: func(t *testing.T, data json.RawMessage) {
				var bi map[string]string
				require.NoError(t, json.Unmarshal(data, &bi))
				require.Regexp(t, `^[0-9]+\.[0-9]+\.[0-9]+`, bi["version"])
				for _, k := range []string{"revision", "branch", "buildUser", "buildDate", "goVersion"} {
					require.Contains(t, bi, k)
				}
			}},
		{name: "panel range query", method: http.MethodPost, path: "/api/v1/query_range",
			body:       form("query", `sum by (job) (rate(http_requests_total{job=~"api|web"}[1m0s]))`, "start", start, "end", end, "step", "15"),
			resultType: "matrix",
			check: func(t *testing.T, data json.RawMessage) {
				var d struct {
					Result []struct {
						Metric map[string]string `json:"metric"`
						Values [][2]any          `json:"values"`
					} `json:"result"`
				}
				require.NoError(t, json.Unmarshal(data, &d))
				require.Len(t, d.Result, 2)
				for _, s := range d.Result {
					require.NotEmpty(t, s.Values)
					_, isNum := s.Values[0][0].(float64)
					_, isStr := s.Values[0][1].(string)
					require.True(t, isNum && isStr, "sample pair [number, string]: %v", s.Values[0])
				}
			}},
		{name: "panel range query with timeout", method: http.MethodPost, path: "/api/v1/query_range",
			body:       form("query", "histogram_quantile(0.95, sum by (le) (rate(request_duration_seconds_bucket[5m])))", "start", start, "end", end, "step", "60", "timeout", "30s"),
			resultType: "matrix"},
		{name: "panel native histogram heatmap", method: http.MethodPost, path: "/api/v1/query_range",
			body:       form("query", "sum(rate(rpc_duration_seconds[5m]))", "start", start, "end", end, "step", "300"),
			resultType: "matrix",
			check: func(t *testing.T, data json.RawMessage) {
				require.Contains(t, string(data), `"histograms":[[`)
				require.Contains(t, string(data), `"buckets":[[`)
			}},
		{name: "instant query (table panel)", method: http.MethodPost, path: "/api/v1/query",
			body: form("query", "topk(5, temperature_celsius)", "time", fx.at(50*time.Minute)), resultType: "vector"},
		{name: "exemplars", method: http.MethodPost, path: "/api/v1/query_exemplars",
			body: form("query", `histogram_quantile(0.95, sum by (le) (rate(request_duration_seconds_bucket{job="api"}[5m])))`, "start", start, "end", end),
			check: func(t *testing.T, data json.RawMessage) {
				var d []struct {
					SeriesLabels map[string]string `json:"seriesLabels"`
					Exemplars    []struct {
						Labels    map[string]string `json:"labels"`
						Value     string            `json:"value"`
						Timestamp float64           `json:"timestamp"`
					} `json:"exemplars"`
				}
				require.NoError(t, json.Unmarshal(data, &d))
				require.Len(t, d, 1)
				require.Equal(t, "0.5", d[0].SeriesLabels["le"])
				require.Len(t, d[0].Exemplars, 1)
				require.Equal(t, "4bf92f3577b34da6", d[0].Exemplars[0].Labels["trace_id"])
				require.Equal(t, "0.42", d[0].Exemplars[0].Value)
				require.InDelta(t, float64(exTime.UnixMilli())/1000, d[0].Exemplars[0].Timestamp, 1e-6)
			}},
		{name: "metric names (metrics browser)", method: http.MethodGet, path: "/api/v1/label/__name__/values?" + form("start", start, "end", end),
			check: stringList("http_requests_total", "up", "rpc_duration_seconds")},
		{name: "metric names with match and limit (Grafana 11)", method: http.MethodGet,
			path:  "/api/v1/label/__name__/values?" + form("match[]", `{job="api"}`, "start", start, "end", end, "limit", "40000"),
			check: stringList("http_requests_total", "request_duration_seconds_bucket")},
		{name: "label names", method: http.MethodPost, path: "/api/v1/labels", body: form("start", start, "end", end),
			check: stringList("__name__", "job", "instance", "method", "le")},
		{name: "label names for a metric", method: http.MethodGet,
			path:  "/api/v1/labels?" + form("match[]", "http_requests_total", "start", start, "end", end),
			check: stringList("__name__", "job", "instance", "method")},
		{name: "label values for a variable", method: http.MethodGet,
			path:  "/api/v1/label/job/values?" + form("match[]", `up{instance="a:9090"}`, "start", start, "end", end),
			check: stringList("api", "web")},
		{name: "label values limited", method: http.MethodGet,
			path:     "/api/v1/label/job/values?" + form("start", start, "end", end, "limit", "1"),
			warnings: []string{"results truncated due to limit"},
			check: func(t *testing.T, data json.RawMessage) {
				require.JSONEq(t, `["api"]`, string(data))
			}},
		{name: "series for label_values(metric, label)", method: http.MethodPost, path: "/api/v1/series",
			body: form("match[]", `http_requests_total{job="web"}`, "start", start, "end", end),
			check: func(t *testing.T, data json.RawMessage) {
				var d []map[string]string
				require.NoError(t, json.Unmarshal(data, &d))
				require.Len(t, d, 4)
				for _, s := range d {
					require.Equal(t, "web", s["job"])
				}
			}},
		{name: "series with limit", method: http.MethodGet,
			path:     "/api/v1/series?" + form("match[]", "up", "start", start, "end", end, "limit", "2"),
			warnings: []string{"results truncated due to limit"},
			check: func(t *testing.T, data json.RawMessage) {
				var d []map[string]string
				require.NoError(t, json.Unmarshal(data, &d))
				require.Len(t, d, 2)
			}},
		{name: "metadata", method: http.MethodGet, path: "/api/v1/metadata",
			check: func(t *testing.T, data json.RawMessage) { require.JSONEq(t, `{}`, string(data)) }},
		{name: "metadata for one metric", method: http.MethodGet, path: "/api/v1/metadata?metric=up&limit=1",
			check: func(t *testing.T, data json.RawMessage) { require.JSONEq(t, `{}`, string(data)) }},
	}

	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	t.Cleanup(client.CloseIdleConnections)
	for _, r := range reqs {
		t.Run(r.name, func(t *testing.T) {
			var body io.Reader
			if r.body != "" {
				body = strings.NewReader(r.body)
			}
			req, err := http.NewRequest(r.method, ts.srv.URL+r.path, body)
			require.NoError(t, err)
			if r.body != "" {
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			req.Header.Set("Accept", "application/json, text/plain, */*")
			req.Header.Set("Accept-Encoding", "gzip")
			req.Header.Set("User-Agent", "Grafana/11.3.0")
			req.Header.Set("X-Grafana-Org-Id", "1")
			req.Header.Set("X-Dashboard-Uid", "fdx0q6n")
			req.Header.Set("X-Panel-Id", "2")
			req.Header.Set("X-Datasource-Uid", "P1809F7CD0C75ACF3")
			req.Header.Set("Origin", "http://grafana.local:3000")
			resp, err := client.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()

			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			require.Equal(t, "http://grafana.local:3000", resp.Header.Get("Access-Control-Allow-Origin"), "the origin echoed, as Prometheus 3 does")
			var rd io.Reader = resp.Body
			if resp.Header.Get("Content-Encoding") == "gzip" {
				zr, err := gzip.NewReader(resp.Body)
				require.NoError(t, err)
				rd = zr
			}
			raw, err := io.ReadAll(rd)
			require.NoError(t, err)

			var env struct {
				Status   string          `json:"status"`
				Data     json.RawMessage `json:"data"`
				Warnings []string        `json:"warnings"`
				Infos    []string        `json:"infos"`
			}
			require.NoError(t, json.Unmarshal(raw, &env), string(raw))
			require.Equal(t, "success", env.Status, string(raw))
			require.Equal(t, r.warnings, env.Warnings)
			require.Empty(t, env.Infos)
			if r.resultType != "" {
				var d struct {
					ResultType string          `json:"resultType"`
					Result     json.RawMessage `json:"result"`
				}
				require.NoError(t, json.Unmarshal(env.Data, &d))
				require.Equal(t, r.resultType, d.ResultType)
				require.NotEqual(t, "null", string(d.Result))
			}
			if r.check != nil {
				r.check(t, env.Data)
			}
		})
	}
}
