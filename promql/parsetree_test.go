package promql

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
)

// parseQueryCases cover every kind of node the tree has and every field
// that can take more than one value: grouping and parameters of
// aggregations; vector matching with on, ignoring, group_left, group_right,
// fill and bool; subqueries with and without a step; @ and offset, also as
// duration expressions; all four matcher types; literals of every spelling;
// calls with fixed and variable arguments; parentheses and unary operators.
var parseQueryCases = []string{
	// Selectors and matchers.
	`up`,
	`{__name__="up"}`,
	`http_requests_total{job="api", code!="500", path=~"/api/.*", method!~"GET|HEAD"}`,
	`{"utf8.metric", "a.b"="c"}`,
	`up{job=""}`,
	`up[5m]`,
	`up{a=~"x"}[1h30m]`,
	// @ and offset.
	`up offset 5m`,
	`up offset -1h`,
	`up @ 1700000000`,
	`up @ 1.5 offset 1m`,
	`up @ start()`,
	`up[5m] @ end() offset 10s`,
	`up offset (1h - 5m)`,
	`up[5m + 1m]`,
	`up[2 * 5m] offset -(1m)`,
	`rate(x[5m] anchored)`,
	`rate(x[5m] smoothed)`,
	`x smoothed`,
	// Subqueries.
	`rate(x[5m])[30m:1m]`,
	`max_over_time(up[1h:])`,
	`up[5m:1m] offset 10m @ 100`,
	`sum(up)[1h:5m] @ start()`,
	`min_over_time(rate(x[1m])[1h:] @ end())`,
	`up[1h:5m * 2] offset (1m)`,
	// Literals.
	`1`,
	`-1.5`,
	`0x1F`,
	`1e10`,
	`.5`,
	`Inf`,
	`-Inf`,
	`NaN`,
	`5m`,
	`"a string <b>&"`,
	`'single'`,
	"`raw \\n`",
	// Aggregations.
	`sum(up)`,
	`sum by (job, instance) (rate(x[5m]))`,
	`avg without (instance) (up)`,
	`count by () (up)`,
	`max(up) by (job)`,
	`topk(3, up)`,
	`bottomk by (job) (1, up)`,
	`quantile without (pod) (0.9, x)`,
	`count_values("value", up)`,
	`stddev(up)`,
	`limitk(2, up)`,
	`limit_ratio(0.5, up)`,
	`group(up)`,
	// Binary operators.
	`a + b`,
	`1 + 2`,
	`2 ^ 3 % 4 - 1`,
	`a > bool 1`,
	`a == bool on(job) b`,
	`a / on(job) group_left(instance) b`,
	`a * ignoring(instance) group_right b`,
	`a - ignoring(x) group_left b`,
	`a and on() b`,
	`a or ignoring(x) b`,
	`a unless b`,
	`a atan2 b`,
	`a + fill(0) b`,
	`a + on(job) fill_left(1) fill_right(-2) b`,
	nanFill,
	// Calls.
	`time()`,
	`vector(1)`,
	`round(up)`,
	`round(up, 5)`,
	`label_replace(up, "dst", "$1", "src", "(.*)")`,
	`label_join(up, "dst", ",", "a", "b", "c")`,
	`histogram_quantile(0.9, sum by (le) (rate(x_bucket[5m])))`,
	`absent(nothing)`,
	`sort_by_label(up, "a", "b")`,
	`days_in_month()`,
	// Parentheses and unary operators.
	`(up)`,
	`((1 + 2)) * 3`,
	`-up`,
	`+up`,
	`-(1)`,
	`-sum(up)`,
	// Refused queries.
	`)`,
	`sum(`,
	`up{a=~"("}`,
	`rate(up)`,
}

// nanFill has a fill value JSON cannot hold: Prometheus answers 500 with the
// encoder's message, which names Go types and so cannot be the same bytes.
const nanFill = `a < ignoring(x) fill_right(NaN) b`

// TestParseQuerySameAsUpstream asks /api/v1/parse_query of this package and
// of Prometheus' own handlers for every case and wants the same answer, byte
// for byte; and checks that the cases still reach every kind of node.
func TestParseQuerySameAsUpstream(t *testing.T) {
	t.Parallel()
	edit := func(o *Options, c *Components) {
		o.EnableExperimentalFunctions = true
		o.EnableBinopFillModifiers = true
		o.EnableUnquotedUTF8Names = true
	}
	ts := newTestServer(t, edit)
	opts, comps := DefaultOptions(), Components{Queryable: ts.db, ExemplarQueryable: ts.db}
	edit(&opts, &comps)
	ref := httptest.NewServer(newUpstreamAPI(t, opts, comps))
	t.Cleanup(ref.Close)

	kinds := map[string]bool{}
	for _, q := range parseQueryCases {
		t.Run(q, func(t *testing.T) {
			form := url.Values{"query": {q}}
			wantCode, _, want := doRequest(t, ts.client, ref.URL, "POST", "/api/v1/parse_query", form, nil)
			gotCode, _, got := ts.do(t, "POST", "/api/v1/parse_query", form, nil)
			require.Equal(t, wantCode, gotCode, "upstream: %s\nshale: %s", want, got)
			if q == nanFill {
				require.Equal(t, http.StatusInternalServerError, gotCode)
				require.Contains(t, got, "unsupported value: NaN")
				return
			}
			require.Equal(t, want, got)
			if gotCode != http.StatusOK {
				return
			}
			var resp struct{ Data any }
			require.NoError(t, json.Unmarshal([]byte(got), &resp))
			collectKinds(resp.Data, kinds)
		})
	}

	var seen []string
	for k := range kinds {
		seen = append(seen, k)
	}
	sort.Strings(seen)
	require.Equal(t, []string{
		"aggregation", "binaryExpr", "call", "durationExpr", "matrixSelector", "numberLiteral",
		"parenExpr", "stringLiteral", "subquery", "unaryExpr", "vectorSelector",
	}, seen)
}

// collectKinds records the "type" of every node in a decoded tree.
func collectKinds(v any, kinds map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		if k, ok := v["type"].(string); ok && k != "" {
			if _, isMatcher := v["value"]; !isMatcher {
				kinds[k] = true
			}
		}
		for _, c := range v {
			collectKinds(c, kinds)
		}
	case []any:
		for _, c := range v {
			collectKinds(c, kinds)
		}
	}
}

// TestSyntaxTreeUnknownNode answers an error, not a panic, for a node the
// tree does not know.
func TestSyntaxTreeUnknownNode(t *testing.T) {
	_, err := syntaxTree(&parser.BinaryExpr{
		Op:  parser.ADD,
		LHS: &parser.NumberLiteral{Val: 1},
		RHS: &parser.StepInvariantExpr{Expr: &parser.NumberLiteral{Val: 2}},
	})
	require.ErrorContains(t, err, "StepInvariantExpr")
}
