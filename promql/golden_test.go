package promql

import (
	"encoding/json"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// goldenCase is one request sent to both servers.
type goldenCase struct {
	name   string
	method string
	path   string
	form   url.Values // query string for GET, form body for POST
	// errorOnly compares status code and errorType but not the message,
	// whose wording differs between Prometheus releases.
	errorOnly bool
	// normalize removes fields that differ by design (see docs/http-api.md).
	normalize func(map[string]any)
	// shapeOnly names the change in the upstream engine since Prometheus 2.42
	// that makes the values differ; labels, types and timestamps still must
	// be equal.
	shapeOnly string
}

// TestGoldenAgainstPrometheus writes the same data to Debian's prometheus
// (by remote write) and to the API's storage (by appender) and checks that
// both answer the same requests with the same JSON.
func TestGoldenAgainstPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an external prometheus")
	}
	t.Parallel()
	promURL := startPrometheus(t)
	ts := newShaleServer(t, nil)

	fx := newFixture(time.Now())
	fx.appendTo(t, ts.db)
	client := &http.Client{}
	t.Cleanup(client.CloseIdleConnections)
	remoteWrite(t, client, promURL+"/api/v1/write", fx.writeRequest(t))

	at := fx.at(50 * time.Minute)
	rangeForm := func(q, step string) url.Values {
		return url.Values{"query": {q}, "start": {fx.at(10 * time.Minute)}, "end": {fx.at(55 * time.Minute)}, "step": {step}}
	}
	instant := func(q string) url.Values { return url.Values{"query": {q}, "time": {at}} }
	window := url.Values{"start": {fx.at(0)}, "end": {fx.at(61 * time.Minute)}}
	with := func(v url.Values, kv ...string) url.Values {
		out := url.Values{}
		for k, vs := range v {
			out[k] = append([]string(nil), vs...)
		}
		for i := 0; i < len(kv); i += 2 {
			out.Add(kv[i], kv[i+1])
		}
		return out
	}
	// Prometheus 3 counts memoryInBytesByLabelName over all series rather
	// than over distinct values, and the order of equal counts is open.
	tsdbStatus := func(m map[string]any) {
		d, _ := m["data"].(map[string]any)
		if h, ok := d["headStats"].(map[string]any); ok {
			delete(h, "chunkCount")
		}
		delete(d, "memoryInBytesByLabelName")
		for _, list := range d {
			l, ok := list.([]any)
			if !ok {
				continue
			}
			sort.SliceStable(l, func(i, j int) bool {
				x, y := l[i].(map[string]any), l[j].(map[string]any)
				if x["value"] != y["value"] {
					return x["value"].(float64) > y["value"].(float64)
				}
				return x["name"].(string) < y["name"].(string)
			})
		}
	}

	cases := []goldenCase{
		{name: "scalar", path: "/api/v1/query", form: instant("1+1")},
		{name: "string", path: "/api/v1/query", form: instant(`"hello"`)},
		{name: "vector literal", path: "/api/v1/query", form: instant("vector(time())")},
		{name: "selector", path: "/api/v1/query", form: instant("up")},
		{name: "rate", path: "/api/v1/query", form: instant("rate(http_requests_total[5m])")},
		{name: "sum by rate", path: "/api/v1/query", form: instant("sum by (job) (rate(http_requests_total[5m]))")},
		{name: "irate reset", path: "/api/v1/query", form: instant(`irate(http_requests_total{job="web",instance="b:9090",method="POST"}[2m])`)},
		{name: "histogram_quantile classic", path: "/api/v1/query", form: instant("histogram_quantile(0.9, sum by (job, le) (rate(request_duration_seconds_bucket[5m])))")},
		{name: "topk", path: "/api/v1/query", form: instant("topk(3, temperature_celsius)")},
		{name: "count by", path: "/api/v1/query", form: instant("count by (job) (up)")},
		{name: "avg_over_time", path: "/api/v1/query", form: instant("avg_over_time(temperature_celsius[10m])")},
		{name: "special values", path: "/api/v1/query", form: instant("special_value")},
		{name: "division by zero", path: "/api/v1/query", form: instant("up / 0")},
		{name: "stale series", path: "/api/v1/query", form: instant("short_lived")},
		{name: "range vector", path: "/api/v1/query", form: instant("up[1m]")},
		{name: "native histogram", path: "/api/v1/query", form: instant("rpc_duration_seconds")},
		{name: "native histogram rate", path: "/api/v1/query", form: instant("rate(rpc_duration_seconds[5m])")},
		{name: "native histogram quantile", path: "/api/v1/query", form: instant("histogram_quantile(0.5, rate(rpc_duration_seconds[5m]))"),
			shapeOnly: "Prometheus 3 interpolates exponentially within native histogram buckets"},
		{name: "native histogram count", path: "/api/v1/query", form: instant("histogram_count(rate(rpc_duration_seconds[5m]))")},
		{name: "POST instant", method: http.MethodPost, path: "/api/v1/query", form: instant("sum(up)")},
		{name: "range rate", path: "/api/v1/query_range", form: rangeForm("sum by (job) (rate(http_requests_total[5m]))", "60")},
		{name: "range gauge 15s", path: "/api/v1/query_range", form: rangeForm("temperature_celsius", "15s")},
		{name: "range stale", path: "/api/v1/query_range", form: rangeForm("short_lived", "5m")},
		{name: "range histogram_quantile", method: http.MethodPost, path: "/api/v1/query_range", form: rangeForm("histogram_quantile(0.99, sum by (le) (rate(request_duration_seconds_bucket[5m])))", "300")},
		{name: "range native histogram", path: "/api/v1/query_range", form: rangeForm("rate(rpc_duration_seconds[5m])", "600")},
		{name: "series", path: "/api/v1/series", form: with(window, "match[]", `http_requests_total{job="api"}`)},
		{name: "series two matchers", method: http.MethodPost, path: "/api/v1/series", form: with(window, "match[]", "up", "match[]", `{__name__=~"request_.*",job="web"}`)},
		{name: "labels", path: "/api/v1/labels", form: window},
		{name: "labels match", path: "/api/v1/labels", form: with(window, "match[]", "special_value")},
		{name: "label values name", path: "/api/v1/label/__name__/values", form: window},
		{name: "label values job", path: "/api/v1/label/job/values", form: window},
		{name: "label values match", path: "/api/v1/label/instance/values", form: with(window, "match[]", `up{job="web"}`)},
		{name: "label values unknown", path: "/api/v1/label/nope/values", form: window},
		{name: "metadata", path: "/api/v1/metadata"},
		{name: "tsdb status", path: "/api/v1/status/tsdb", normalize: tsdbStatus},
		{name: "targets", path: "/api/v1/targets", normalize: func(m map[string]any) {
			// droppedTargetCounts arrived after Prometheus 2.42.
			delete(m["data"].(map[string]any), "droppedTargetCounts")
		}},
		{name: "rules", path: "/api/v1/rules"},
		{name: "alerts", path: "/api/v1/alerts"},
		{name: "alertmanagers", path: "/api/v1/alertmanagers"},
		{name: "exemplars", path: "/api/v1/query_exemplars", form: with(window, "query", "up")},
		{name: "format_query", path: "/api/v1/format_query", form: url.Values{"query": {"sum(rate(http_requests_total[5m]))by(job)"}}},
		{name: "parse error", path: "/api/v1/query", form: instant("up{"), errorOnly: true},
		{name: "type error", path: "/api/v1/query", form: instant("rate(up)"), errorOnly: true},
		{name: "missing query", path: "/api/v1/query", form: url.Values{}, errorOnly: true},
		{name: "bad time", path: "/api/v1/query", form: url.Values{"query": {"up"}, "time": {"yesterday"}}, errorOnly: true},
		{name: "range zero step", path: "/api/v1/query_range", form: rangeForm("up", "0"), errorOnly: true},
		{name: "range too many points", path: "/api/v1/query_range", form: rangeForm("up", "0.001"), errorOnly: true},
		{name: "range end before start", path: "/api/v1/query_range", form: url.Values{"query": {"up"}, "start": {at}, "end": {fx.at(0)}, "step": {"60"}}, errorOnly: true},
		{name: "series without match", path: "/api/v1/series", form: window, errorOnly: true},
		{name: "series bad match", path: "/api/v1/series", form: with(window, "match[]", "up{"), errorOnly: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method := c.method
			if method == "" {
				method = http.MethodGet
			}
			path, form := c.path, c.form
			if method == http.MethodGet && len(form) > 0 {
				path += "?" + form.Encode()
				form = nil
			}
			wantCode, wantHdr, want := doRequest(t, client, promURL, method, path, form, nil)
			gotCode, gotHdr, got := ts.do(t, method, path, form, nil)
			require.Equal(t, wantCode, gotCode, "status code; prometheus: %s\nshale: %s", want, got)
			require.Equal(t, wantHdr.Get("Content-Type"), gotHdr.Get("Content-Type"))
			if c.errorOnly {
				var w, g struct{ Status, ErrorType string }
				require.NoError(t, json.Unmarshal([]byte(want), &w), want)
				require.NoError(t, json.Unmarshal([]byte(got), &g), got)
				require.Equal(t, w, g, "prometheus: %s\nshale: %s", want, got)
				return
			}
			if want == got {
				return
			}
			// Not byte-equal: compare as values, where instant vectors are
			// unordered and floats may differ in the last bits.
			if c.normalize != nil {
				want, got = normalizeJSON(t, want, c.normalize), normalizeJSON(t, got, c.normalize)
			}
			var w, g any
			require.NoError(t, json.Unmarshal([]byte(want), &w), want)
			require.NoError(t, json.Unmarshal([]byte(got), &g), got)
			sortVectorResult(w)
			sortVectorResult(g)
			if c.shapeOnly != "" {
				t.Logf("values not compared: %s", c.shapeOnly)
				blankValues(w)
				blankValues(g)
			}
			if !jsonAlmostEqual(w, g) {
				require.Equal(t, want, got)
			}
			t.Logf("equal as values, not as bytes")
		})
	}
}

