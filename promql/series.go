package promql

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/route"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/timestamp"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"
)

// checkContextEvery is how many series /series reads between looks at
// whether its client is gone.
const checkContextEvery = 128

func (a *API) series(r *http.Request) result {
	if err := r.ParseForm(); err != nil {
		return fail(badData(fmt.Errorf("error parsing form values: %w", err)))
	}
	if len(r.Form["match[]"]) == 0 {
		return fail(badData(errors.New("no match[] parameter provided")))
	}
	limit, start, end, apiErr := listParams(r)
	if apiErr != nil {
		return fail(apiErr)
	}
	sets, err := a.parseMatchers(r.Form["match[]"])
	if err != nil {
		return fail(invalidParam(err, "match[]"))
	}
	q, err := a.comps.Queryable.Querier(timestamp.FromTime(start), timestamp.FromTime(end))
	if err != nil {
		return fail(queryError(err))
	}
	hints := &storage.SelectHints{
		Start: timestamp.FromTime(start),
		End:   timestamp.FromTime(end),
		Func:  "series", // no samples needed
		Limit: hintLimit(limit),
	}
	var set storage.SeriesSet
	if len(sets) > 1 {
		all := make([]storage.SeriesSet, 0, len(sets))
		for _, ms := range sets {
			all = append(all, q.Select(r.Context(), true, hints, ms...)) // sorted, to merge
		}
		set = storage.NewMergeSeriesSet(all, 0, storage.ChainedSeriesMerge)
	} else {
		set = q.Select(r.Context(), false, hints, sets[0]...)
	}
	res := readSeries(r, set, limit)
	res.finalizer = func() { q.Close() }
	return res
}

// listParams parses limit, start and end, in the order Prometheus does.
func listParams(r *http.Request) (limit int, start, end time.Time, _ *apiError) {
	limit, apiErr := parseLimit(r.FormValue("limit"))
	if apiErr != nil {
		return 0, start, end, apiErr
	}
	start, end, apiErr = timeRange(r)
	return limit, start, end, apiErr
}

func readSeries(r *http.Request, set storage.SeriesSet, limit int) result {
	metrics := []labels.Labels{}
	warnings := set.Warnings()
	for i := 1; set.Next(); i++ {
		if i%checkContextEvery == 0 {
			if err := r.Context().Err(); err != nil {
				return result{err: queryError(err), warnings: warnings}
			}
		}
		metrics = append(metrics, set.At().Labels())
		if limit > 0 && len(metrics) > limit {
			warnings.Add(errTruncated)
			return result{data: metrics[:limit], warnings: warnings}
		}
	}
	if err := set.Err(); err != nil {
		return result{err: queryError(err), warnings: warnings}
	}
	return result{data: metrics, warnings: warnings}
}

func (a *API) labelNames(r *http.Request) result {
	return a.labelsOf(r, func(q storage.Querier, hints *storage.LabelHints, ms []*labels.Matcher) ([]string, annotations.Annotations, error) {
		return q.LabelNames(r.Context(), hints, ms...)
	})
}

func (a *API) labelValues(r *http.Request) result {
	name := route.Param(r.Context(), "name")
	if strings.HasPrefix(name, "U__") {
		name = model.UnescapeName(name, model.ValueEncodingEscaping)
	}
	if !model.UTF8Validation.IsValidLabelName(name) {
		return fail(badData(fmt.Errorf("invalid label name: %q", name)))
	}
	return a.labelsOf(r, func(q storage.Querier, hints *storage.LabelHints, ms []*labels.Matcher) ([]string, annotations.Annotations, error) {
		return q.LabelValues(r.Context(), name, hints, ms...)
	})
}

type labelLister func(q storage.Querier, hints *storage.LabelHints, ms []*labels.Matcher) ([]string, annotations.Annotations, error)

// labelsOf answers /labels and /label/<name>/values: the sorted union over
// the match[] sets, at most limit of them.
func (a *API) labelsOf(r *http.Request, list labelLister) result {
	limit, start, end, apiErr := listParams(r)
	if apiErr != nil {
		return fail(apiErr)
	}
	sets, err := a.parseMatchers(r.Form["match[]"])
	if err != nil {
		return fail(badData(err))
	}
	q, err := a.comps.Queryable.Querier(timestamp.FromTime(start), timestamp.FromTime(end))
	if err != nil {
		return fail(queryError(err))
	}
	res := union(q, &storage.LabelHints{Limit: hintLimit(limit)}, sets, list)
	res.finalizer = func() { q.Close() }
	if res.err != nil {
		return res
	}
	if vals := res.data.([]string); limit > 0 && len(vals) > limit {
		res.data = vals[:limit]
		res.warnings = res.warnings.Add(errTruncated)
	}
	return res
}

func union(q storage.Querier, hints *storage.LabelHints, sets [][]*labels.Matcher, list labelLister) result {
	if len(sets) <= 1 {
		var ms []*labels.Matcher
		if len(sets) == 1 {
			ms = sets[0]
		}
		vals, warnings, err := list(q, hints, ms)
		if err != nil {
			return result{err: &apiError{errorExec, err}, warnings: warnings}
		}
		if vals == nil {
			vals = []string{}
		}
		slices.Sort(vals)
		return result{data: vals, warnings: warnings}
	}
	var warnings annotations.Annotations
	seen := map[string]struct{}{}
	for _, ms := range sets {
		vals, ws, err := list(q, hints, ms)
		if err != nil {
			return result{err: &apiError{errorExec, err}, warnings: warnings}
		}
		warnings.Merge(ws)
		for _, v := range vals {
			seen[v] = struct{}{}
		}
	}
	vals := make([]string, 0, len(seen))
	for v := range seen {
		vals = append(vals, v)
	}
	slices.Sort(vals)
	return result{data: vals, warnings: warnings}
}
