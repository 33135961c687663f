package promql

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/teststorage"
	"github.com/stretchr/testify/require"
)

// apiAnswer is the envelope of an API answer.
type apiAnswer struct {
	Status    string          `json:"status"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Data      json.RawMessage `json:"data"`
}

func decodeAnswer(t testing.TB, body string) apiAnswer {
	t.Helper()
	var a apiAnswer
	require.NoError(t, json.Unmarshal([]byte(body), &a), body)
	return a
}

// queryRequest is one way a user sends a query.
type queryRequest struct {
	name, method, path string
	form               url.Values // POST body; nil for GET
}

// queryRequests returns the four ways to send q: GET and POST, instant and
// range, with the other parameters in params and rangeParams.
func queryRequests(q string, params, rangeParams url.Values) []queryRequest {
	var out []queryRequest
	for _, endpoint := range []struct {
		path   string
		params url.Values
	}{{"/api/v1/query", params}, {"/api/v1/query_range", rangeParams}} {
		form := url.Values{"query": {q}}
		for k, v := range endpoint.params {
			form[k] = v
		}
		out = append(out,
			queryRequest{"GET " + endpoint.path, "GET", endpoint.path + "?" + form.Encode(), nil},
			queryRequest{"POST " + endpoint.path, "POST", endpoint.path, form})
	}
	return out
}

// fixtureAt is where appendSeries writes its ten samples, 15 s apart.
const fixtureAt = 1_700_000_000

var (
	instantParams = url.Values{"time": {fmt.Sprint(fixtureAt + 140)}}
	rangeParams   = url.Values{"start": {fmt.Sprint(fixtureAt)}, "end": {fmt.Sprint(fixtureAt + 140)}, "step": {"15"}}
)

// requireServes checks that the server still answers a query.
func requireServes(t *testing.T, ts *testServer) {
	t.Helper()
	code, _, body := ts.do(t, "GET", "/api/v1/query?query=up&time="+fmt.Sprint(fixtureAt+140), nil, nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"value":[1700000140,"9"]`)
}

// TestQueryRefusals sends queries beyond each limit as users do, and checks
// the answer and that the server serves on.
func TestQueryRefusals(t *testing.T) {
	t.Parallel()
	db := teststorage.New(t)
	appendSeries(t, &testServer{db: db}, time.Unix(fixtureAt, 0), "__name__", "up", "job", "api")
	ts := newTestServerOn(t, db, nil)
	small := newTestServerOn(t, db, func(o *Options, _ *Components) { o.MaxSamples = 100 })
	// Room for the one series of up at an instant, and little more.
	tiny := newTestServerOn(t, db, func(o *Options, _ *Components) { o.MaxMemory = 500 })

	opts := DefaultOptions()
	long := `up{job="` + strings.Repeat("a", opts.MaxQueryLength) + `"}`
	cases := []struct {
		name    string
		ts      *testServer
		query   string
		code    int
		errType string
		err     string
		reason  string // of shale_promql_queries_refused_total; "" for none
	}{
		{"too long", ts, long, 400, "bad_data",
			fmt.Sprintf(`invalid parameter "query": query too long: %d bytes, more than the limit of %d (--query.max-length)`, len(long), opts.MaxQueryLength), refusedTooLong},
		// Sent by POST only: as a GET its URL is beyond Go's 1 MiB header
		// limit, and the HTTP server answers 431 itself.
		{"1M nested parentheses", ts, strings.Repeat("(", 1_000_000) + "up" + strings.Repeat(")", 1_000_000),
			400, "bad_data", "query too long", refusedTooLong},
		{"nested parentheses", ts, strings.Repeat("(", opts.MaxQueryDepth+1) + "up" + strings.Repeat(")", opts.MaxQueryDepth+1),
			400, "bad_data", `invalid parameter "query": query nested too deeply: more than 256 levels of parentheses, brackets, braces and operators (--query.max-depth)`, refusedTooDeep},
		{"unary minus signs", ts, strings.Repeat("-", opts.MaxQueryDepth+1) + "up",
			400, "bad_data", "query nested too deeply", refusedTooDeep},
		{"chain of or", ts, "up" + strings.Repeat(" or up", opts.MaxQueryDepth+1),
			400, "bad_data", "query nested too deeply", refusedTooDeep},
		{"subquery steps", ts, `sum_over_time(up[30d:1ms])`,
			400, "bad_data", `invalid parameter "query": too many subquery steps: the subqueries would be evaluated at`, refusedSubquerySteps},
		{"within the limits", ts, strings.Repeat("(", opts.MaxQueryDepth-3) + `sum_over_time(up[5m:15s])` + strings.Repeat(")", opts.MaxQueryDepth-3),
			200, "", "", ""},
		// The engine's max-samples limit counts the points of subqueries.
		{"max samples in a subquery", small, `max_over_time(up[1h:1s])`,
			422, "execution", "query processing would load too many samples into memory in query execution", ""},
		// Alone beyond the whole budget: it can never run (the budget
		// answers 503 to a query that may run once fewer do, see
		// TestMemoryBudgetConcurrent).
		{"memory budget", tiny, `max_over_time(up[10m:1s])`,
			422, "execution", "query too large for the query memory budget: the query alone needs at least", refusedMemory},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var before float64
			if c.reason != "" {
				before = testutil.ToFloat64(c.ts.api.refused.WithLabelValues(c.reason))
			}
			var reqs []queryRequest
			for _, r := range queryRequests(c.query, instantParams, rangeParams) {
				if r.method == "POST" || len(r.path) < 1<<20 {
					reqs = append(reqs, r)
				}
			}
			for _, r := range reqs {
				code, _, body := c.ts.do(t, r.method, r.path, r.form, nil)
				require.Equal(t, c.code, code, "%s: %.300s", r.name, body)
				a := decodeAnswer(t, body)
				if c.code == http.StatusOK {
					require.Equal(t, "success", a.Status, r.name)
				} else {
					require.Equal(t, "error", a.Status, r.name)
					require.Equal(t, c.errType, a.ErrorType, r.name)
					require.Contains(t, a.Error, c.err, r.name)
				}
				requireServes(t, c.ts)
			}
			if c.reason != "" {
				after := testutil.ToFloat64(c.ts.api.refused.WithLabelValues(c.reason))
				require.Equal(t, float64(len(reqs)), after-before)
			}
		})
	}

	t.Run("other endpoints that parse", func(t *testing.T) {
		deep := strings.Repeat("(", opts.MaxQueryDepth+1) + "up" + strings.Repeat(")", opts.MaxQueryDepth+1)
		long := `{job="` + strings.Repeat("a", opts.MaxQueryLength) + `"}`
		for _, r := range []queryRequest{
			{"format_query", "POST", "/api/v1/format_query", url.Values{"query": {deep}}},
			{"parse_query", "POST", "/api/v1/parse_query", url.Values{"query": {deep}}},
			{"series", "POST", "/api/v1/series", url.Values{"match[]": {long}}},
			{"labels", "POST", "/api/v1/labels", url.Values{"match[]": {long}}},
		} {
			code, _, body := ts.do(t, r.method, r.path, r.form, nil)
			require.Equal(t, http.StatusBadRequest, code, "%s: %.300s", r.name, body)
			require.Equal(t, "bad_data", decodeAnswer(t, body).ErrorType, r.name)
		}
		requireServes(t, ts)
	})
}