// sortVectorResult orders an instant vector by its labels. PromQL leaves the
// order of an unsorted instant vector open; Prometheus 2.42 returned series in
// label order, the current engine returns them in storage order.
func sortVectorResult(body any) {
	data, _ := body.(map[string]any)["data"].(map[string]any)
	if data == nil || data["resultType"] != "vector" {
		return
	}
	res, _ := data["result"].([]any)
	key := func(x any) string {
		b, _ := json.Marshal(x.(map[string]any)["metric"])
		return string(b)
	}
	sort.SliceStable(res, func(i, j int) bool { return key(res[i]) < key(res[j]) })
}

// blankValues replaces every sample value string with "", keeping timestamps.
func blankValues(x any) {
	switch v := x.(type) {
	case map[string]any:
		for k, e := range v {
			if (k == "value" || k == "histogram") && isSamplePair(e) {
				e.([]any)[1] = ""
				continue
			}
			blankValues(e)
		}
	case []any:
		for _, e := range v {
			if isSamplePair(e) {
				e.([]any)[1] = ""
				continue
			}
			blankValues(e)
		}
	}
}

func isSamplePair(x any) bool {
	p, ok := x.([]any)
	if !ok || len(p) != 2 {
		return false
	}
	_, ok = p[0].(float64)
	return ok
}

// jsonAlmostEqual compares decoded JSON, taking strings that parse as floats
// as equal within a relative 1e-12: Prometheus 3 sums with Kahan compensation.
func jsonAlmostEqual(a, b any) bool {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for k, e := range av {
			if !jsonAlmostEqual(e, bv[k]) {
				return false
			}
		}
		return true
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for i := range av {
			if !jsonAlmostEqual(av[i], bv[i]) {
				return false
			}
		}
		return true
	case string:
		bs, ok := b.(string)
		if !ok {
			return false
		}
		if av == bs {
			return true
		}
		x, err1 := strconv.ParseFloat(av, 64)
		y, err2 := strconv.ParseFloat(bs, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		return math.Abs(x-y) <= 1e-12*math.Max(math.Abs(x), math.Abs(y))
	default:
		return a == b
	}
}

// normalizeJSON applies f to the decoded body and encodes it again.
func normalizeJSON(t testing.TB, body string, f func(map[string]any)) string {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &m), body)
	f(m)
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return string(b)
}
