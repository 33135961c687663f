package rules

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/template"
)

// QueryFunc evaluates an instant query at t and returns its vector: the
// templates' query function. The server builds it over the PromQL engine
// (Shale's promql.EngineQueryFunc).
type QueryFunc = template.QueryFunc

// sample is a sample a rule writes.
type sample struct {
	metric labels.Labels
	t      int64
	f      float64
	h      *histogram.FloatHistogram
}

// RuleHealth is a rule's health as the API reports it.
type RuleHealth string

// The healths of a rule: not evaluated yet, last evaluation good, or failed.
const (
	HealthUnknown RuleHealth = "unknown"
	HealthGood    RuleHealth = "ok"
	HealthBad     RuleHealth = "err"
)

// Rule is a recording or an alerting rule: *RecordingRule or
// *AlertingRule. Its methods may be called from any goroutine.
type Rule interface {
	// Name is the recorded metric's name or the alert's name.
	Name() string
	// Labels are the labels the rule adds (its group's and its own).
	Labels() labels.Labels
	// Query is the rule's expression.
	Query() parser.Expr
	Health() RuleHealth
	// LastError is the error of the last evaluation, or nil.
	LastError() error
	// GetEvaluationDuration is how long the last evaluation took.
	GetEvaluationDuration() time.Duration
	// GetEvaluationTimestamp is when (wall clock) the last evaluation
	// started; zero before the first.
	GetEvaluationTimestamp() time.Time

	// eval evaluates the rule at ts (the query at ts-offset) and returns
	// the samples to write.
	eval(ctx context.Context, ts time.Time, offset time.Duration, query QueryFunc, externalURL *url.URL, limit int) ([]sample, error)
	// key is the rule's definition: equal keys, equal rules.
	key() string
	status() *ruleStatus
}

// ruleStatus is the evaluation state both kinds of rule report.
type ruleStatus struct {
	mu       sync.Mutex
	health   RuleHealth
	lastErr  error
	duration time.Duration
	evalAt   time.Time
}

func (s *ruleStatus) status() *ruleStatus { return s }

func (s *ruleStatus) setResult(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr = err
	s.health = HealthGood
	if err != nil {
		s.health = HealthBad
	}
}

func (s *ruleStatus) setTiming(start time.Time, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evalAt, s.duration = start, d
}

// Health reports the last evaluation's result.
func (s *ruleStatus) Health() RuleHealth {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.health == "" {
		return HealthUnknown
	}
	return s.health
}

// LastError returns the last evaluation's error, or nil.
func (s *ruleStatus) LastError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

// GetEvaluationDuration returns how long the last evaluation took.
func (s *ruleStatus) GetEvaluationDuration() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.duration
}

// GetEvaluationTimestamp returns when the last evaluation started.
func (s *ruleStatus) GetEvaluationTimestamp() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.evalAt
}

// ErrDuplicateRecordingLabelSet is a recording rule's result with two
// samples of the same labels once the rule's labels are set.
var ErrDuplicateRecordingLabelSet = errors.New("vector contains metrics with the same labelset after applying rule labels")

// ErrDuplicateAlertLabelSet is an alerting rule's result with two samples
// of the same labels once the rule's labels are set.
var ErrDuplicateAlertLabelSet = errors.New("vector contains metrics with the same labelset after applying alert labels")

// RecordingRule writes its expression's result as a new series.
type RecordingRule struct {
	ruleStatus
	name   string
	expr   parser.Expr
	labels labels.Labels
}

// newRecordingRule returns a rule recording expr as name, with ls set.
func newRecordingRule(name string, expr parser.Expr, ls labels.Labels) *RecordingRule {
	return &RecordingRule{name: name, expr: expr, labels: ls}
}

// Name returns the recorded metric's name.
func (r *RecordingRule) Name() string { return r.name }

// Labels returns the labels set on the recorded series.
func (r *RecordingRule) Labels() labels.Labels { return r.labels }

// Query returns the rule's expression.
func (r *RecordingRule) Query() parser.Expr { return r.expr }

