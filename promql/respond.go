package promql

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	upstream "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/util/annotations"
	"github.com/prometheus/prometheus/util/httputil"

	"github.com/shaledb/shale/internal/httpcompress"
)

// The envelope, error types and parameter parsing of the Prometheus HTTP API,
// as web/api/v1 in Prometheus does them.

// response is the JSON envelope of every answer; its field order is the
// order Prometheus writes.
type response struct {
	Status    string   `json:"status"`
	Data      any      `json:"data,omitempty"`
	ErrorType string   `json:"errorType,omitempty"`
	Error     string   `json:"error,omitempty"`
	Warnings  []string `json:"warnings,omitempty"`
	Infos     []string `json:"infos,omitempty"`
}

// Error types of the API, the errorType field of an error answer.
const (
	errorTimeout     = "timeout"
	errorCanceled    = "canceled"
	errorExec        = "execution"
	errorBadData     = "bad_data"
	errorInternal    = "internal"
	errorUnavailable = "unavailable"
	errorCostLimit   = "cost_limit"
)

type apiError struct {
	typ string
	err error
}

func badData(err error) *apiError { return &apiError{errorBadData, err} }

func internalError(err error) *apiError { return &apiError{errorInternal, err} }

func invalidParam(err error, name string) *apiError {
	return badData(fmt.Errorf("invalid parameter %q: %w", name, err))
}

