package promreg

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRegister(t *testing.T) {
	newCounter := func(help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "shale_test_total", Help: help})
	}
	reg := prometheus.NewRegistry()

	first := newCounter("h")
	if err := Register(reg, &first); err != nil {
		t.Fatal(err)
	}
	second := newCounter("h")
	if err := Register(reg, &second); err != nil {
		t.Fatalf("an equal collector: %v", err)
	}
	if second != first {
		t.Fatal("an equal collector was not replaced by the registered one")
	}
	second.Inc()
	if n := testutil.ToFloat64(first); n != 1 {
		t.Fatalf("the shared counter is %v, want 1", n)
	}

	// Same name, other help: a conflict, returned, *c untouched.
	other := newCounter("other help")
	keep := other
	if err := Register(reg, &other); err == nil || other != keep {
		t.Fatalf("conflicting help: err %v, collector replaced %v", err, other != keep)
	}

	// An equal collector of another type: a Gauge where a Counter is.
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "shale_test_total", Help: "h"})
	var are prometheus.AlreadyRegisteredError
	if err := Register(reg, &gauge); !errors.As(err, &are) {
		t.Fatalf("a Gauge where a Counter is registered: err %v, want AlreadyRegisteredError", err)
	}

	var none prometheus.Counter = newCounter("h")
	if err := Register(nil, &none); err != nil {
		t.Fatalf("nil registerer: %v", err)
	}
}

func TestSet(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := NewSet(reg)
	c := a.Counter("shale_test_total", "h")
	v := a.CounterVec("shale_test_by_kind_total", "h", "kind")
	if err := a.Err(); err != nil {
		t.Fatal(err)
	}

	// A second Set on the registry shares the series.
	b := NewSet(reg)
	b.Counter("shale_test_total", "h").Inc()
	b.CounterVec("shale_test_by_kind_total", "h", "kind").WithLabelValues("x").Add(2)
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(c); n != 1 {
		t.Fatalf("shared counter %v, want 1", n)
	}
	if n := testutil.ToFloat64(v.WithLabelValues("x")); n != 2 {
		t.Fatalf("shared vector %v, want 2", n)
	}

	// Conflicts are all kept: other help, then other labels.
	bad := NewSet(reg)
	bad.Counter("shale_test_total", "other help")
	bad.CounterVec("shale_test_by_kind_total", "h", "other")
	bad.Gauge("shale_test_gauge", "h")
	if err := bad.Err(); err == nil || len(bad.errs) != 2 {
		t.Fatalf("conflicts: err %v, %d kept, want 2", err, len(bad.errs))
	}

	none := NewSet(nil)
	if h := none.Histogram(prometheus.HistogramOpts{Name: "shale_test_seconds", Help: "h"}); h == nil || none.Err() != nil {
		t.Fatalf("nil registerer: histogram %v, err %v", h, none.Err())
	}
}
