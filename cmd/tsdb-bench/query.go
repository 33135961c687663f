package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// benchQuery is one query of the query load: a dashboard panel (a range
// query over Range) or an alerting rule (an instant query, Range 0).
type benchQuery struct {
	Name  string
	Expr  string
	Range time.Duration
}

// dashboardExprs are range queries of a node dashboard: fleet-wide
// aggregations and panels of a few selected hosts.
var dashboardExprs = []struct{ name, expr string }{
	{"cpu-by-instance", `sum by (instance) (rate(node_cpu_seconds_total{mode!="idle"}[5m]))`},
	{"net-topk-irate", `topk(5, irate(node_network_receive_bytes_total{device=~"eth.*"}[5m]))`},
	{"http-p99", `histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket{handler="/metrics"}[5m])))`},
	{"cpu-count-by-mode", `count by (mode) (node_cpu_seconds_total)`},
	{"host-fs-regex", `node_filesystem_avail_bytes{instance=~"host-0000[0-4]-.*",mountpoint=~"/|/var.*",fstype!="tmpfs"}`},
	{"host-mem", `1 - node_memory_MemAvailable_bytes{instance=~"host-00001-.*"} / node_memory_MemTotal_bytes{instance=~"host-00001-.*"}`},
}

// alertExprs are instant queries as alerting rules evaluate them.
var alertExprs = []struct{ name, expr string }{
	{"alert-up", `up == 0`},
	{"alert-fs-full", `node_filesystem_avail_bytes{fstype!="tmpfs"} / node_filesystem_size_bytes{fstype!="tmpfs"} < 0.01`},
	{"alert-cpu-idle", `sum by (instance) (rate(node_cpu_seconds_total{mode="idle"}[5m])) < 0`},
	{"alert-net-errs", `rate(node_network_receive_errs_total{device=~"eth[0-9]+"}[5m]) > 1e9`},
	{"alert-count-by-job", `count by (job) (up)`},
}

// queryRanges are the dashboard time ranges.
var queryRanges = []time.Duration{time.Hour, 6 * time.Hour, 24 * time.Hour}

// querySet returns every query of the query load.
func querySet() []benchQuery {
	var qs []benchQuery
	for _, r := range queryRanges {
		for _, d := range dashboardExprs {
			qs = append(qs, benchQuery{Name: d.name + "/" + fmtRange(r), Expr: d.expr, Range: r})
		}
	}
	for _, a := range alertExprs {
		qs = append(qs, benchQuery{Name: a.name, Expr: a.expr})
	}
	return qs
}

func fmtRange(r time.Duration) string {
	if r%time.Hour != 0 {
		return r.String()
	}
	return strconv.Itoa(int(r.Hours())) + "h"
}

// queryStep is the resolution of a range query: about 240 points, as a
// dashboard panel some 1000 pixels wide with a max data points setting
// asks for, and never finer than the scrape interval.
func queryStep(r, interval time.Duration) time.Duration {
	s := (r / 240).Truncate(time.Second)
	return max(s, interval)
}

// queryResult is one execution of a query.
type queryResult struct {
	Query   benchQuery
	Latency time.Duration
	Series  int // series in the result
	Err     string
	// Kind sorts a failure: "HTTP 503 unavailable" (status and the API's
	// errorType), "connection refused", "timeout", "connection error" or
	// "bad answer" (a 200 whose body is not a query result).
	Kind string
}

// queryParams returns the API path and parameters of q as a dashboard
// opened right after the sample at end asks: a range query ends at the first
// step boundary at or after end (Grafana aligns the range to multiples of the
// step), so its panel shows the newest samples whatever the step; an alert
// evaluates at end.
func queryParams(q benchQuery, end time.Time, interval time.Duration) (string, url.Values) {
	v := url.Values{"query": {q.Expr}}
	if q.Range == 0 {
		v.Set("time", strconv.FormatInt(end.Unix(), 10))
		return "/api/v1/query", v
	}
	step := queryStep(q.Range, interval)
	e := end.Truncate(step)
	if e.Before(end) {
		e = e.Add(step)
	}
	v.Set("start", strconv.FormatInt(e.Add(-q.Range).Unix(), 10))
	v.Set("end", strconv.FormatInt(e.Unix(), 10))
	v.Set("step", strconv.FormatFloat(step.Seconds(), 'f', -1, 64))
	return "/api/v1/query_range", v
}

// runQuery executes q against the Prometheus HTTP API at base with end as
// the evaluation (or range end) time.
func runQuery(ctx context.Context, client *http.Client, base string, q benchQuery, end time.Time, interval time.Duration) queryResult {
	path, v := queryParams(q, end, interval)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, nil)
	if err != nil {
		return queryResult{Query: q, Err: err.Error()}
	}
	req.URL.RawQuery = v.Encode()
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return queryResult{Query: q, Latency: time.Since(t0), Err: err.Error(), Kind: statusText(classifyNetErr(ctx, err))}
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	lat := time.Since(t0)
	if err != nil {
		return queryResult{Query: q, Latency: lat, Err: err.Error(), Kind: statusText(classifyNetErr(ctx, err))}
	}
	n, perr := countResultSeries(body)
	r := queryResult{Query: q, Latency: lat, Series: n}
	if resp.StatusCode != http.StatusOK {
		r.Err = fmt.Sprintf("HTTP %d: %.200s", resp.StatusCode, body)
		r.Kind = fmt.Sprintf("HTTP %d", resp.StatusCode)
		var answer struct {
			ErrorType string `json:"errorType"`
		}
		if json.Unmarshal(body, &answer) == nil && answer.ErrorType != "" {
			r.Kind += " " + answer.ErrorType
		}
	} else if perr != nil {
		r.Err, r.Kind = perr.Error(), "bad answer"
	}
	return r
}

// countResultSeries returns the number of series (or vector elements) in a
// Prometheus API query response.
func countResultSeries(body []byte) (int, error) {
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string            `json:"resultType"`
			Result     []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, fmt.Errorf("decode query response: %w", err)
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("query failed: %s", r.Error)
	}
	return len(r.Data.Result), nil
}

// runQueries runs every query of qs once, one after another, and returns
// the results in order.
func runQueries(ctx context.Context, base string, qs []benchQuery, end time.Time, interval time.Duration) []queryResult {
	client := &http.Client{Timeout: 5 * time.Minute}
	defer client.CloseIdleConnections()
	out := make([]queryResult, 0, len(qs))
	for _, q := range qs {
		if ctx.Err() != nil {
			break
		}
		out = append(out, runQuery(ctx, client, base, q, end, interval))
	}
	return out
}
