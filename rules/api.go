package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/grafana/regexp"
	"github.com/prometheus/common/route"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/util/httputil"

	"github.com/shaledb/shale/internal/httpcompress"
	"github.com/shaledb/shale/internal/jsonenc"
)

// Paths are the API paths Handler answers; mount it on each of them.
var Paths = []string{"/api/v1/rules", "/api/v1/alerts", "/api/v1/alertmanagers"}

// Source is what the API reports: a Manager satisfies it. Its methods are
// called for every request, from any goroutine.
type Source interface {
	// RuleGroups returns the groups in force, in the order to show them.
	RuleGroups() []*Group
	// AlertingRules returns the alerting rules of every group.
	AlertingRules() []*AlertingRule
	// Alertmanagers returns the Alertmanagers alerts are sent to.
	Alertmanagers() []*url.URL
	// DroppedAlertmanagers returns the Alertmanagers relabelling dropped.
	DroppedAlertmanagers() []*url.URL
}

// anyOrigin is Prometheus' default --web.cors.origin, ".*", compiled as
// Prometheus compiles it: every origin, echoed back.
var anyOrigin = regexp.MustCompile("^(?s:.*)$")

// Handler serves GET /api/v1/rules (with the type, rule_name[],
// rule_group[], file[], match[], exclude_alerts, group_limit and
// group_next_token parameters), /api/v1/alerts and /api/v1/alertmanagers
// from src as Prometheus' web/api/v1 does: the same status, headers and
// JSON, byte for byte, errors included. Other methods answer 405, other
// paths 404. cors is the compiled --web.cors.origin (nil: every origin),
// as for the rest of the API.
func Handler(src Source, logger *slog.Logger, cors *regexp.Regexp) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cors == nil {
		cors = anyOrigin
	}
	a := &api{src: src, logger: logger, cors: cors, parser: parser.NewParser(parser.Options{})}
	r := route.New()
	r.Options("/*path", a.wrap(func(*http.Request) result { return result{} }))
	r.Get("/rules", a.wrap(a.rules))
	r.Get("/alerts", a.wrap(a.alerts))
	r.Get("/alertmanagers", a.wrap(a.alertmanagers))
	mux := http.NewServeMux()
	strip := http.StripPrefix("/api/v1", r)
	for _, p := range Paths {
		mux.Handle(p, strip)
	}
	return mux
}

type api struct {
	src    Source
	logger *slog.Logger
	cors   *regexp.Regexp
	parser parser.Parser
}

// result is what an endpoint answers: the JSON of its data (nil: 204 No
// Content) or an error.
type result struct {
	data []byte
	err  *apiError
}

// apiError is an error answer: its errorType and HTTP status.
type apiError struct {
	typ  string
	code int
	err  error
}

func badData(err error) *apiError {
	return &apiError{typ: "bad_data", code: http.StatusBadRequest, err: err}
}

func invalidParam(err error, name string) result {
	return result{err: badData(fmt.Errorf("invalid parameter %q: %w", name, err))}
}

