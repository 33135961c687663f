// Package promreg registers Prometheus collectors the one way Shale does it:
// a collector already registered by another instance (two LSMs, buckets or
// handlers on one registry) is reused, so they share its series; any other
// registration error is returned.
//
// It imports no Shale package, so that every package may import it.
package promreg

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers *c with reg. If reg already holds an equal collector
// (same descriptors) that is a C, *c is replaced by it, so the caller's
// updates reach the series already exposed. A nil reg registers nothing.
//
// Any other error, such as a metric of the same name with other labels or
// help, or an equal collector of another type, is returned and *c is left
// as it was. It is neither swallowed, which would leave metrics missing with
// no word why, nor a panic: the registry and whatever it held before belong
// to the caller (a program that embeds Shale registers its own metrics), so a
// conflict is the caller's to handle, and a constructor that registers
// metrics returns it like any other error of its setup.
//
// Reuse is right only for collectors that hold nothing but their series
// (counters, gauges, histograms and their vectors). A collector that reads
// one instance's state (a GaugeFunc, a custom Collector) must be registered
// with reg.Register, so that a second instance fails rather than exposing
// the first's state.
func Register[C prometheus.Collector](reg prometheus.Registerer, c *C) error {
	if reg == nil {
		return nil
	}
	err := reg.Register(*c)
	if err == nil {
		return nil
	}
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		return err
	}
	existing, ok := are.ExistingCollector.(C)
	if !ok {
		return fmt.Errorf("%w: the one registered is a %T, not a %T", err, are.ExistingCollector, *c)
	}
	*c = existing
	return nil
}

// Set makes counters, gauges and histograms and registers each with
// Register's rule as it is made, so a constructor lists each metric once, by
// name and help, and checks one error at the end.
type Set struct {
	reg  prometheus.Registerer
	errs []error
}

// NewSet returns a Set registering with reg (nil: none).
func NewSet(reg prometheus.Registerer) *Set { return &Set{reg: reg} }

// Err returns every registration error so far, joined; nil if none.
func (s *Set) Err() error { return errors.Join(s.errs...) }

// Counter returns the counter of that name, made and registered.
func (s *Set) Counter(name, help string) prometheus.Counter {
	return add(s, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
}

// CounterVec returns the counter vector of that name, made and registered.
func (s *Set) CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return add(s, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

// Gauge returns the gauge of that name, made and registered.
func (s *Set) Gauge(name, help string) prometheus.Gauge {
	return add(s, prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help}))
}

// GaugeVec returns the gauge vector of that name, made and registered.
func (s *Set) GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return add(s, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels))
}

// Histogram returns the histogram opts describe, made and registered.
func (s *Set) Histogram(opts prometheus.HistogramOpts) prometheus.Histogram {
	return add(s, prometheus.NewHistogram(opts))
}

// HistogramVec returns the histogram vector opts describe, made and
// registered.
func (s *Set) HistogramVec(opts prometheus.HistogramOpts, labels ...string) *prometheus.HistogramVec {
	return add(s, prometheus.NewHistogramVec(opts, labels))
}

func add[C prometheus.Collector](s *Set, c C) C {
	if err := Register(s.reg, &c); err != nil {
		s.errs = append(s.errs, err)
	}
	return c
}
