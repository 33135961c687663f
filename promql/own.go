package promql

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/grafana/regexp"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/util/httputil"
	v1 "github.com/prometheus/prometheus/web/api/v1"
)

// The handlers in this file answer the few endpoints whose data a Prometheus
// server takes from parts Shale does not have (scrape targets, a head block,
// a data directory). They render exactly as the upstream handlers do.

type apiError struct {
	typ  string
	code int
	err  error
}

func badData(err error) *apiError {
	return &apiError{"bad_data", http.StatusBadRequest, err}
}

func internalError(err error) *apiError {
	return &apiError{"internal", http.StatusInternalServerError, err}
}

// unavailable answers 500, as the upstream API does for this error type.
func unavailable(err error) *apiError {
	return &apiError{"unavailable", http.StatusInternalServerError, err}
}

type ownFunc func(r *http.Request) (any, *apiError)

// own wraps f the way the upstream API wraps its handlers: instrumentation,
// readiness, compression, CORS, then the JSON envelope.
func (a *API) own(name string, cors *regexp.Regexp, f ownFunc) http.HandlerFunc {
	hf := func(w http.ResponseWriter, r *http.Request) {
		httputil.SetCORS(w, cors, r)
		data, apiErr := f(r)
		if apiErr != nil {
			a.respondError(w, apiErr)
			return
		}
		a.respond(w, data)
	}
	return a.instrument(name, a.ready(httputil.CompressionHandler{Handler: http.HandlerFunc(hf)}.ServeHTTP))
}

func (a *API) respond(w http.ResponseWriter, data any) {
	b, err := v1.JSONCodec{}.Encode(&v1.Response{Status: "success", Data: data})
	if err != nil {
		a.logger.Error("error marshaling response", "err", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if n, err := w.Write(b); err != nil {
		a.logger.Error("error writing response", "bytesWritten", n, "err", err)
	}
}

func (a *API) respondError(w http.ResponseWriter, apiErr *apiError) {
	b, err := v1.JSONCodec{}.Encode(&v1.Response{Status: "error", ErrorType: apiErr.typ, Error: apiErr.err.Error()})
	if err != nil {
		a.logger.Error("error marshaling json response", "err", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(apiErr.code)
	if n, err := w.Write(b); err != nil {
		a.logger.Error("error writing response", "bytesWritten", n, "err", err)
	}
}

func (a *API) metadata(r *http.Request) (any, *apiError) {
	limit := -1
	if s := r.FormValue("limit"); s != "" {
		var err error
		if limit, err = strconv.Atoi(s); err != nil {
			return nil, badData(errors.New("limit must be a number"))
		}
	}
	limitPerMetric := -1
	if s := r.FormValue("limit_per_metric"); s != "" {
		var err error
		if limitPerMetric, err = strconv.Atoi(s); err != nil {
			return nil, badData(errors.New("limit_per_metric must be a number"))
		}
	}
	res := map[string][]metadata.Metadata{}
	if a.comps.Metadata == nil {
		return res, nil
	}
	all, err := a.comps.Metadata.MetricMetadata(r.Context(), r.FormValue("metric"))
	if err != nil {
		return nil, internalError(fmt.Errorf("metric metadata: %w", err))
	}
	// Sorted so that a limit keeps the same families on every call.
	names := make([]string, 0, len(all))
	for name := range all {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if limit >= 0 && len(res) >= limit {
			break
		}
		ms := all[name]
		out := make([]metadata.Metadata, 0, len(ms))
		for _, m := range ms {
			if limitPerMetric > 0 && len(out) >= limitPerMetric {
				break
			}
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
		res[name] = out
	}
	return res, nil
}

func (a *API) config(*http.Request) (any, *apiError) {
	return struct {
		YAML string `json:"yaml"`
	}{a.comps.ConfigYAML()}, nil
}

func (a *API) tsdbStatus(r *http.Request) (any, *apiError) {
	const maxTSDBLimit = 10000
	limit := 10
	if s := r.FormValue("limit"); s != "" {
		var err error
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 {
			return nil, badData(errors.New("limit must be a positive number"))
		}
		if limit > maxTSDBLimit {
			return nil, badData(fmt.Errorf("limit must not exceed %d", maxTSDBLimit))
		}
	}
	if a.comps.Cardinality == nil {
		return nil, internalError(fmt.Errorf("cardinality statistics: %w", errUnsupported))
	}
	c, err := a.comps.Cardinality.Cardinality(r.Context(), limit)
	if err != nil {
		return nil, internalError(fmt.Errorf("cardinality statistics: %w", err))
	}
	return v1.TSDBStatus{
		HeadStats: v1.HeadStats{
			NumSeries:     c.NumSeries,
			NumLabelPairs: c.NumLabelPairs,
			ChunkCount:    c.ChunkCount,
			MinTime:       c.MinTime,
			MaxTime:       c.MaxTime,
		},
		SeriesCountByMetricName:     topStats(c.SeriesCountByMetricName, limit),
		LabelValueCountByLabelName:  topStats(c.LabelValueCountByLabelName, limit),
		MemoryInBytesByLabelName:    topStats(c.MemoryInBytesByLabelName, limit),
		SeriesCountByLabelValuePair: topStats(c.SeriesCountByLabelValuePair, limit),
	}, nil
}

// topStats orders by count, largest first, then by name, and keeps limit.
func topStats(in []NameCount, limit int) []v1.TSDBStat {
	sorted := slices.Clone(in)
	slices.SortFunc(sorted, func(x, y NameCount) int {
		if x.Count != y.Count {
			if x.Count > y.Count {
				return -1
			}
			return 1
		}
		return strings.Compare(x.Name, y.Name)
	})
	if len(sorted) > limit {
		sorted = sorted[:limit]
	}
	out := make([]v1.TSDBStat, 0, len(sorted))
	for _, s := range sorted {
		out = append(out, v1.TSDBStat{Name: s.Name, Value: s.Count})
	}
	return out
}

// snapshot answers as Prometheus does, but a snapshot of an object-store
// database is a copy of its bucket prefix, which is not done here.
func (a *API) snapshot(r *http.Request) (any, *apiError) {
	if !a.opts.EnableAdmin {
		return nil, unavailable(errors.New("admin APIs disabled"))
	}
	if s := r.FormValue("skip_head"); s != "" {
		if _, err := strconv.ParseBool(s); err != nil {
			return nil, badData(fmt.Errorf("invalid parameter %q: %w", "skip_head", fmt.Errorf("unable to parse boolean: %w", err)))
		}
	}
	return nil, internalError(fmt.Errorf("create snapshot: %w", errUnsupported))
}
