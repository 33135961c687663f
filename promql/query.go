package promql

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/prometheus/model/timestamp"
	upstream "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/util/annotations"
	"github.com/prometheus/prometheus/util/httputil"
	"github.com/prometheus/prometheus/util/stats"
)

// queryData is the data of a query answer.
type queryData struct {
	ResultType parser.ValueType `json:"resultType"`
	Result     parser.Value     `json:"result"`
	Stats      stats.QueryStats `json:"stats,omitempty"`
}

// maxPoints bounds the steps of a range query, as Prometheus does: 60s
// resolution for a week, or 1h for a year.
const maxPoints = 11000

func (a *API) query(r *http.Request) result {
	limit, apiErr := parseLimit(r.FormValue("limit"))
	if apiErr != nil {
		return fail(apiErr)
	}
	ts, err := parseTimeParam(r, "time", a.now())
	if err != nil {
		return fail(invalidParam(err, "time"))
	}
	return a.run(r, limit, func(ctx context.Context, opts upstream.QueryOpts, qs string) (upstream.Query, error) {
		return a.limited.NewInstantQuery(ctx, a.comps.Queryable, opts, qs, ts)
	})
}

func (a *API) queryRange(r *http.Request) result {
	limit, apiErr := parseLimit(r.FormValue("limit"))
	if apiErr != nil {
		return fail(apiErr)
	}
	start, end, step, apiErr := parseRange(r)
	if apiErr != nil {
		return fail(apiErr)
	}
	if res, ok := a.cachedRange(r, limit, start, end, step); ok {
		return res
	}
	return a.run(r, limit, func(ctx context.Context, opts upstream.QueryOpts, qs string) (upstream.Query, error) {
		return a.limited.NewRangeQuery(ctx, a.comps.Queryable, opts, qs, start, end, step)
	})
}

// cachedRange answers a range query through the results cache, evaluating
// what the cache lacks in parts at once where the query is long enough
// (shard.go). It declines (false) when there is neither a cache nor
// splitting, and when the request asks for statistics or for start
// timestamps.
func (a *API) cachedRange(r *http.Request, limit int, start, end time.Time, step time.Duration) (result, bool) {
	if (a.cache == nil && a.shards < 2) || r.FormValue("stats") != "" || r.Header.Get("X-Prometheus-Use-Start-Timestamps") != "" {
		return result{}, false
	}
	ctx, cancel, apiErr := a.withTimeout(r)
	if apiErr != nil {
		return fail(apiErr), true
	}
	defer cancel()
	opts, err := queryOpts(r)
	if err != nil {
		return fail(badData(err)), true
	}
	// Parsed once, here: the parser counts what its limits refuse.
	qs := r.FormValue("query")
	expr, err := a.parser.ParseExpr(qs)
	if err != nil {
		return fail(constructionError(err)), true
	}
	if a.cache != nil {
		if err := a.comps.Changes.CatchUp(ctx); err != nil {
			return result{}, false
		}
	}
	lookback := opts.LookbackDelta()
	if lookback <= 0 {
		lookback = a.opts.LookbackDelta
	}
	run := func(ctx context.Context, s, e int64) (upstream.Matrix, annotations.Annotations, func(), error) {
		qry, err := a.limited.NewRangeQuery(ctx, a.comps.Queryable, opts, qs, time.UnixMilli(s), time.UnixMilli(e), step)
		if err != nil {
			return nil, nil, nil, constructErr{err}
		}
		res := qry.Exec(httputil.ContextFromRequest(ctx, r))
		if res.Err != nil {
			return nil, res.Warnings, qry.Close, res.Err
		}
		m, _ := res.Value.(upstream.Matrix)
		return m, res.Warnings, qry.Close, nil
	}
	if cacheable(expr) {
		run = shardedRun(run, step.Milliseconds(), a.shards)
	}
	m, warnings, err := a.cache.query(ctx, expr, qs, start.UnixMilli(), end.UnixMilli(), step.Milliseconds(), lookback, run)
	if err != nil {
		if ce, ok := err.(constructErr); ok {
			return fail(constructionError(ce.err)), true
		}
		return result{err: queryError(err), warnings: warnings}, true
	}
	if limit > 0 && len(m) > limit {
		m = m[:limit]
		warnings = warnings.Add(errTruncated)
	}
	return result{data: &queryData{ResultType: parser.ValueTypeMatrix, Result: m}, warnings: warnings}, true
}

// constructErr marks an error building a query, answered differently from
// one running it.
type constructErr struct{ err error }

func (e constructErr) Error() string { return e.err.Error() }

type queryBuilder func(ctx context.Context, opts upstream.QueryOpts, qs string) (upstream.Query, error)

// run builds the query of a request, under its timeout, and runs it.
func (a *API) run(r *http.Request, limit int, build queryBuilder) result {
	ctx, cancel, apiErr := a.withTimeout(r)
	if apiErr != nil {
		return fail(apiErr)
	}
	defer cancel()
	opts, err := queryOpts(r)
	if err != nil {
		return fail(badData(err))
	}
	qry, err := build(ctx, opts, r.FormValue("query"))
	if err != nil {
		return fail(constructionError(err))
	}
	return a.exec(ctx, r, qry, limit)
}