func (r *RecordingRule) key() string {
	return "record\x00" + r.name + "\x00" + r.expr.String() + "\x00" + r.labels.String()
}

func (r *RecordingRule) eval(ctx context.Context, ts time.Time, offset time.Duration, query QueryFunc, _ *url.URL, limit int) ([]sample, error) {
	vec, err := query(ctx, r.expr.String(), ts.Add(-offset))
	if err != nil {
		return nil, err
	}
	b := labels.NewBuilder(labels.EmptyLabels())
	for i := range vec {
		b.Reset(vec[i].Metric)
		b.Set(model.MetricNameLabel, r.name)
		r.labels.Range(func(l labels.Label) { b.Set(l.Name, l.Value) })
		vec[i].Metric = b.Labels()
	}
	if vec.ContainsSameLabelset() {
		return nil, ErrDuplicateRecordingLabelSet
	}
	if limit > 0 && len(vec) > limit {
		return nil, fmt.Errorf("exceeded limit of %d with %d series", limit, len(vec))
	}
	out := make([]sample, len(vec))
	for i, v := range vec {
		out[i] = sample{metric: v.Metric, t: v.T, f: v.F, h: v.H}
	}
	return out, nil
}

// AlertState is the state of an alert, or the highest of a rule's alerts.
type AlertState int

// The states, in increasing order.
const (
	StateUnknown AlertState = iota
	StateInactive
	StatePending
	StateFiring
)

// String returns the state's name as the API shows it.
func (s AlertState) String() string {
	switch s {
	case StateInactive:
		return "inactive"
	case StatePending:
		return "pending"
	case StateFiring:
		return "firing"
	}
	return "unknown"
}

// Alert is one alert of an alerting rule: a series of its expression's
// result.
type Alert struct {
	State       AlertState
	Labels      labels.Labels
	Annotations labels.Labels
	// Value is the expression's value at the last evaluation.
	Value float64
	// ActiveAt is the evaluation at which the alert became pending.
	ActiveAt time.Time
	// FiredAt is the evaluation at which it started firing.
	FiredAt time.Time
	// ResolvedAt is the evaluation at which it stopped firing; zero while
	// active.
	ResolvedAt time.Time
	// LastSentAt is the evaluation at which it was last sent.
	LastSentAt time.Time
	// ValidUntil is the endsAt sent with a firing alert.
	ValidUntil time.Time
	// KeepFiringSince is the evaluation since which it fires only because
	// of keep_firing_for.
	KeepFiringSince time.Time
}

// needsSending reports whether the alert is to be sent at ts: a firing
// alert every resendDelay, a resolved one once.
func (a *Alert) needsSending(ts time.Time, resendDelay time.Duration) bool {
	if a.State == StatePending {
		return false
	}
	if a.ResolvedAt.After(a.LastSentAt) {
		return true
	}
	return a.LastSentAt.Add(resendDelay).Before(ts)
}

// resolvedRetention is how long a resolved alert is kept, and sent again
// at each resend, so that an Alertmanager that missed it learns of it.
const resolvedRetention = 15 * time.Minute

// The series alerting rules write.
const (
	alertsMetric         = "ALERTS"
	alertsForStateMetric = "ALERTS_FOR_STATE"
	alertStateLabel      = "alertstate"
)

// AlertingRule turns its expression's series into alerts.
type AlertingRule struct {
	ruleStatus
	name           string
	expr           parser.Expr
	hold           time.Duration
	keepFiringFor  time.Duration
	labels         labels.Labels
	annotations    labels.Labels
	externalLabels map[string]string
	externalURL    string
	logger         *slog.Logger

	mu sync.Mutex
	// restored is set once the 'for' state has been restored (or needs no
	// restoring); until then the rule writes no ALERTS series.
	restored bool
	active   map[uint64]*Alert
}