// statusCode is the HTTP status of an error type, as Prometheus answers it,
// except that a query refused by the memory budget answers 503: Prometheus
// has no such error and would say 422, which blames the query, while the
// same query may succeed once fewer run. So does an error of a storage that
// asks to be retried later (Unavailable() bool: its object store is
// failing), where Prometheus, whose disk does not go away, has none.
func statusCode(e *apiError) int {
	if errors.Is(e.err, ErrMemoryBudget) || unavailable(e.err) {
		return http.StatusServiceUnavailable
	}
	switch e.typ {
	case errorBadData:
		return http.StatusBadRequest
	case errorExec, errorCostLimit:
		return http.StatusUnprocessableEntity
	case errorCanceled:
		return 499 // client closed the connection, as nginx says it
	case errorTimeout:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// unavailable reports whether err comes from a storage that asks to be
// retried later (a method Unavailable() bool that returns true:
// storage.ErrUnavailable while its object store is failing).
func unavailable(err error) bool {
	var u interface{ Unavailable() bool }
	return errors.As(err, &u) && u.Unavailable()
}

// queryError is the API error of a failed query or storage call.
func queryError(err error) *apiError {
	var (
		canceled    upstream.ErrQueryCanceled
		timeout     upstream.ErrQueryTimeout
		storageErr  upstream.ErrStorage
		tooMany     upstream.ErrTooManySeries
		tooManyRead upstream.ErrTooManySamplesRead
	)
	switch {
	case errors.As(err, &canceled), errors.Is(err, context.Canceled):
		return &apiError{errorCanceled, err}
	case errors.As(err, &timeout):
		return &apiError{errorTimeout, err}
	case errors.As(err, &tooMany), errors.As(err, &tooManyRead):
		return &apiError{errorCostLimit, err}
	case errors.As(err, &storageErr):
		return internalError(err)
	}
	return &apiError{errorExec, err}
}

// result is what an endpoint answers: data (nil: 204 No Content) or an
// error, the warnings to show, and what to release once it is written.
type result struct {
	data      any
	err       *apiError
	warnings  annotations.Annotations
	finalizer func()
}

type endpoint func(r *http.Request) result

func fail(e *apiError) result { return result{err: e} }

func ok(data any) result { return result{data: data} }

// wrap serves an endpoint as Prometheus does: readiness, compression, CORS,
// then the JSON envelope.
func (a *API) wrap(f endpoint) http.HandlerFunc {
	hf := func(w http.ResponseWriter, r *http.Request) {
		httputil.SetCORS(w, a.cors, r)
		res := f(r)
		if res.finalizer != nil {
			defer res.finalizer()
		}
		switch {
		case res.err != nil:
			a.respondError(w, res.err, res.data)
		case res.data != nil:
			a.respond(w, res.data, res.warnings, r.FormValue("query"))
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}
	return a.ready(httpcompress.HandlerFunc(hf))
}

// respond writes a success; query places the positions of annotations.
func (a *API) respond(w http.ResponseWriter, data any, warnings annotations.Annotations, query string) {
	warn, info := warnings.AsStrings(query, 10, 10)
	a.write(w, http.StatusOK, &response{Status: "success", Data: data, Warnings: warn, Infos: info})
}

func (a *API) respondError(w http.ResponseWriter, e *apiError, data any) {
	a.write(w, statusCode(e), &response{Status: "error", ErrorType: e.typ, Error: e.err.Error(), Data: data})
}

func (a *API) write(w http.ResponseWriter, code int, resp *response) {
	b, release, err := encode(resp)
	defer release()
	if err != nil {
		a.logger.Error("error marshaling response", "err", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if n, err := w.Write(b); err != nil {
		a.logger.Error("error writing response", "bytesWritten", n, "err", err)
	}
}

// answerBuffers keeps the buffers of query answers for the next ones; a
// buffer beyond maxPooledAnswer is left to the collector.
var answerBuffers = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledAnswer = 4 << 20

// encode returns the JSON of an answer and a function to call once it is
// written.
func encode(resp *response) ([]byte, func(), error) {
	bp := answerBuffers.Get().(*[]byte)
	if b, ok := appendResponse((*bp)[:0], resp); ok {
		return b, func() {
			if cap(b) <= maxPooledAnswer {
				*bp = b
				answerBuffers.Put(bp)
			}
		}, nil
	}
	answerBuffers.Put(bp)
	b, err := jsonAPI.Marshal(resp)
	return b, func() {}, err
}

var (
	// minTime and maxTime are the defaults of optional time ranges, the
	// values Prometheus uses (and that its clients send back).
	minTime = time.Unix(math.MinInt64/1000+62135596801, 0).UTC()
	maxTime = time.Unix(math.MaxInt64/1000-62135596801, 999999999).UTC()

	minTimeFormatted = minTime.Format(time.RFC3339Nano)
	maxTimeFormatted = maxTime.Format(time.RFC3339Nano)
)

func parseTimeParam(r *http.Request, name string, def time.Time) (time.Time, error) {
	val := r.FormValue(name)
	if val == "" {
		return def, nil
	}
	t, err := parseTime(val)
	if err != nil {
		return time.Time{}, fmt.Errorf("invalid time value for '%s': %w", name, err)
	}
	return t, nil
}

// timeRange parses the optional start and end of a request.
func timeRange(r *http.Request) (start, end time.Time, _ *apiError) {
	start, err := parseTimeParam(r, "start", minTime)
	if err != nil {
		return start, end, invalidParam(err, "start")
	}
	end, err = parseTimeParam(r, "end", maxTime)
	if err != nil {
		return start, end, invalidParam(err, "end")
	}
	return start, end, nil
}

// parseTime accepts seconds since the epoch (rounded to ms) or RFC 3339.
func parseTime(s string) (time.Time, error) {
	if t, err := strconv.ParseFloat(s, 64); err == nil {
		s, ns := math.Modf(t)
		ns = math.Round(ns*1000) / 1000
		return time.Unix(int64(s), int64(ns*float64(time.Second))).UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	// time.Parse takes four-digit years only; these are the defaults.
	switch s {
	case minTimeFormatted:
		return minTime, nil
	case maxTimeFormatted:
		return maxTime, nil
	}
	return time.Time{}, fmt.Errorf("cannot parse %q to a valid timestamp", s)
}

// parseDuration accepts seconds or a Prometheus duration (5m, 1h30m).
func parseDuration(s string) (time.Duration, error) {
	if d, err := strconv.ParseFloat(s, 64); err == nil {
		ts := d * float64(time.Second)
		if math.IsNaN(ts) || ts >= float64(math.MaxInt64) || ts < float64(math.MinInt64) {
			return 0, fmt.Errorf("cannot parse %q to a valid duration. It overflows int64", s)
		}
		return time.Duration(ts), nil
	}
	if d, err := model.ParseDuration(s); err == nil {
		return time.Duration(d), nil
	}
	return 0, fmt.Errorf("cannot parse %q to a valid duration", s)
}

// parseLimit parses the limit parameter; 0 means no limit.
func parseLimit(s string) (int, *apiError) {
	if s == "" {
		return 0, nil
	}
	limit, err := strconv.Atoi(s)
	if err == nil && limit < 0 {
		err = errors.New("limit must be non-negative")
	}
	if err != nil {
		return 0, invalidParam(err, "limit")
	}
	return limit, nil
}

// hintLimit asks the storage for one more than limit, so that the answer
// can say it was truncated.
func hintLimit(limit int) int {
	if limit > 0 && limit < math.MaxInt {
		return limit + 1
	}
	return limit
}

// parseMatchers parses match[] and refuses a set that matches everything.
func (a *API) parseMatchers(matchers []string) ([][]*labels.Matcher, error) {
	sets, err := a.parser.ParseMetricSelectors(matchers)
	if err != nil {
		return nil, err
	}
	for _, ms := range sets {
		if !matchesEmpty(ms) {
			continue
		}
		return nil, errors.New("match[] must contain at least one non-empty matcher")
	}
	return sets, nil
}

func matchesEmpty(ms []*labels.Matcher) bool {
	for _, m := range ms {
		if m != nil && !m.Matches("") {
			return false
		}
	}
	return true
}

var errTruncated = errors.New("results truncated due to limit")
