package rules

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaledb/shale/internal/promreg"
)

// metrics are the rule manager's, with Prometheus' names, so that the
// dashboards made for Prometheus work.
type metrics struct {
	evalDuration          prometheus.Summary
	evalDurationHist      prometheus.Histogram
	iterationDuration     prometheus.Summary
	iterationDurationHist prometheus.Histogram

	iterationsMissed, iterationsScheduled, evalTotal, evalFailures *prometheus.CounterVec

	groupInterval, groupLastEvalTime, groupLastDuration, groupLastRuleDurationSum,
	groupLastRestoreDuration, groupRules, groupSamples *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	hist := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: name, Help: help, Buckets: []float64{.01, .1, 1, 10},
			NativeHistogramBucketFactor: 1.1, NativeHistogramMaxBucketNumber: 100, NativeHistogramMinResetDuration: time.Hour,
		})
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"rule_group"})
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"rule_group"})
	}
	m := &metrics{
		evalDuration: prometheus.NewSummary(prometheus.SummaryOpts{
			Name: "prometheus_rule_evaluation_duration_seconds", Help: "The duration for a rule to execute.",
			Objectives: map[float64]float64{0.5: 0.05, 0.9: 0.01, 0.99: 0.001},
		}),
		evalDurationHist: hist("prometheus_rule_evaluation_duration_histogram_seconds", "The duration for a rule to execute."),
		iterationDuration: prometheus.NewSummary(prometheus.SummaryOpts{
			Name: "prometheus_rule_group_duration_seconds", Help: "The duration of rule group evaluations.",
			Objectives: map[float64]float64{0.01: 0.001, 0.05: 0.005, 0.5: 0.05, 0.90: 0.01, 0.99: 0.001},
		}),
		iterationDurationHist: hist("prometheus_rule_group_duration_histogram_seconds", "The duration of rule group evaluations."),
		iterationsMissed: counter("prometheus_rule_group_iterations_missed_total",
			"The total number of rule group evaluations missed due to slow rule group evaluation."),
		iterationsScheduled: counter("prometheus_rule_group_iterations_total",
			"The total number of scheduled rule group evaluations, whether executed or missed."),
		evalTotal:     counter("prometheus_rule_evaluations_total", "The total number of rule evaluations."),
		evalFailures:  counter("prometheus_rule_evaluation_failures_total", "The total number of rule evaluation failures."),
		groupInterval: gauge("prometheus_rule_group_interval_seconds", "The interval of a rule group."),
		groupLastEvalTime: gauge("prometheus_rule_group_last_evaluation_timestamp_seconds",
			"The timestamp of the last rule group evaluation in seconds."),
		groupLastDuration: gauge("prometheus_rule_group_last_duration_seconds", "The duration of the last rule group evaluation."),
		groupLastRuleDurationSum: gauge("prometheus_rule_group_last_rule_duration_sum_seconds",
			"The sum of time in seconds it took to evaluate each rule in the group regardless of concurrency. This should be higher than the group duration if rules are evaluated concurrently."),
		groupLastRestoreDuration: gauge("prometheus_rule_group_last_restore_duration_seconds",
			"The duration of the last alert rules alerts restoration using the `ALERTS_FOR_STATE` series."),
		groupRules:   gauge("prometheus_rule_group_rules", "The number of rules."),
		groupSamples: gauge("prometheus_rule_group_last_evaluation_samples", "The number of samples returned during the last rule group evaluation."),
	}
	err := errors.Join(
		promreg.Register(reg, &m.evalDuration), promreg.Register(reg, &m.evalDurationHist),
		promreg.Register(reg, &m.iterationDuration), promreg.Register(reg, &m.iterationDurationHist),
		promreg.Register(reg, &m.iterationsMissed), promreg.Register(reg, &m.iterationsScheduled),
		promreg.Register(reg, &m.evalTotal), promreg.Register(reg, &m.evalFailures),
		promreg.Register(reg, &m.groupInterval), promreg.Register(reg, &m.groupLastEvalTime),
		promreg.Register(reg, &m.groupLastDuration), promreg.Register(reg, &m.groupLastRuleDurationSum),
		promreg.Register(reg, &m.groupLastRestoreDuration), promreg.Register(reg, &m.groupRules),
		promreg.Register(reg, &m.groupSamples),
	)
	if err != nil {
		return nil, fmt.Errorf("register rule metrics: %w", err)
	}
	return m, nil
}

// addGroup makes the series of a group exist from its start.
func (m *metrics) addGroup(key string, g *Group) {
	for _, c := range []*prometheus.CounterVec{m.iterationsMissed, m.iterationsScheduled, m.evalTotal, m.evalFailures} {
		c.WithLabelValues(key)
	}
	for _, v := range []*prometheus.GaugeVec{m.groupLastEvalTime, m.groupLastDuration, m.groupLastRuleDurationSum, m.groupSamples} {
		v.WithLabelValues(key)
	}
	m.groupRules.WithLabelValues(key).Set(float64(len(g.rules)))
	m.groupInterval.WithLabelValues(key).Set(g.interval.Seconds())
}

// deleteGroup removes the series of a group no longer evaluated.
func (m *metrics) deleteGroup(key string) {
	for _, c := range []*prometheus.CounterVec{m.iterationsMissed, m.iterationsScheduled, m.evalTotal, m.evalFailures} {
		c.DeleteLabelValues(key)
	}
	for _, v := range []*prometheus.GaugeVec{m.groupInterval, m.groupLastEvalTime, m.groupLastDuration, m.groupRules,
		m.groupSamples, m.groupLastRuleDurationSum, m.groupLastRestoreDuration} {
		v.DeleteLabelValues(key)
	}
}