// newAlertingRule returns an alerting rule. restored false makes it wait
// for its group to restore the 'for' state before it writes ALERTS and
// ALERTS_FOR_STATE.
func newAlertingRule(name string, expr parser.Expr, hold, keepFiringFor time.Duration, ls, annotations, externalLabels labels.Labels,
	externalURL string, restored bool, logger *slog.Logger,
) *AlertingRule {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &AlertingRule{
		name: name, expr: expr, hold: hold, keepFiringFor: keepFiringFor,
		labels: ls, annotations: annotations, externalLabels: externalLabels.Map(), externalURL: externalURL,
		logger: logger, restored: restored, active: map[uint64]*Alert{},
	}
}

// Name returns the alert's name.
func (r *AlertingRule) Name() string { return r.name }

// Labels returns the labels set on the alerts.
func (r *AlertingRule) Labels() labels.Labels { return r.labels }

// Annotations returns the annotation templates.
func (r *AlertingRule) Annotations() labels.Labels { return r.annotations }

// Query returns the rule's expression.
func (r *AlertingRule) Query() parser.Expr { return r.expr }

// HoldDuration is the rule's 'for'.
func (r *AlertingRule) HoldDuration() time.Duration { return r.hold }

// KeepFiringFor is the rule's keep_firing_for.
func (r *AlertingRule) KeepFiringFor() time.Duration { return r.keepFiringFor }

func (r *AlertingRule) key() string {
	return fmt.Sprintf("alert\x00%s\x00%s\x00%d\x00%d\x00%s\x00%s", r.name, r.expr.String(), r.hold, r.keepFiringFor, r.labels.String(), r.annotations.String())
}