// notifySelect returns db sending on selects (without waiting) at every
// Select.
func notifySelect(db storage.Queryable, selects chan<- struct{}) storage.Queryable {
	return selectHook(db, func(ctx context.Context, q storage.Querier, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
		select {
		case selects <- struct{}{}:
		default:
		}
		return q.Select(ctx, sortSeries, hints, ms...)
	})
}

// TestPerStepStatsBounded checks that per-step statistics cannot make a
// query allocate per subquery step beyond the limit: the engine tracks them
// for every subquery step whatever the request asks, 16 bytes a step (44 GB
// for sum_over_time(x[30d:1ms])); the query is refused before it reads.
func TestPerStepStatsBounded(t *testing.T) {
	t.Parallel()
	db := teststorage.New(t)
	appendSeries(t, &testServer{db: db}, time.Unix(fixtureAt, 0), "__name__", "up", "job", "api")
	selects := make(chan struct{}, 1)
	ts := newTestServerOn(t, db, func(o *Options, c *Components) {
		o.EnablePerStepStats = true
		c.Queryable = notifySelect(db, selects)
	})
	stats := url.Values{"stats": {"all"}}
	with := func(a, b url.Values) url.Values {
		out := url.Values{}
		for _, v := range []url.Values{a, b} {
			for k, x := range v {
				out[k] = x
			}
		}
		return out
	}
	for _, r := range queryRequests(`sum_over_time(up[30d:1ms])`, with(instantParams, stats), with(rangeParams, stats)) {
		code, _, body := ts.do(t, r.method, r.path, r.form, nil)
		require.Equal(t, http.StatusBadRequest, code, "%s: %.300s", r.name, body)
		require.Contains(t, body, "too many subquery steps", r.name)
		select {
		case <-selects:
			t.Fatalf("%s: the refused query read the storage", r.name)
		default:
		}
	}
	// Within the limit the per-step statistics are the range query's steps.
	code, _, body := ts.do(t, "POST", "/api/v1/query_range", with(url.Values{"query": {`sum_over_time(up[1m:15s])`}}, with(rangeParams, stats)), nil)
	require.Equal(t, http.StatusOK, code, body)
	var answer struct {
		Data struct {
			Stats struct {
				Samples struct {
					PerStep [][]any `json:"totalQueryableSamplesPerStep"`
				} `json:"samples"`
			} `json:"stats"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &answer))
	require.Len(t, answer.Data.Stats.Samples.PerStep, 140/15+1)
}