// wrap serves an endpoint as Prometheus does: compression, CORS, then the
// JSON envelope.
func (a *api) wrap(f func(*http.Request) result) http.HandlerFunc {
	hf := func(w http.ResponseWriter, r *http.Request) {
		httputil.SetCORS(w, a.cors, r)
		res := f(r)
		var b []byte
		switch {
		case res.err != nil:
			b = append(b, `{"status":"error","errorType":`...)
			b = appendHTMLString(b, res.err.typ)
			b = appendHTMLString(append(b, `,"error":`...), res.err.err.Error())
			a.write(w, res.err.code, append(b, '}'))
		case res.data != nil:
			b = append(b, `{"status":"success","data":`...)
			a.write(w, http.StatusOK, append(append(b, res.data...), '}'))
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}
	return httpcompress.HandlerFunc(hf)
}

func (a *api) write(w http.ResponseWriter, code int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if n, err := w.Write(b); err != nil {
		a.logger.Error("error writing response", "bytesWritten", n, "err", err)
	}
}

func (a *api) alertmanagers(*http.Request) result {
	b := append([]byte(nil), `{"activeAlertmanagers":`...)
	b = appendAlertmanagers(b, a.src.Alertmanagers())
	b = appendAlertmanagers(append(b, `,"droppedAlertmanagers":`...), a.src.DroppedAlertmanagers())
	return result{data: append(b, '}')}
}

func appendAlertmanagers(dst []byte, urls []*url.URL) []byte {
	return jsonenc.AppendList(dst, urls, func(dst []byte, u *url.URL) []byte {
		return append(appendHTMLString(append(dst, `{"url":`...), u.String()), '}')
	})
}

func (a *api) alerts(*http.Request) result {
	b := append([]byte(nil), `{"alerts":[`...)
	n := 0
	for _, r := range a.src.AlertingRules() {
		for _, al := range r.ActiveAlerts() {
			if n > 0 {
				b = append(b, ',')
			}
			n++
			b = appendAlert(b, al)
		}
	}
	return result{data: append(b, "]}"...)}
}

func appendAlert(dst []byte, al *Alert) []byte {
	dst = jsonenc.AppendLabels(append(dst, `{"labels":`...), al.Labels)
	dst = jsonenc.AppendLabels(append(dst, `,"annotations":`...), al.Annotations)
	dst = appendHTMLString(append(dst, `,"state":`...), al.State.String())
	dst = appendTime(append(dst, `,"activeAt":`...), al.ActiveAt)
	if !al.KeepFiringSince.IsZero() {
		dst = appendTime(append(dst, `,"keepFiringSince":`...), al.KeepFiringSince)
	}
	dst = appendHTMLString(append(dst, `,"value":`...), strconv.FormatFloat(al.Value, 'e', -1, 64))
	return append(dst, '}')
}

// rulesQuery is a parsed /api/v1/rules request.
type rulesQuery struct {
	names, groups, files map[string]bool // empty: all
	matchers             [][]*labels.Matcher
	alerting, recording  bool
	excludeAlerts        bool
	limit                int64  // groups a page; 0: no paging
	next                 string // the token of the page's first group
}

// parseRulesQuery reads the parameters in the order Prometheus does, so
// that a request with several bad ones gets the same error.
func (a *api) parseRulesQuery(r *http.Request) (rulesQuery, *result) {
	var q rulesQuery
	if err := r.ParseForm(); err != nil {
		return q, &result{err: badData(fmt.Errorf("error parsing form values: %w", err))}
	}
	set := func(vs []string) map[string]bool {
		m := make(map[string]bool, len(vs))
		for _, v := range vs {
			m[v] = true
		}
		return m
	}
	q.names, q.groups, q.files = set(r.Form["rule_name[]"]), set(r.Form["rule_group[]"]), set(r.Form["file[]"])
	var err error
	if q.matchers, err = a.parseMatchers(r.Form["match[]"]); err != nil {
		return q, &result{err: badData(err)}
	}
	params := r.URL.Query()
	typ := strings.ToLower(params.Get("type"))
	if typ != "" && typ != "alert" && typ != "record" {
		res := invalidParam(fmt.Errorf("not supported value %q", typ), "type")
		return q, &res
	}
	q.alerting, q.recording = typ != "record", typ != "alert"
	if s := strings.ToLower(params.Get("exclude_alerts")); s != "" {
		if q.excludeAlerts, err = strconv.ParseBool(s); err != nil {
			res := invalidParam(fmt.Errorf("error converting exclude_alerts: %w", err), "exclude_alerts")
			return q, &res
		}
	}
	limit, next := params.Get("group_limit"), params.Get("group_next_token")
	if next != "" && limit == "" {
		res := invalidParam(errors.New("group_limit needs to be present in order to paginate over the groups"), "group_next_token")
		return q, &res
	}
	if limit != "" {
		if q.limit, err = strconv.ParseInt(limit, 10, 32); err != nil {
			res := invalidParam(fmt.Errorf("group_limit needs to be a valid number: %w", err), "group_limit")
			return q, &res
		}
		if q.limit <= 0 {
			res := invalidParam(errors.New("group_limit needs to be greater than 0"), "group_limit")
			return q, &res
		}
		q.next = next
	}
	return q, nil
}

// parseMatchers parses match[] selectors, each of which must have a
// matcher that an empty label does not match.
func (a *api) parseMatchers(ss []string) ([][]*labels.Matcher, error) {
	sets, err := a.parser.ParseMetricSelectors(ss)
	if err != nil {
		return nil, err
	}
	for _, ms := range sets {
		if !slices.ContainsFunc(ms, func(m *labels.Matcher) bool { return m != nil && !m.Matches("") }) {
			return nil, errors.New("match[] must contain at least one non-empty matcher")
		}
	}
	return sets, nil
}

// groupToken is the group_next_token of a group, as Prometheus makes it.
func groupToken(g *Group) string {
	h := sha256.Sum256([]byte(g.File() + ";" + g.Name()))
	return hex.EncodeToString(h[:])
}

func (a *api) rules(r *http.Request) result {
	q, errRes := a.parseRulesQuery(r)
	if errRes != nil {
		return *errRes
	}
	b := append([]byte(nil), `{"groups":[`...)
	var (
		shown      int64
		found      bool // the group of q.next
		nextToken  string
		groupStart int
	)
	for _, g := range a.src.RuleGroups() {
		if q.next != "" && !found {
			if groupToken(g) != q.next {
				continue
			}
			found = true
		}
		if len(q.groups) > 0 && !q.groups[g.Name()] || len(q.files) > 0 && !q.files[g.File()] {
			continue
		}
		groupStart = len(b)
		if shown > 0 {
			b = append(b, ',')
		}
		b = appendHTMLString(append(b, `{"name":`...), g.Name())
		b = appendHTMLString(append(b, `,"file":`...), g.File())
		b = append(b, `,"rules":[`...)
		n := 0
		for _, rule := range g.Rules(q.matchers...) {
			if len(q.names) > 0 && !q.names[rule.Name()] {
				continue
			}
			start := len(b)
			if n > 0 {
				b = append(b, ',')
			}
			switch rule := rule.(type) {
			case *AlertingRule:
				if !q.alerting {
					b = b[:start]
					continue
				}
				b = appendAlertingRule(b, rule, !q.excludeAlerts)
			case *RecordingRule:
				if !q.recording {
					b = b[:start]
					continue
				}
				b = appendRecordingRule(b, rule)
			default:
				return result{err: &apiError{typ: "internal", code: http.StatusInternalServerError,
					err: fmt.Errorf("failed to assert type of rule '%v'", rule.Name())}}
			}
			n++
		}
		if n == 0 { // every rule filtered out: no group
			b = b[:groupStart]
			continue
		}
		if q.limit > 0 && shown == q.limit {
			// One group more than the page holds: there is a next page.
			b = b[:groupStart]
			nextToken = groupToken(g)
			break
		}
		b = jsonenc.AppendFloat(append(b, `],"interval":`...), g.Interval().Seconds())
		b = strconv.AppendInt(append(b, `,"limit":`...), int64(g.Limit()), 10)
		b = jsonenc.AppendFloat(append(b, `,"evaluationTime":`...), g.GetEvaluationTime().Seconds())
		b = appendTime(append(b, `,"lastEvaluation":`...), g.GetLastEvaluation())
		b = append(b, '}')
		shown++
	}
	if q.next != "" && !found {
		return invalidParam(fmt.Errorf("invalid group_next_token '%v'. were rule groups changed?", q.next), "group_next_token")
	}
	b = append(b, ']')
	if nextToken != "" {
		b = appendHTMLString(append(b, `,"groupNextToken":`...), nextToken)
	}
	return result{data: append(b, '}')}
}

func appendAlertingRule(dst []byte, r *AlertingRule, withAlerts bool) []byte {
	dst = appendHTMLString(append(dst, `{"state":`...), r.State().String())
	dst = appendHTMLString(append(dst, `,"name":`...), r.Name())
	dst = appendHTMLString(append(dst, `,"query":`...), r.Query().String())
	dst = jsonenc.AppendFloat(append(dst, `,"duration":`...), r.HoldDuration().Seconds())
	dst = jsonenc.AppendFloat(append(dst, `,"keepFiringFor":`...), r.KeepFiringFor().Seconds())
	dst = jsonenc.AppendLabels(append(dst, `,"labels":`...), r.Labels())
	dst = jsonenc.AppendLabels(append(dst, `,"annotations":`...), r.Annotations())
	dst = append(dst, `,"alerts":`...)
	if withAlerts {
		dst = jsonenc.AppendList(dst, r.ActiveAlerts(), appendAlert)
	} else {
		dst = append(dst, "null"...)
	}
	dst = appendHealth(dst, r.Health(), r.LastError())
	dst = jsonenc.AppendFloat(append(dst, `,"evaluationTime":`...), r.GetEvaluationDuration().Seconds())
	dst = appendTime(append(dst, `,"lastEvaluation":`...), r.GetEvaluationTimestamp())
	return append(dst, `,"type":"alerting"}`...)
}

func appendRecordingRule(dst []byte, r *RecordingRule) []byte {
	dst = appendHTMLString(append(dst, `{"name":`...), r.Name())
	dst = appendHTMLString(append(dst, `,"query":`...), r.Query().String())
	dst = jsonenc.AppendLabels(append(dst, `,"labels":`...), r.Labels())
	dst = appendHealth(dst, r.Health(), r.LastError())
	dst = jsonenc.AppendFloat(append(dst, `,"evaluationTime":`...), r.GetEvaluationDuration().Seconds())
	dst = appendTime(append(dst, `,"lastEvaluation":`...), r.GetEvaluationTimestamp())
	return append(dst, `,"type":"recording"}`...)
}

func appendHealth(dst []byte, h RuleHealth, lastErr error) []byte {
	dst = appendHTMLString(append(dst, `,"health":`...), string(h))
	if lastErr != nil {
		if s := lastErr.Error(); s != "" {
			dst = appendHTMLString(append(dst, `,"lastError":`...), s)
		}
	}
	return dst
}

// Empty is a Source with no rules and no Alertmanagers.
type Empty struct{}

// RuleGroups returns no group.
func (Empty) RuleGroups() []*Group { return nil }

// AlertingRules returns no rule.
func (Empty) AlertingRules() []*AlertingRule { return nil }

// Alertmanagers returns no Alertmanager.
func (Empty) Alertmanagers() []*url.URL { return nil }

// DroppedAlertmanagers returns no Alertmanager.
func (Empty) DroppedAlertmanagers() []*url.URL { return nil }