// State returns the highest state of the rule's alerts: unknown before the
// first evaluation, inactive without an alert.
func (r *AlertingRule) State() AlertState {
	if r.GetEvaluationTimestamp().IsZero() {
		return StateUnknown
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := StateInactive
	for _, a := range r.active {
		s = max(s, a.State)
	}
	return s
}

// ActiveAlerts returns copies of the alerts pending or firing.
func (r *AlertingRule) ActiveAlerts() []*Alert {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*Alert
	for _, a := range r.active {
		if a.ResolvedAt.IsZero() {
			c := *a
			out = append(out, &c)
		}
	}
	return out
}

func (r *AlertingRule) setRestored() {
	r.mu.Lock()
	r.restored = true
	r.mu.Unlock()
}

// alertLabels returns the labels of the ALERTS or ALERTS_FOR_STATE series of
// an alert with labels ls (nil: the rule's own only).
func (r *AlertingRule) seriesLabels(metric string, ls labels.Labels, state AlertState) labels.Labels {
	b := labels.NewBuilder(r.labels)
	ls.Range(func(l labels.Label) { b.Set(l.Name, l.Value) })
	b.Set(model.MetricNameLabel, metric)
	b.Set(model.AlertNameLabel, r.name)
	if state != StateUnknown {
		b.Set(alertStateLabel, state.String())
	}
	return b.Labels()
}

// expander expands a label or annotation template for one sample.
func (r *AlertingRule) expand(ctx context.Context, text string, data any, ts time.Time, query QueryFunc, externalURL *url.URL) string {
	const defs = "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"
	e := template.NewTemplateExpander(ctx, defs+text, "__alert_"+r.name, data, model.Time(ts.UnixMilli()),
		template.QueryFunc(query), externalURL, nil)
	s, err := e.Expand()
	if err != nil {
		r.logger.Warn("Expanding alert template failed", "err", err, "data", data)
		return fmt.Sprintf("<error expanding template: %s>", err)
	}
	return s
}

func (r *AlertingRule) eval(ctx context.Context, ts time.Time, offset time.Duration, query QueryFunc, externalURL *url.URL, limit int) ([]sample, error) {
	res, err := query(ctx, r.expr.String(), ts.Add(-offset))
	if err != nil {
		return nil, err
	}
	current := make(map[uint64]*Alert, len(res))
	b := labels.NewBuilder(labels.EmptyLabels())
	for _, s := range res {
		data := template.AlertTemplateData(s.Metric.Map(), r.externalLabels, r.externalURL, s)
		b.Reset(s.Metric)
		b.Del(model.MetricNameLabel)
		r.labels.Range(func(l labels.Label) { b.Set(l.Name, r.expand(ctx, l.Value, data, ts, query, externalURL)) })
		b.Set(model.AlertNameLabel, r.name)
		var anns labels.ScratchBuilder
		r.annotations.Range(func(l labels.Label) { anns.Add(l.Name, r.expand(ctx, l.Value, data, ts, query, externalURL)) })
		ls := b.Labels()
		h := ls.Hash()
		if _, dup := current[h]; dup {
			return nil, ErrDuplicateAlertLabelSet
		}
		current[h] = &Alert{Labels: ls, Annotations: anns.Labels(), ActiveAt: ts, State: StatePending, Value: s.F}
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	for h, a := range current {
		if old, ok := r.active[h]; ok && old.State != StateInactive {
			old.Value, old.Annotations = a.Value, a.Annotations
			continue
		}
		r.active[h] = a // new, or active again after it resolved
	}

	var out []sample
	active := 0
	at := ts.Add(-offset).UnixMilli()
	for h, a := range r.active {
		if _, ok := current[h]; ok {
			a.KeepFiringSince = time.Time{}
		} else {
			keep := false
			if a.State == StateFiring && r.keepFiringFor > 0 {
				if a.KeepFiringSince.IsZero() {
					a.KeepFiringSince = ts
				}
				keep = ts.Sub(a.KeepFiringSince) < r.keepFiringFor
			}
			// A pending alert that goes away is forgotten; a resolved one
			// is kept for resolvedRetention.
			if a.State == StatePending || !a.ResolvedAt.IsZero() && ts.Sub(a.ResolvedAt) > resolvedRetention {
				delete(r.active, h)
			}
			if !keep {
				if a.State != StateInactive {
					a.State, a.ResolvedAt = StateInactive, ts
				}
				continue
			}
		}
		active++
		switch {
		case a.State == StatePending && ts.Sub(a.ActiveAt) >= r.hold:
			a.State, a.FiredAt = StateFiring, ts
		case a.State == StateFiring && ts.Sub(a.ActiveAt) < r.hold:
			// Restoring moved ActiveAt past the 'for' of a firing alert.
			a.State = StatePending
			a.FiredAt, a.LastSentAt, a.KeepFiringSince = time.Time{}, time.Time{}, time.Time{}
		}
		if r.restored {
			out = append(out,
				sample{metric: r.seriesLabels(alertsMetric, a.Labels, a.State), t: at, f: 1},
				sample{metric: r.seriesLabels(alertsForStateMetric, a.Labels, StateUnknown), t: at, f: float64(a.ActiveAt.Unix())})
		}
	}
	if limit > 0 && active > limit {
		r.active = map[uint64]*Alert{}
		return nil, fmt.Errorf("exceeded limit of %d with %d alerts", limit, active)
	}
	return out, nil
}

// alertsToSend returns copies of the alerts to send at ts and marks them
// sent; a firing alert is valid until ts + 4 x max(interval, resendDelay).
func (r *AlertingRule) alertsToSend(ts time.Time, resendDelay, interval time.Duration) []*Alert {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*Alert
	for _, a := range r.active {
		if !a.needsSending(ts, resendDelay) {
			continue
		}
		a.LastSentAt = ts
		a.ValidUntil = ts.Add(4 * max(interval, resendDelay))
		c := *a
		out = append(out, &c)
	}
	return out
}

// forStateMatchers selects the rule's ALERTS_FOR_STATE series: the labels
// of its own that are not templates.
func (r *AlertingRule) forStateMatchers() []*labels.Matcher {
	var ms []*labels.Matcher
	r.seriesLabels(alertsForStateMetric, labels.EmptyLabels(), StateUnknown).Range(func(l labels.Label) {
		if !strings.Contains(l.Value, "{{") {
			ms = append(ms, labels.MustNewMatcher(labels.MatchEqual, l.Name, l.Value))
		}
	})
	return ms
}

// copyAlerts takes the alerts of from, a rule of the same definition.
func (r *AlertingRule) copyAlerts(from *AlertingRule) {
	from.mu.Lock()
	defer from.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	for h, a := range from.active {
		r.active[h] = a
	}
}