func parseRange(r *http.Request) (start, end time.Time, step time.Duration, _ *apiError) {
	start, err := parseTime(r.FormValue("start"))
	if err != nil {
		return start, end, 0, invalidParam(err, "start")
	}
	if end, err = parseTime(r.FormValue("end")); err != nil {
		return start, end, 0, invalidParam(err, "end")
	}
	if end.Before(start) {
		return start, end, 0, invalidParam(errors.New("end timestamp must not be before start time"), "end")
	}
	if step, err = parseDuration(r.FormValue("step")); err != nil {
		return start, end, 0, invalidParam(err, "step")
	}
	if step <= 0 {
		return start, end, 0, invalidParam(errors.New("zero or negative query resolution step widths are not accepted. Try a positive integer"), "step")
	}
	if end.Sub(start)/step > maxPoints {
		return start, end, 0, badData(errors.New("exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)"))
	}
	return start, end, step, nil
}

// withTimeout applies the timeout parameter to the request's context.
func (a *API) withTimeout(r *http.Request) (context.Context, context.CancelFunc, *apiError) {
	v := r.FormValue("timeout")
	if v == "" {
		return r.Context(), func() {}, nil
	}
	timeout, err := parseDuration(v)
	if err != nil {
		return nil, nil, invalidParam(err, "timeout")
	}
	if timeout <= 0 {
		return nil, nil, invalidParam(fmt.Errorf("timeout must be positive, got %s", timeout), "timeout")
	}
	ctx, cancel := context.WithDeadline(r.Context(), a.now().Add(timeout))
	return ctx, cancel, nil
}

// queryOpts reads lookback_delta, stats=all and the start-timestamp header.
func queryOpts(r *http.Request) (upstream.QueryOpts, error) {
	var lookback time.Duration
	if s := r.FormValue("lookback_delta"); s != "" {
		d, err := parseDuration(s)
		if err != nil {
			return nil, fmt.Errorf("error parsing lookback delta duration: %w", err)
		}
		lookback = d
	}
	var useStart *bool
	if s := r.Header.Get("X-Prometheus-Use-Start-Timestamps"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, fmt.Errorf("error parsing X-Prometheus-Use-Start-Timestamps header: %w", err)
		}
		useStart = &b
	}
	return upstream.NewPrometheusQueryOpts(r.FormValue("stats") == "all", lookback, useStart), nil
}

// constructionError maps an error building a query: a timeout or a
// cancellation (waiting for a slot, say) as such, anything else as a bad
// query.
func constructionError(err error) *apiError {
	var (
		timeout  upstream.ErrQueryTimeout
		canceled upstream.ErrQueryCanceled
	)
	if errors.As(err, &timeout) || errors.As(err, &canceled) {
		return queryError(err)
	}
	return invalidParam(err, "query")
}

// exec runs a built query; the result's finalizer closes it after the answer
// is written, since the answer refers to the query's memory.
func (a *API) exec(ctx context.Context, r *http.Request, qry upstream.Query, limit int) result {
	res := qry.Exec(httputil.ContextFromRequest(ctx, r))
	if res.Err != nil {
		return result{err: queryError(res.Err), warnings: res.Warnings, finalizer: qry.Close}
	}
	warnings := res.Warnings
	if limit > 0 && truncate(res, limit) {
		warnings = warnings.Add(errTruncated)
	}
	param := r.FormValue("stats")
	switch param {
	case "", "true", "all":
	default:
		warnings = warnings.Add(fmt.Errorf("value %q for parameter \"stats\" is deprecated and will be rejected in the next major release, use %q or %q", param, "true", "all"))
	}
	var qs stats.QueryStats
	if param != "" {
		qs = stats.NewQueryStats(qry.Stats())
	}
	return result{
		data:      &queryData{ResultType: res.Value.Type(), Result: res.Value, Stats: qs},
		warnings:  warnings,
		finalizer: qry.Close,
	}
}

// truncate keeps the first limit series of a vector or matrix.
func truncate(res *upstream.Result, limit int) bool {
	switch v := res.Value.(type) {
	case upstream.Matrix:
		if len(v) > limit {
			res.Value = v[:limit]
			return true
		}
	case upstream.Vector:
		if len(v) > limit {
			res.Value = v[:limit]
			return true
		}
	}
	return false
}

func (a *API) queryExemplars(r *http.Request) result {
	start, end, apiErr := timeRange(r)
	if apiErr != nil {
		return fail(apiErr)
	}
	if end.Before(start) {
		return fail(badData(errors.New("end timestamp must not be before start timestamp")))
	}
	expr, err := a.parser.ParseExpr(r.FormValue("query"))
	if err != nil {
		return fail(badData(err))
	}
	selectors := parser.ExtractSelectors(expr)
	if len(selectors) < 1 {
		return result{}
	}
	eq, err := a.comps.ExemplarQueryable.ExemplarQuerier(r.Context())
	if err != nil {
		return fail(queryError(err))
	}
	res, err := eq.Select(timestamp.FromTime(start), timestamp.FromTime(end), selectors...)
	if err != nil {
		return fail(queryError(err))
	}
	return ok(res)
}

func (a *API) formatQuery(r *http.Request) result {
	expr, err := a.parser.ParseExpr(r.FormValue("query"))
	if err != nil {
		return fail(invalidParam(err, "query"))
	}
	return ok(expr.Pretty(0))
}

func (a *API) parseQuery(r *http.Request) result {
	expr, err := a.parser.ParseExpr(r.FormValue("query"))
	if err != nil {
		return fail(invalidParam(err, "query"))
	}
	tree, err := syntaxTree(expr)
	if err != nil {
		return fail(internalError(err))
	}
	return ok(tree)
}
